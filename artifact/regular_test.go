//go:build unix

package artifact_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestF13FIFOModulePath: a FIFO (or any non-regular file) at a module path is
// refused at once with artifact-unavailable; open(2) of a FIFO without a
// writer used to block forever (F13).
func TestF13FIFOModulePath(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "link.wasm")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"fifo":              "fifo.wasm",
		"symlink to a fifo": "link.wasm",
		"directory":         ".",
		"char device":       "/dev/null",
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := artifact.Filesystem{BaseDir: dir}.Resolve(context.Background(), artifact.Ref{Kind: artifact.KindFilesystem, ModulePath: p})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, toolerr.ArtifactUnavailable) || !errors.Is(err, artifact.ErrNotRegular) {
					t.Fatalf("err = %v, want artifact-unavailable wrapping ErrNotRegular", err)
				}
				t.Logf("%s refused in %v: %v", p, time.Since(start), err)
			case <-time.After(5 * time.Second):
				t.Fatalf("Resolve of %s blocked for 5 s", p)
			}
		})
	}
}

// TestOpenRegularIn: the os.Root variant refuses a FIFO without blocking and
// still opens regular files.
func TestOpenRegularIn(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "f"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	done := make(chan error, 1)
	go func() {
		f, err := artifact.OpenRegularIn(root, "f")
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, artifact.ErrNotRegular) {
			t.Fatalf("err = %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OpenRegularIn blocked on a FIFO")
	}
	f, err := artifact.OpenRegularIn(root, "m.wasm")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := artifact.ReadRegular(filepath.Join(dir, "f"), 1<<20); !errors.Is(err, toolerr.ArtifactUnavailable) {
		t.Fatalf("ReadRegular(fifo) = %v", err)
	}
	if b, err := artifact.ReadRegular(filepath.Join(dir, "m.wasm"), 4); !errors.Is(err, toolerr.ArtifactRefused) {
		t.Fatalf("ReadRegular over cap = %q, %v", b, err)
	}
}
