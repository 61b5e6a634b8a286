package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// PackFile is the optional pack.json at the root of a pack directory.
type PackFile struct {
	// Deploy marks a pack meant for deployment: a filesystem codeArtifactRef
	// (dev mode only) is then a failure of the artifact-ref check.
	Deploy bool `json:"deploy"`
}

// MaxManifestFileSize caps a manifest file; a larger one is refused unread.
const MaxManifestFileSize = 4 << 20

// packTool is one manifest file found in a pack.
type packTool struct {
	file string // relative to the pack directory
	dir  string // absolute directory of the manifest (base for filesystem refs)
	raw  []byte
	err  error // reading failed
}

// findManifests lists the pack's manifests: *.tool.json and */tool.json,
// sorted by path.
func findManifests(dir string) ([]packTool, error) {
	var files []string
	for _, pat := range []string{"*.tool.json", "*/tool.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	out := make([]packTool, 0, len(files))
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		abs, err := filepath.Abs(filepath.Dir(f))
		if err != nil {
			return nil, err
		}
		pt := packTool{file: filepath.ToSlash(rel), dir: abs}
		pt.raw, pt.err = readCapped(f, MaxManifestFileSize)
		out = append(out, pt)
	}
	return out, nil
}

// findCaseFiles lists *.cases.json files in dirs (each at most once),
// sorted by path.
func findCaseFiles(dirs ...string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d, "*.cases.json"))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			abs, err := filepath.Abs(f)
			if err != nil {
				return nil, err
			}
			if !seen[abs] {
				seen[abs] = true
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func readPackFile(dir string) (PackFile, error) {
	var pf PackFile
	b, err := readCapped(filepath.Join(dir, "pack.json"), MaxManifestFileSize)
	if os.IsNotExist(err) {
		return pf, nil
	}
	if err != nil {
		return pf, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return pf, fmt.Errorf("pack.json: %v", err)
	}
	return pf, nil
}

func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over the %d-byte cap", filepath.Base(path), max)
	}
	return b, nil
}
