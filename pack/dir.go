package pack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ManifestPatterns are the files of a directory that are tool manifests,
// when the directory has no Kindgi pack.json: tool.json itself, *.tool.json
// and */tool.json. Nothing else is read as a manifest (an input.json or a
// *.cases.json beside them is not one).
var ManifestPatterns = []string{"tool.json", "*.tool.json", "*/tool.json"}

// Discover reads the pack in dir by sandboxd's one rule, shared by serve
// --tools and conformance:
//
//   - dir/pack.json with a "manifestVersion" key is a Kindgi pack.json: it
//     is validated against Kindgi's pack.schema.json 1.1.0, and the pack's
//     tools and guardrails are exactly those it lists, by {"path"} (a file
//     inside dir) or inline;
//   - otherwise the pack's tools are the files matching ManifestPatterns,
//     and a pack.json, if any, is sandboxd's own {"deploy": bool} (unknown
//     fields refused).
//
// Filesystem and oci-layout paths in a manifest resolve against the
// directory of the file that declares it (Tool.BaseDir). The Pack is nil
// when the directory or its pack.json cannot be read.
func Discover(dir string) (*Pack, []Problem) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return nil, []Problem{{Path: dir, Message: "not a readable directory"}}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, []Problem{{Path: dir, Message: err.Error()}}
	}
	pf := filepath.Join(dir, "pack.json")
	if _, err := os.Lstat(pf); errors.Is(err, fs.ErrNotExist) {
		return discoverManifests(dir, abs, false)
	}
	b, err := artifact.ReadRegular(pf, MaxFileBytes)
	if err != nil {
		return nil, []Problem{{Path: pf, Message: err.Error()}}
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, []Problem{{Path: pf, Message: fmt.Sprintf("pack.json is not a JSON object: %v", err)}}
	}
	if _, kindgi := keys["manifestVersion"]; kindgi {
		return readKindgiPack(dir, abs, pf, b)
	}
	var own struct {
		Deploy bool `json:"deploy"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&own); err != nil {
		return nil, []Problem{{Path: pf, Message: fmt.Sprintf("pack.json is neither Kindgi's (it has no \"manifestVersion\") nor sandboxd's {\"deploy\": bool}: %v", err)}}
	}
	return discoverManifests(dir, abs, own.Deploy)
}

func discoverManifests(dir, abs string, deploy bool) (*Pack, []Problem) {
	var files []string
	for _, pat := range ManifestPatterns {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, []Problem{{Path: dir, Message: err.Error()}}
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	p := &Pack{Layout: LayoutManifests, Deploy: deploy}
	var problems []Problem
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		rel = filepath.ToSlash(rel)
		b, err := artifact.ReadRegular(f, MaxFileBytes) // never blocks on a FIFO (F13)
		if err != nil {
			problems = append(problems, Problem{Path: rel, Message: err.Error()})
			continue
		}
		id, version := manifestHead(b)
		p.Tools = append(p.Tools, Tool{ID: id, Version: version, Source: rel, Manifest: b,
			BaseDir: filepath.Join(abs, filepath.Dir(filepath.FromSlash(rel)))})
	}
	if len(files) == 0 {
		problems = append(problems, Problem{Path: dir, Message: "no tool manifests (tool.json, *.tool.json, */tool.json) and no Kindgi pack.json"})
	}
	return p, problems
}

// kindgiPackFile is the part of a Kindgi pack.json sandboxd reads.
type kindgiPackFile struct {
	ID         string            `json:"id"`
	Version    string            `json:"version"`
	Tools      []json.RawMessage `json:"tools"`
	Guardrails []json.RawMessage `json:"guardrails"`
}

// kindgiGuardrail is the part of a guardrail.schema.json document a check
// is built from.
type kindgiGuardrail struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Kind            string          `json:"kind"`
	Check           string          `json:"check"`
	Action          json.RawMessage `json:"action"`
	Severity        string          `json:"severity"`
	Config          json.RawMessage `json:"config"`
	ConfigSchema    json.RawMessage `json:"configSchema"`
	Sandbox         string          `json:"sandbox"`
	Limits          json.RawMessage `json:"limits"`
	Network         json.RawMessage `json:"network"`
	NeedsSpec       json.RawMessage `json:"needsSpec"`
	CodeArtifactRef json.RawMessage `json:"codeArtifactRef"`
}

// ParseKindgiPack validates data against Kindgi's pack.schema.json 1.1.0
// (the embedded copy; the tool and guardrail schemas it refers to are
// embedded too, capability declarations are checked only to be objects).
// Every violation is listed in the error.
func ParseKindgiPack(data []byte) error {
	lines, err := validateAgainst(packSchemaURL, data)
	if err != nil {
		return fmt.Errorf("pack.json: %w", err)
	}
	if lines != nil {
		return fmt.Errorf("pack.json is not valid against Kindgi's pack.schema.json 1.1.0: %s", strings.Join(lines, "; "))
	}
	return nil
}

func readKindgiPack(dir, abs, pf string, data []byte) (*Pack, []Problem) {
	if err := ParseKindgiPack(data); err != nil {
		return nil, []Problem{{Path: pf, Message: err.Error()}}
	}
	var kp kindgiPackFile
	if err := json.Unmarshal(data, &kp); err != nil {
		return nil, []Problem{{Path: pf, Message: err.Error()}}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, []Problem{{Path: dir, Message: err.Error()}}
	}
	defer root.Close()
	p := &Pack{ID: kp.ID, Version: kp.Version, Layout: LayoutKindgiPack}
	var problems []Problem
	// entry returns the declaration's JSON, the base directory of its
	// relative paths and its source name.
	entry := func(kind string, i int, raw json.RawMessage) ([]byte, string, string, error) {
		var ref struct {
			Path *string `json:"path"`
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(raw, &keys)
		if _, ok := keys["path"]; ok && len(keys) == 1 && json.Unmarshal(raw, &ref) == nil && ref.Path != nil {
			rel := cleanRel(*ref.Path)
			if !validRel(rel) {
				return nil, "", *ref.Path, fmt.Errorf("path %q must be a relative forward-slash path inside the pack", *ref.Path)
			}
			b, err := readIn(root, rel, MaxFileBytes)
			if err != nil {
				return nil, "", rel, fmt.Errorf("%s: %v", rel, err)
			}
			return b, filepath.Join(abs, filepath.FromSlash(path.Dir(rel))), rel, nil
		}
		return raw, abs, fmt.Sprintf("pack.json#/%s/%d", kind, i), nil
	}
	for i, raw := range kp.Tools {
		b, base, src, err := entry("tools", i, raw)
		if err != nil {
			problems = append(problems, problemOf("", src, err))
			continue
		}
		id, version := manifestHead(b)
		p.Tools = append(p.Tools, Tool{ID: id, Version: version, Source: src, Manifest: b, BaseDir: base})
	}
	for i, raw := range kp.Guardrails {
		b, base, src, err := entry("guardrails", i, raw)
		if err != nil {
			problems = append(problems, problemOf("", src, err))
			continue
		}
		if lines, err := validateAgainst(guardrailSchemaURL, b); err != nil || lines != nil {
			msg := fmt.Sprint(err)
			if lines != nil {
				msg = "not valid against Kindgi's guardrail.schema.json 1.1.0: " + strings.Join(lines, "; ")
			}
			problems = append(problems, Problem{Path: src, Code: toolerr.InvalidToolDefinition, Message: msg})
			continue
		}
		var g kindgiGuardrail
		_ = json.Unmarshal(b, &g)
		if len(g.CodeArtifactRef) == 0 {
			p.Builtin = append(p.Builtin, g.ID)
			continue
		}
		c, err := newCheck(guardrailDecl{
			id: g.ID, checkID: g.Check, name: g.Name, kind: g.Kind, severity: g.Severity, sandbox: g.Sandbox,
			action: g.Action, config: g.Config, configSchema: g.ConfigSchema,
			limits: g.Limits, network: g.Network, needsSpec: g.NeedsSpec, artifactRef: g.CodeArtifactRef,
			source: src, baseDir: base,
		})
		if err != nil {
			problems = append(problems, problemOf(c.ID, src, err))
			continue
		}
		p.Checks = append(p.Checks, c)
	}
	sort.Strings(p.Builtin)
	problems = append(problems, p.finish()...)
	return p, problems
}

// manifestHead reads a manifest's id and version without validating it
// (the executor does that).
func manifestHead(b []byte) (id, version string) {
	var head struct {
		ID      string `json:"id"`
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &head)
	return head.ID, head.Version
}
