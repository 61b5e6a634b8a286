package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/pack"
	"github.com/sandboxd/sandboxd/toolerr"
)

func init() {
	commands["index"] = command{"write a Kindgi pack index (index.json) from a directory of tool manifests, for push-pack and serve --index", cmdIndex}
}

// indexToolKeys are the manifest fields a pack index tool entry carries
// (pack-index.schema.json $defs/tool, modulePath aside).
var indexToolKeys = []string{"id", "description", "version", "input", "output", "effects", "needs", "needsSpec", "sandbox", "limits", "network", "mutating", "spec"}

// checkMeta is metadata["sandboxd.check"] of a check tool's manifest (what
// sandboxd init --kind check writes): the guardrail the check serves.
type checkMeta struct {
	Guardrail string          `json:"guardrail"`
	Name      string          `json:"name"`
	Kind      string          `json:"kind"`
	Action    json.RawMessage `json:"action"`
	Severity  string          `json:"severity"`
	Scope     json.RawMessage `json:"scope"`
	Config    json.RawMessage `json:"config"`
}

func cmdIndex(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("sandboxd index", flag.ContinueOnError)
	fset.SetOutput(stderr)
	tools := fset.String("tools", "", "directory of tool manifests (tool.json, *.tool.json, */tool.json), as serve --tools reads it (required)")
	out := fset.String("o", "", "the index file to write (default: DIR/index.json; - for stdout)")
	moduleRoot := fset.String("module-root", "", "directory the modulePaths are written relative to (default: the index's directory; DIR with -o -)")
	packID := fset.String("pack-id", "", "packId (default: DIR's base name as a tool id would be derived)")
	packVersion := fset.String("pack-version", "0.1.0", "packVersion")
	artifactVersion := fset.String("artifact-version", "", "artifactVersion (default: YYYYMMDD.N, UTC date, N one more than the existing index's of the same day)")
	publishedAt := fset.String("published-at", "", "publishedAt, RFC 3339 (default: now, UTC, in milliseconds)")
	fset.Usage = func() {
		fmt.Fprint(stderr, "Usage: sandboxd index --tools DIR [-o index.json] [--pack-id ID] [--pack-version V] [flags]\n\n"+
			"Writes a Kindgi pack index (pack-index.schema.json 1.4.0: sorted keys and ids,\n"+
			"two-space indent) from a directory of tool manifests. Each manifest's\n"+
			"filesystem codeArtifactRef becomes its modulePath, relative to the module root\n"+
			"(the index's directory); a manifest with metadata[\"sandboxd.check\"] (sandboxd\n"+
			"init --kind check) becomes a guardrails[] entry. The index is validated against\n"+
			"the schema and read back as serve --index reads it (every module must exist:\n"+
			"build first) before it is written; every problem is listed. Then:\n\n"+
			"  sandboxd push-pack --index index.json REGISTRY/REPO:TAG\n"+
			"  sandboxd serve --index index.json\n\nFlags:\n")
		fset.PrintDefaults()
	}
	var pos []string
	if code, done := parseFlags(fset, stderr, func() (err error) { pos, err = parseInterspersed(fset, args); return err }); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandboxd index: "+format+"\n", a...)
		return exitUsage
	}
	if *tools == "" || len(pos) != 0 {
		return usage("want --tools DIR and no arguments (see sandboxd help index)")
	}
	if *out == "" {
		*out = filepath.Join(*tools, "index.json")
	}
	root := *moduleRoot
	switch {
	case root != "":
	case *out == "-":
		root = *tools
	default:
		root = filepath.Dir(*out)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return usage("%v", err)
	}
	now := time.Now().UTC()
	if *publishedAt == "" {
		*publishedAt = now.Format("2006-01-02T15:04:05.000Z")
	} else if _, err := time.Parse(time.RFC3339Nano, *publishedAt); err != nil {
		return usage("--published-at wants an RFC 3339 date-time, e.g. 2026-12-01T00:00:00.000Z (got %q)", *publishedAt)
	}
	if *artifactVersion == "" {
		*artifactVersion = nextArtifactVersion(*out, now)
	}
	if *packID == "" {
		abs, err := filepath.Abs(*tools)
		if err != nil {
			return usage("%v", err)
		}
		*packID = deriveToolID(filepath.Base(abs))
	}
	p, problems := pack.Discover(*tools)
	if p != nil && p.Layout != pack.LayoutManifests {
		return usage("%s has a Kindgi pack.json: Kindgi's own indexer writes its index; index reads a directory of tool manifests", *tools)
	}
	var lines []string
	for _, pr := range problems {
		lines = append(lines, pr.String())
	}
	ix := map[string]any{
		"v": 1, "packId": *packID, "packVersion": *packVersion, "artifactVersion": *artifactVersion,
		"publishedAt": *publishedAt, "agents": []any{}, "flows": []any{},
	}
	var toolEntries, guardrails []map[string]any
	if p != nil {
		for _, t := range p.Tools {
			entry, guardrail, err := indexEntry(t, absRoot)
			if err != nil {
				lines = append(lines, fmt.Sprintf("%s: %v", t.Source, err))
				continue
			}
			if guardrail != nil {
				guardrails = append(guardrails, guardrail)
			} else {
				toolEntries = append(toolEntries, entry)
			}
		}
	}
	sortByID(toolEntries)
	sortByID(guardrails)
	ix["tools"], ix["guardrails"] = orEmpty(toolEntries), orEmpty(guardrails)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(ix); err != nil {
		return usage("%v", err)
	}
	if len(lines) == 0 {
		lines = append(lines, indexProblems(b.Bytes(), absRoot)...)
	}
	if len(lines) > 0 {
		for _, l := range lines {
			fmt.Fprintf(stderr, "sandboxd index: %s\n", l)
		}
		fmt.Fprintf(stderr, "sandboxd index: %d problem(s); nothing written\n", len(lines))
		return exitError
	}
	if *out == "-" {
		_, _ = stdout.Write(b.Bytes())
		return exitOK
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "sandboxd index: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stderr, "sandboxd index: wrote %s: pack %s %s (artifact %s), %d tool(s), %d guardrail(s)\n",
		*out, *packID, *packVersion, *artifactVersion, len(toolEntries), len(guardrails))
	return exitOK
}

// indexEntry turns one manifest into its index entry: a tool, or (with
// metadata["sandboxd.check"]) a guardrail.
func indexEntry(t pack.Tool, absRoot string) (tool, guardrail map[string]any, err error) {
	if _, err := manifest.Parse(t.Manifest); err != nil {
		e := toolerr.As(err)
		return nil, nil, fmt.Errorf("%s: %s", e.Code, e.Message)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(t.Manifest, &raw); err != nil {
		return nil, nil, err
	}
	var ref struct {
		Kind       string `json:"kind"`
		ModulePath string `json:"modulePath"`
	}
	if len(raw["codeArtifactRef"]) == 0 {
		return nil, nil, fmt.Errorf("no codeArtifactRef: a pack index names a module for every tool (add \"codeArtifactRef\": {\"kind\": \"filesystem\", \"modulePath\": \"handler.wasm\"})")
	}
	if err := json.Unmarshal(raw["codeArtifactRef"], &ref); err != nil {
		return nil, nil, fmt.Errorf("codeArtifactRef: %v", err)
	}
	if ref.Kind != "filesystem" {
		return nil, nil, fmt.Errorf("codeArtifactRef kind %q: a pack index names module files; pull the module (sandboxd pull REF -o FILE) and point a filesystem ref at it", ref.Kind)
	}
	file, export := manifest.SplitModulePath(ref.ModulePath)
	abs := file
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(t.BaseDir, filepath.FromSlash(file))
	}
	rel, err := filepath.Rel(absRoot, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, nil, fmt.Errorf("module %s is outside the module root %s: write the index in a directory above it (-o), or name one with --module-root", abs, absRoot)
	}
	modulePath := filepath.ToSlash(rel)
	if export != "" {
		modulePath += "#" + export
	}
	var meta map[string]json.RawMessage
	if len(raw["metadata"]) > 0 {
		if err := json.Unmarshal(raw["metadata"], &meta); err != nil {
			return nil, nil, fmt.Errorf("metadata: %v", err)
		}
	}
	if cm, ok := meta["sandboxd.check"]; ok {
		g, err := guardrailEntry(raw, cm, modulePath)
		return nil, g, err
	}
	tool = map[string]any{"modulePath": modulePath}
	for _, k := range indexToolKeys {
		if v, ok := raw[k]; ok {
			if tool[k], err = sortedJSON(v); err != nil {
				return nil, nil, fmt.Errorf("%s: %v", k, err)
			}
		}
	}
	return tool, nil, nil
}

// guardrailEntry is a check tool's guardrails[] entry: the guardrail of
// metadata["sandboxd.check"] (default: the tool id), checkId the tool id
// when they differ, configSchema the input's properties.config.
func guardrailEntry(raw map[string]json.RawMessage, cm json.RawMessage, modulePath string) (map[string]any, error) {
	var m checkMeta
	if err := json.Unmarshal(cm, &m); err != nil {
		return nil, fmt.Errorf(`metadata["sandboxd.check"]: %v`, err)
	}
	var id string
	_ = json.Unmarshal(raw["id"], &id)
	if m.Kind == "" || len(m.Action) == 0 {
		return nil, fmt.Errorf(`metadata["sandboxd.check"] needs "kind" (e.g. "zero-llm") and "action" (e.g. {"on-violation": "halt"})`)
	}
	g := map[string]any{"id": id, "kind": m.Kind, "checkModulePath": modulePath}
	if m.Guardrail != "" && m.Guardrail != id {
		g["id"], g["checkId"] = m.Guardrail, id
	}
	set := func(k string, v json.RawMessage) error {
		if len(v) == 0 {
			return nil
		}
		s, err := sortedJSON(v)
		if err != nil {
			return fmt.Errorf("%s: %v", k, err)
		}
		g[k] = s
		return nil
	}
	for k, v := range map[string]json.RawMessage{"action": m.Action, "scope": m.Scope, "config": m.Config,
		"limits": raw["limits"], "network": raw["network"]} {
		if err := set(k, v); err != nil {
			return nil, err
		}
	}
	for k, v := range map[string]string{"name": m.Name, "severity": m.Severity} {
		if v != "" {
			g[k] = v
		}
	}
	if s, ok := raw["sandbox"]; ok {
		var v string
		_ = json.Unmarshal(s, &v)
		g["sandbox"] = v
	}
	var input struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw["input"], &input) == nil {
		if err := set("configSchema", input.Properties["config"]); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// sortedJSON decodes v keeping numbers as written, so that re-encoding
// sorts every object's keys.
func sortedJSON(v json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var x any
	err := d.Decode(&x)
	return x, err
}

func sortByID(list []map[string]any) {
	sort.SliceStable(list, func(i, j int) bool {
		a, _ := list[i]["id"].(string)
		b, _ := list[j]["id"].(string)
		return a < b
	})
}

func orEmpty(list []map[string]any) []map[string]any {
	if list == nil {
		return []map[string]any{}
	}
	return list
}

// indexProblems validates an index against the pack-index schema and
// reads it back under absRoot as serve --index does (every module must be
// there); one line per problem.
func indexProblems(data []byte, absRoot string) []string {
	lines, err := pack.ValidateIndex(data)
	if err != nil {
		return []string{err.Error()}
	}
	if len(lines) > 0 {
		return lines
	}
	f, err := os.CreateTemp(absRoot, ".index-*.json")
	if err != nil {
		return []string{err.Error()}
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return []string{err.Error()}
	}
	_, problems := pack.IndexSource{Index: f.Name(), ModuleRoot: absRoot}.Read()
	var out []string
	for _, pr := range problems {
		pr.Path = strings.ReplaceAll(pr.Path, f.Name(), "index.json")
		s := pr.String()
		if strings.Contains(s, "does not exist") || strings.Contains(s, "no such file") {
			s += " (build it first: make)"
		}
		out = append(out, s)
	}
	return out
}

// nextArtifactVersion is YYYYMMDD.N for now's UTC date: N is one more
// than the artifactVersion of the index at path when it is of the same
// day, else 1.
func nextArtifactVersion(path string, now time.Time) string {
	day := now.Format("20060102")
	n := 1
	if b, err := os.ReadFile(path); err == nil {
		var prev struct {
			ArtifactVersion string `json:"artifactVersion"`
		}
		if json.Unmarshal(b, &prev) == nil {
			if rest, ok := strings.CutPrefix(prev.ArtifactVersion, day+"."); ok {
				if k, err := strconv.Atoi(rest); err == nil && k >= 1 {
					n = k + 1
				}
			}
		}
	}
	return day + "." + strconv.Itoa(n)
}
