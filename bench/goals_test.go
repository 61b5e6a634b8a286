package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
)

// Issue 17's table, row by row, and issue 28's recording rows: every
// section that measures one of its rows records the figure against the
// goal here (and says met or not met beside its own table); the report
// ends with all of them in one table.

// goalRow is one measured row against its goal.
type goalRow struct {
	row, figure, goal, verdict string
}

var goals []goalRow

// verdict words a comparison with a goal.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

// addGoal records a row and returns its verdict.
func addGoal(row, figure, goal string, met bool) string {
	v := verdict(met)
	goals = append(goals, goalRow{row, figure, goal, v})
	return v
}

// addUnjudged records a row whose figure cannot be judged in this run.
func addUnjudged(row, figure, goal, why string) string {
	v := "not judged: " + why
	goals = append(goals, goalRow{row, figure, goal, v})
	return v
}

// ratioOf is a/b (0 when b is 0).
func ratioOf(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func writeGoals(r *report) {
	r.p("## Issues 17 and 28: every row against its goal")
	r.p("")
	r.p("Each figure is this run's (the section above it says how it was measured).")
	r.p("")
	r.p("| row | figure | goal | verdict |")
	r.p("|---|---|---|---|")
	for _, g := range goals {
		r.p("| %s | %s | %s | **%s** |", g.row, g.figure, g.goal, g.verdict)
	}
	r.p("")
}

// privateBytes returns the process's private resident memory (Linux
// /proc/self/smaps_rollup Private_Clean + Private_Dirty), or -1.
func privateBytes() int64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return -1
	}
	var kb int64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "Private_Clean:" || f[0] == "Private_Dirty:") {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			kb += n
		}
	}
	return kb << 10
}

func fmtRatio(x float64) string { return fmt.Sprintf("%.2f×", x) }

// freshLoad is the never-used fresh-instance cost measured under load.
type freshLoad struct {
	never, reused, cost time.Duration
	n                   int
}

// newFreshLoad is the medians of the fresh-instance calls in fresh and the
// reused calls in reused, and their difference.
func newFreshLoad(fresh, reused *hist) freshLoad {
	f := freshLoad{never: fresh.quantile(0.5), reused: reused.quantile(0.5), n: fresh.n}
	f.cost = f.never - f.reused
	return f
}

// vsIdle is the loaded cost over the idle one.
func (f freshLoad) vsIdle(idle time.Duration) float64 { return ratioOf(f.cost, idle) }

// goFreshUnderLoad measures never-used calls (and reused ones, in turn)
// while 2 goroutines call the never-used tool back to back: what a strict
// tool's caller meets when others call it too (the pool's refill competes
// with the callers, and an empty pool instantiates in the call).
func goFreshUnderLoad(t *testing.T, never, reused *executor.Tool, in []byte) freshLoad {
	ctx := context.Background()
	finish := callBackToBack(t, never, in)
	hn, hr := newHist(), newHist()
	n := 40
	if *quick {
		n = 8
	}
	for i := 0; i < n+2; i++ {
		for j, tool := range []*executor.Tool{never, reused} {
			t0 := time.Now()
			if _, err := tool.Invoke(ctx, executor.Request{Input: in}); err != nil {
				finish()
				t.Fatal(err)
			}
			if i >= 2 {
				[]*hist{hn, hr}[j].add(time.Since(t0))
			}
		}
	}
	finish()
	return newFreshLoad(hn, hr)
}

// freshByMethod measures a fresh-instance cost by issue 26's method: a call
// of fresh and a call of reused (the same guest under posture none, an
// instance kept across calls), in turn, each from the public API in this
// process after a busy wait of pace (so that fresh's pool has refilled),
// with 2 goroutines calling other back to back throughout when other is not
// nil; the first warm rounds are not counted (a strict tool learns the pages
// its instances touch from its first 64 calls). Every counted call of fresh
// must have got its instance as want says. cost = p50(fresh) − p50(reused).
func freshByMethod(t *testing.T, fresh, reused, other *executor.Tool, in []byte, pace time.Duration, warm, n int, want executor.Acquisition) freshLoad {
	ctx := context.Background()
	finish := func() {}
	if other != nil {
		finish = callBackToBack(t, other, in)
	}
	if *quick {
		n = max(n/5, 4)
	}
	hf, hr := newHist(), newHist()
	for i := 0; i < warm+n; i++ {
		for j, tool := range []*executor.Tool{fresh, reused} {
			busyWait(pace)
			t0 := time.Now()
			res, err := tool.Invoke(ctx, executor.Request{Input: in})
			d := time.Since(t0)
			if err != nil {
				finish()
				t.Fatal(err)
			}
			if i >= warm {
				[]*hist{hf, hr}[j].add(d)
				if j == 0 && res.Acquired != want {
					finish()
					t.Fatalf("method: a call of the fresh-instance tool got its instance %q, want %q", res.Acquired, want)
				}
			}
		}
	}
	finish()
	return newFreshLoad(hf, hr)
}

// freshMethod holds the standard-Go guest's fresh-instance costs by issue
// 26's method (freshByMethod).
type freshMethod struct {
	idle, loaded, recycled, unpooled freshLoad
}

// methodWarm and methodRounds are freshByMethod's uncounted and counted
// rounds for the strict tool (past its 64 learning calls).
const (
	methodWarm   = 70
	methodRounds = 100
)

// goFreshByMethod measures the go_echo guest at path by issue 26's method,
// each case on its own executor (compile cache dir): strict (pool of 2)
// idle and with 2 other callers of a third tool, context-isolated with
// recycling (the default; pool of 2) and unpooled (pool size 0).
func goFreshByMethod(t *testing.T, dir, path string, in []byte) freshMethod {
	const pace = 20 * time.Millisecond
	var m freshMethod
	tool := func(e *executor.Executor, id, posture string) *executor.Tool {
		return loadTool(t, e, toolManifest("bench.method."+id, fsRef(path), true, posture, 5000))
	}
	e := newExecutor(t, dir, 2)
	strict, reused, other := tool(e, "strict", "strict"), tool(e, "reused", "none"), tool(e, "other", "none")
	m.idle = freshByMethod(t, strict, reused, nil, in, pace, methodWarm, methodRounds, executor.AcquiredPooled)
	m.loaded = freshByMethod(t, strict, reused, other, in, pace, 5, methodRounds, executor.AcquiredPooled)
	if strict.Stats().ImageInstances == 0 {
		t.Fatal("method: no strict instance was loaded from the image")
	}
	er := newExecutor(t, dir, 2)
	m.recycled = freshByMethod(t, tool(er, "recycled", "context-isolated"), tool(er, "reused", "none"), nil, in, pace, 5, methodRounds, executor.AcquiredRecycled)
	e0 := newExecutor(t, dir, 0)
	m.unpooled = freshByMethod(t, tool(e0, "unpooled", "context-isolated"), tool(e0, "reused", "none"), nil, in, pace, 5, methodRounds, executor.AcquiredImage)
	return m
}

// callBackToBack starts 2 goroutines calling tool with in back to back. The
// function it returns stops them, waits for them and fails t if a call
// failed.
func callBackToBack(t *testing.T, tool *executor.Tool, in []byte) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tool.Invoke(context.Background(), executor.Request{Input: in}); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	return func() {
		close(stop)
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
	}
}
