package conformance

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// Cassettes (Options.Cassettes, sandboxd conformance --cassettes DIR): each
// recording (*.rec.jsonl, docs/replay.md) in the directory is a behavioural
// case of the tool it names, replayed offline; a "cassette" check passes
// when the replay is identical and fails with the first divergence.

// cassetteExt names the recordings Run reads.
const cassetteExt = ".rec.jsonl"

type cassette struct {
	file string // relative to the directory
	rec  *executor.Recording
	err  error // unusable
}

// readCassettes reads every recording in dir (not its subdirectories).
func readCassettes(dir string) (map[string][]*cassette, []*cassette, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	byTool := map[string][]*cassette{}
	var bad []*cassette
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), cassetteExt) {
			continue
		}
		c := &cassette{file: e.Name()}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		c.rec, c.err = executor.ReadRecording(f)
		f.Close()
		if c.err != nil {
			bad = append(bad, c)
			continue
		}
		byTool[c.rec.Header.ToolID] = append(byTool[c.rec.Header.ToolID], c)
	}
	return byTool, bad, nil
}

// replayCassettes adds a "cassette" check per recording of tool.
func (r *runner) replayCassettes(ctx context.Context, tool *executor.Tool, add func(string, Status, toolerr.Code, string, ...any)) {
	cs := r.cassettes[tool.ID()]
	delete(r.cassettes, tool.ID())
	sort.Slice(cs, func(i, j int) bool { return cs[i].file < cs[j].file })
	for _, c := range cs {
		cctx, cancel := context.WithTimeout(ctx, r.opts.CaseTimeout)
		rep, err := tool.Replay(cctx, c.rec)
		cancel()
		switch {
		case err != nil:
			add("cassette", StatusFail, toolerr.MalformedMessage, "%s cannot be replayed: %v", c.file, err)
		case !rep.Identical:
			add("cassette", StatusFail, "", "%s diverged: %s", c.file, rep.Divergence)
		default:
			fuel := int64(0)
			if rep.Result != nil {
				fuel = rep.Result.Usage.Fuel
			}
			add("cassette", StatusPass, "", "%s replays identically offline (%d host calls, outcome %s, fuel %d)", c.file, len(c.rec.Calls), c.rec.Trailer.Outcome, fuel)
		}
	}
}

// orphanCassettes reports the recordings no tool of the pack took, and
// the unusable ones.
func (r *runner) orphanCassettes() {
	for _, c := range r.badCassettes {
		r.rep.add(c.file, "cassette", StatusFail, string(toolerr.MalformedMessage), "%s is unusable: %v", c.file, c.err)
	}
	ids := make([]string, 0, len(r.cassettes))
	for id := range r.cassettes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, c := range r.cassettes[id] {
			r.rep.add(c.file, "cassette", StatusFail, string(toolerr.ToolNotInPack), "%s is a recording of tool %q, which is not in the pack", c.file, id)
		}
	}
}
