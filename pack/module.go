package pack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ModuleCandidates lists, in order, the files under the module root that
// modulePath may run from: the bundle map's target (or modulePath itself
// when the map does not name it) and, when that does not end in .wasm, the
// .wasm file beside it with the same base name (tools/echo/index.ts →
// tools/echo/index.wasm). A #NAME suffix on modulePath (the export an
// Extism plug-in's tool calls, see manifest.SplitModulePath) is not part of
// the file's path: it is dropped here and stays in the manifest's
// modulePath, where the executor reads it. It fails for a path that would
// leave the root or a bundle-map #export sandboxd cannot select.
func ModuleCandidates(modulePath string, bm BundleMap) ([]string, error) {
	rel, _ := manifest.SplitModulePath(cleanRel(modulePath))
	if !validRel(rel) {
		return nil, fmt.Errorf("modulePath %q must be a relative forward-slash path inside the module root", modulePath)
	}
	file, export := bm.Resolve(rel)
	if !entryExports[export] {
		return nil, fmt.Errorf("the bundle map maps %s to %s#%s, but a Wasm module has one entry point (handle or _start): sandboxd cannot select export %q", rel, file, export, export)
	}
	out := []string{file}
	if ext := path.Ext(file); ext != ".wasm" {
		out = append(out, strings.TrimSuffix(file, ext)+".wasm")
	}
	return out, nil
}

// moduleFiles reads files under a module root: a directory (rootFiles)
// or a pack image's file system (imageFiles).
type moduleFiles interface {
	// read returns the regular file name (a slash path under the root), at
	// most max bytes.
	read(name string, max int64) ([]byte, error)
	// where names the file name for a problem.
	where(name string) string
}

// rootFiles is a module root directory; symlinks never escape it.
type rootFiles struct {
	root *os.Root
	dir  string
}

func (r rootFiles) read(name string, max int64) ([]byte, error) { return readIn(r.root, name, max) }
func (r rootFiles) where(name string) string {
	return filepath.Join(r.dir, filepath.FromSlash(name))
}

// readModule reads the module modulePath names under the module root (see
// ModuleCandidates) and returns it with the file it was read from. Symlinks never escape root; a FIFO never blocks.
func readModule(files moduleFiles, modulePath string, bm BundleMap) ([]byte, string, error) {
	candidates, err := ModuleCandidates(modulePath, bm)
	if err != nil {
		return nil, "", toolerr.Wrap(toolerr.InvalidToolDefinition, err, "")
	}
	var tried []string
	for _, c := range candidates {
		b, err := files.read(c, maxModuleBytes)
		if err == nil {
			return b, c, nil
		}
		if te := asRefusal(err); te != nil {
			return nil, "", te
		}
		tried = append(tried, fmt.Sprintf("%s: %v", files.where(c), err))
	}
	return nil, "", toolerr.New(toolerr.ArtifactUnavailable, "module not loadable: %s", strings.Join(tried, "; "))
}

// asRefusal returns the artifact-refused error within err (a pack image
// entry that is a symbolic link), nil for any other error.
func asRefusal(err error) *toolerr.Error {
	var te *toolerr.Error
	if errors.As(err, &te) && te.Code == toolerr.ArtifactRefused {
		return te
	}
	return nil
}

// readIn reads the regular file name under root, at most max bytes.
func readIn(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := artifact.OpenRegularIn(root, name) // a FIFO must not block the load (F13)
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			return nil, u
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%d bytes, over the %d-byte cap", st.Size(), max)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("over the %d-byte cap", max)
	}
	return buf.Bytes(), nil
}
