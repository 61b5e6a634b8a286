package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
)

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// progress draws a one-line transfer meter on stderr when stderr is a
// terminal (also when stdout is captured: REF=$(sandboxd pull …));
// otherwise it stays silent (the command prints one line per artifact on
// stdout).
type progress struct {
	w     io.Writer
	on    bool
	start time.Time
	last  time.Time
	done  map[string]int64
	total map[string]int64
	drawn bool
}

func newProgress(stdout, stderr io.Writer) *progress {
	return &progress{w: stderr, on: isTerminal(stderr), start: time.Now(), done: map[string]int64{}, total: map[string]int64{}}
}

func (p *progress) update(u artifact.Progress) {
	if !p.on {
		return
	}
	p.done[u.Digest], p.total[u.Digest] = u.Done, u.Total
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond || u.Done == u.Total {
		p.last = now
		p.draw()
	}
}

func (p *progress) draw() {
	var done, total int64
	for d, n := range p.done {
		done += n
		total += p.total[d]
	}
	rate := float64(done) / max(time.Since(p.start).Seconds(), 1e-3)
	fmt.Fprintf(p.w, "\r%d blobs  %s / %s  %s/s   ", len(p.done), humanBytes(done), humanBytes(total), humanBytes(int64(rate)))
	p.drawn = true
}

func (p *progress) finish() {
	if p.drawn {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && isTTY(f.Fd())
}
