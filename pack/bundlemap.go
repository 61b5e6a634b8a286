package pack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
)

// BundleMap maps the source path an indexer records as a modulePath
// (tools/echo/index.ts) to the file a pack service runs, relative to the
// module root (tools/echo/index.wasm), optionally followed by #export.
// It is the JSON object of Kindgi's dist/bundle-map.json. A nil BundleMap
// maps nothing.
type BundleMap map[string]string

// ReadBundleMap reads and checks a bundle map file.
func ReadBundleMap(file string) (BundleMap, error) {
	b, err := artifact.ReadRegular(file, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("bundle map: %w", err)
	}
	return ParseBundleMap(b)
}

// ParseBundleMap decodes a bundle map: a JSON object of non-empty strings.
// Keys and targets are relative forward-slash paths ("./" prefixes are
// dropped) that stay inside the module root; a target may end in
// "#export".
func ParseBundleMap(data []byte) (BundleMap, error) {
	var raw map[string]string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("bundle map: want a JSON object of source path → module path strings: %v", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("bundle map: want a JSON object, got null")
	}
	if dec.More() {
		return nil, fmt.Errorf("bundle map: data after the JSON object")
	}
	m := make(BundleMap, len(raw))
	for k, v := range raw {
		key := cleanRel(k)
		if !validRel(key) {
			return nil, fmt.Errorf("bundle map: source path %q must be a relative forward-slash path", k)
		}
		target, export, _ := strings.Cut(v, "#")
		target = cleanRel(target)
		if !validRel(target) {
			return nil, fmt.Errorf("bundle map: %q maps to %q, which is not a relative forward-slash path inside the module root", k, v)
		}
		if strings.Contains(v, "#") && export == "" {
			return nil, fmt.Errorf("bundle map: %q maps to %q, whose #export is empty", k, v)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("bundle map: source path %q appears twice", key)
		}
		if export != "" {
			target += "#" + export
		}
		m[key] = target
	}
	return m, nil
}

// Resolve returns the file modulePath runs from and the export named for
// it ("" when none). A modulePath the map does not name resolves to itself.
func (m BundleMap) Resolve(modulePath string) (file, export string) {
	t, ok := m[cleanRel(modulePath)]
	if !ok {
		return modulePath, ""
	}
	file, export, _ = strings.Cut(t, "#")
	return file, export
}

// entryExports are the #export names sandboxd can honour: a Wasm module
// has one entry point (handle for a reactor, _start for a command), so a
// bundle map may name it or the JavaScript-style "default", nothing else.
var entryExports = map[string]bool{"": true, "default": true, "handle": true, "_start": true}

func cleanRel(p string) string {
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	return p
}

func validRel(p string) bool {
	return p != "" && !strings.Contains(p, "\\") && !path.IsAbs(p) && fs.ValidPath(p)
}
