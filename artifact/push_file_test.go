package artifact_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestPushFileModules: a module given as a File is hashed into the cache
// and uploaded from that copy. The artifact is the one the same bytes in
// memory make; the cache holds the copy (mode 0600), which later edits of
// the file do not touch, so the pushing host resolves it with the
// registry stopped; bad files are refused before anything is sent.
func TestPushFileModules(t *testing.T) {
	reg := registrytest.Start(t)
	host := reg.Host
	echo := fixture(t, "echo_reactor.wasm")
	big := fixture(t, "go_echo_reactor.wasm")
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"echo.wasm": echo, "big.wasm": big, "text.wasm": []byte("not wasm at all")})
	cacheDir := filepath.Join(t.TempDir(), "cache")
	withCache := func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithCacheDir(cacheDir) }
	o := newOCI(t, host, withCache)

	var partial int
	fromFiles, err := o.Push(ctxT(t), host+"/file/a:1", "1", []artifact.PushModule{
		{Title: "echo.wasm", File: filepath.Join(dir, "echo.wasm")},
		{Title: "big.wasm", File: filepath.Join(dir, "big.wasm")},
	}, artifact.WithProgress(func(p artifact.Progress) {
		if p.Done > 0 && p.Done < p.Total {
			partial++
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if partial == 0 {
		t.Error("no progress was reported while a file module uploaded")
	}
	fromMemory := pushWasm(t, newOCI(t, host, nil), host+"/file/b:1", "1",
		artifact.PushModule{Title: "echo.wasm", Wasm: echo}, artifact.PushModule{Title: "big.wasm", Wasm: big})
	if fromFiles.Digest != fromMemory.Digest {
		t.Fatalf("file push made %s, in-memory push %s", fromFiles.Digest, fromMemory.Digest)
	}
	for _, m := range [][]byte{echo, big} {
		p := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(artifact.Digest(m), "sha256:"))
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("the pushed module is not in the cache: %v", err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("cached copy %s has mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(ents) != 0 {
		t.Errorf("push left %d files in the cache's tmp/", len(ents))
	}

	// The file changes after the push: the cache keeps what was pushed.
	if err := os.WriteFile(filepath.Join(dir, "big.wasm"), echo, 0o644); err != nil {
		t.Fatal(err)
	}
	reg.Stop()
	m, err := newOCI(t, host, withCache).Resolve(ctxT(t), ociRef(fromFiles.Ref, "big.wasm", "1"))
	if err != nil {
		t.Fatalf("resolving the pushed artifact from the cache with the registry stopped: %v", err)
	}
	if !bytes.Equal(m.Bytes, big) {
		t.Fatal("the cache's copy changed with the source file")
	}

	// Refusals, before any request (the registry is stopped).
	for _, c := range []struct {
		name string
		mod  artifact.PushModule
		cap  int64
		code toolerr.Code
	}{
		{"not WebAssembly", artifact.PushModule{Title: "t.wasm", File: filepath.Join(dir, "text.wasm")}, 0, toolerr.ArtifactRefused},
		{"over the cap", artifact.PushModule{Title: "e.wasm", File: filepath.Join(dir, "echo.wasm")}, 64, toolerr.ArtifactRefused},
		{"missing", artifact.PushModule{Title: "n.wasm", File: filepath.Join(dir, "none.wasm")}, 0, toolerr.ArtifactUnavailable},
		{"a directory", artifact.PushModule{Title: "d.wasm", File: dir}, 0, toolerr.ArtifactUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOCI(t, host, func(cfg artifact.OCIConfig) artifact.OCIConfig {
				if c.cap > 0 {
					cfg = cfg.WithMaxBlobSize(c.cap)
				}
				return cfg.WithRequestTimeout(5 * time.Second)
			})
			_, err := o.Push(ctxT(t), host+"/file/c:1", "1", []artifact.PushModule{c.mod})
			te := wantCode(t, err, c.code)
			t.Logf("%s", te.Message)
		})
	}

	// An OCI layout push reads the file.
	layout := filepath.Join(t.TempDir(), "layout")
	a, err := o.Push(ctxT(t), artifact.LayoutPrefix+layout+":1", "1", []artifact.PushModule{{Title: "echo.wasm", File: filepath.Join(dir, "echo.wasm")}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := o.Resolve(ctxT(t), ociRef(a.Ref, "echo.wasm", "1")); err != nil || !bytes.Equal(m.Bytes, echo) {
		t.Fatalf("layout push of a file module: %v", err)
	}
}
