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
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ModuleCandidates lists, in order, the files under the module root that
// modulePath may run from: the bundle map's target (or modulePath itself
// when the map does not name it) and, when that does not end in .wasm, the
// .wasm file beside it with the same base name (tools/echo/index.ts →
// tools/echo/index.wasm). A #NAME suffix on modulePath (the export an
// Extism plug-in's tool calls, see executor.SplitModulePath) is not part of
// the file's path: it is dropped here and stays in the manifest's
// modulePath, where the executor reads it. It fails for a path that would
// leave the root or a bundle-map #export sandboxd cannot select.
func ModuleCandidates(modulePath string, bm BundleMap) ([]string, error) {
	rel, _ := executor.SplitModulePath(cleanRel(modulePath))
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

// readModule reads the module modulePath names under root (see
// ModuleCandidates) and returns it with the file it was read from. Symlinks never escape root; a FIFO never blocks.
func readModule(root *os.Root, rootDir, modulePath string, bm BundleMap) ([]byte, string, error) {
	candidates, err := ModuleCandidates(modulePath, bm)
	if err != nil {
		return nil, "", toolerr.Wrap(toolerr.InvalidToolDefinition, err, "")
	}
	var tried []string
	for _, c := range candidates {
		b, err := readIn(root, c, maxModuleBytes)
		if err == nil {
			return b, c, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", filepath.Join(rootDir, filepath.FromSlash(c)), err))
	}
	return nil, "", toolerr.New(toolerr.ArtifactUnavailable, "module not loadable: %s", strings.Join(tried, "; "))
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
