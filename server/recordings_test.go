package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// --record-failures: a failed call (a trap, a declared error, an output
// that fails its schema) leaves a 0600 recording its call record names,
// which replays identically; a successful call leaves none; the directory
// keeps at most MaxFiles, the oldest dropped. --record-sample keeps one
// call in N whatever its outcome.
func TestRecordFailures(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "recs")
	src := server.StaticSource{Tools: standardTools(t)}
	// As serve --record-failures makes it: recorded calls run on pooled instances.
	ts := startWith(t, newExecutor(t, executor.NewConfig().WithRecordable(true)), src, server.Options{Record: server.Recordings{Dir: dir, Failures: true, MaxFiles: 3}})

	wantResult(t, ts.invoke(t, invokeBody("t.counter", `{}`)), `{"count":1}`)
	if files, _ := filepath.Glob(filepath.Join(dir, "*.rec.jsonl")); len(files) != 0 {
		t.Fatalf("a successful call was recorded: %v", files)
	}
	wantError(t, ts.invoke(t, invokeBody("t.trap", `{}`)), "handler-throw")
	calls := ts.logs.records(t, "call")
	last := calls[len(calls)-1]
	path, _ := last["recording"].(string)
	if path == "" || filepath.Dir(path) != dir {
		t.Fatalf("call record %v names no recording in %s", last, dir)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("recording %s: %v %v", path, st, err)
	}
	if d, err := os.Stat(dir); err != nil || d.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v", d, err)
	}

	// Replayed on its own: identical.
	f, _ := os.Open(path)
	rec, err := executor.ReadRecording(f)
	f.Close()
	if err != nil || rec.Trailer.Outcome != "handler-trap" {
		t.Fatalf("recording: %v %+v", err, rec)
	}
	e := newExecutor(t, executor.NewConfig().WithDevMode(true))
	var trap server.StaticTool
	for _, st := range src.Tools {
		if strings.Contains(string(st.Manifest), `"t.trap"`) {
			trap = st
		}
	}
	tool, err := e.Load(context.Background(), trap.Manifest, executor.WithModule(trap.Module))
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close(context.Background())
	rep, err := tool.Replay(context.Background(), rec)
	if err != nil || !rep.Identical {
		t.Fatalf("replay: %v %q", err, rep.Divergence)
	}

	for i := 0; i < 4; i++ {
		wantError(t, ts.invoke(t, invokeBody("t.declared", fmt.Sprintf(`{"i":%d}`, i))), "handler-throw")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.rec.jsonl"))
	if len(files) != 3 {
		t.Fatalf("%d recordings kept, want MaxFiles 3: %v", len(files), files)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the oldest recording %s is still there: %v", path, err)
	}

	sampled := filepath.Join(t.TempDir(), "sampled")
	ts2 := start(t, src, server.Options{Record: server.Recordings{Dir: sampled, Sample: 2}})
	for i := 0; i < 4; i++ {
		wantResult(t, ts2.invoke(t, invokeBody("t.counter", `{}`)), `{"count":1}`)
	}
	if files, _ := filepath.Glob(filepath.Join(sampled, "*.rec.jsonl")); len(files) != 2 {
		t.Fatalf("--record-sample 2 kept %d of 4 calls", len(files))
	}
}
