package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

// PackFile is sandboxd's own optional pack.json at the root of a directory
// of manifests: {"deploy": bool}, unknown fields refused. A pack.json with
// a "manifestVersion" key is Kindgi's instead (see package pack).
type PackFile struct {
	// Deploy marks a pack meant for deployment: a filesystem codeArtifactRef
	// (dev mode only) is then a failure of the artifact-ref check.
	Deploy bool `json:"deploy"`
}

// MaxManifestFileSize caps a manifest file; a larger one is refused unread.
const MaxManifestFileSize = pack.MaxFileBytes

// packTool is one tool or guardrail check of a pack, as the runner checks it.
type packTool struct {
	file string // where it was declared (relative to the pack), for reports
	dir  string // absolute base of its relative filesystem / oci-layout refs
	raw  []byte // the tool manifest (synthesized for a check)
	err  error  // reading failed
	// module is set when the pack names the module by path (an index):
	// modulePath is then reported instead of a codeArtifactRef.
	module     []byte
	modulePath string
	moduleFile string
	// check is set for a guardrail check.
	check *pack.Check
	// code is the native code of err (default invalid-tool-definition).
	code toolerr.Code
}

// loadedPack is a pack read for a run.
type loadedPack struct {
	tools, checks []packTool
	deploy        bool
	builtin       []string
	layout        pack.Layout
	index         []byte // the index file's bytes (index packs)
}

// fromPack turns a pack read by package pack, and the problems of its
// entries, into what the runner checks.
func fromPack(p *pack.Pack, problems []pack.Problem, root string) *loadedPack {
	lp := &loadedPack{deploy: p.Deploy, builtin: p.Builtin, layout: p.Layout}
	rel := func(src string) string {
		if r, err := filepath.Rel(root, src); err == nil && !strings.HasPrefix(r, "..") {
			return filepath.ToSlash(r)
		}
		return src
	}
	for _, t := range p.Tools {
		lp.tools = append(lp.tools, packTool{file: rel(t.Source), dir: t.BaseDir, raw: t.Manifest, module: t.Module, modulePath: modulePathOf(t.Manifest, t.Module), moduleFile: t.ModuleFile})
	}
	for i := range p.Checks {
		c := &p.Checks[i]
		lp.checks = append(lp.checks, packTool{file: rel(c.Source), dir: c.BaseDir, raw: c.Manifest, module: c.Module, modulePath: modulePathOf(c.Manifest, c.Module), moduleFile: c.ModuleFile, check: c})
	}
	for _, pr := range problems {
		code := pr.Code
		if code == "" {
			code = toolerr.InvalidToolDefinition
		}
		pt := packTool{file: rel(pr.Path), err: fmt.Errorf("%s", pr.Message), code: code}
		if pr.ID != "" {
			pt.file = pr.ID
		}
		lp.tools = append(lp.tools, pt)
	}
	return lp
}

// modulePathOf is the codeArtifactRef modulePath of a manifest whose
// module the pack supplies ("" otherwise).
func modulePathOf(man, module []byte) string {
	if module == nil {
		return ""
	}
	var m struct {
		Ref struct {
			ModulePath string `json:"modulePath"`
		} `json:"codeArtifactRef"`
	}
	_ = json.Unmarshal(man, &m)
	return m.Ref.ModulePath
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
