package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"text/template"
)

func init() {
	commands["init"] = command{"write a new tool (handler source, tool.json, cases, Makefile) into a new directory", cmdInit}
}

// templates holds one directory per template (templates/LANG, and
// templates/go-check for --kind check); every file ends in .tmpl, which
// init drops. They are text/template files with [[ ]] delimiters, so Go,
// Make and JSON braces need no escaping.
//
//go:embed templates
var templates embed.FS

// initLangs are the --lang values, in the order help lists them.
var initLangs = []string{"go", "c", "wat", "extism-go", "assemblyscript"}

// sdkModule is the module the Go SDK lives in.
const sdkModule = "github.com/sandboxd/sandboxd"

// sdkPlaceholder is the version a replaced requirement names.
const sdkPlaceholder = "v0.0.0-00010101000000-000000000000"

// sdkSourceDir may be set at link time (-ldflags "-X
// main.sdkSourceDir=$PWD") to the source tree the binary was built from,
// for a -trimpath build that cannot find it from its own file paths.
var sdkSourceDir string

// mcpToolName is the MCP name rule (mcp.toolName): a tool whose id breaks
// it cannot be served by sandboxd mcp.
var mcpToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// initData is what the templates see.
type initData struct {
	ID, Name, Module, Lang, Kind string
	Dir                          string // DIR, absolute
	GoModule, GoVersion          string
	SDKVersion, SDKReplace       string
	SDKReplaceWhy                string
	NPMName                      string
}

func cmdInit(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("sandboxd init", flag.ContinueOnError)
	fset.SetOutput(stderr)
	lang := fset.String("lang", "go", "handler language: "+strings.Join(initLangs, ", "))
	kind := fset.String("kind", "tool", "tool, or check (a guardrail check tool: check-invoke → check-result; --lang go)")
	id := fset.String("id", "", "tool id (default: derived from DIR's base name)")
	sdk := fset.String("sdk", "", "sandboxd source tree the Go templates' go.mod replaces the SDK module with (default: the tree this binary was built from, when known)")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandboxd init [--lang %s] [--kind tool|check] [--id ID] [--sdk DIR] DIR\n\n"+
			"Writes a complete tool into DIR (new or empty): handler source, tool.json,\n"+
			"input.json, tool.cases.json, a Makefile and a README. Then:\n\n"+
			"  cd DIR && make && sandboxd run --manifest tool.json --input input.json\n"+
			"  sandboxd conformance DIR\n\n"+
			"The tool id is DIR's base name, lower-cased, with every character outside\n"+
			"[a-z0-9._-] replaced by '-' (--id sets it; to change it later, edit \"id\" in\n"+
			"tool.json and \"tool\" in tool.cases.json).\n\nFlags:\n", strings.Join(initLangs, "|"))
		fset.PrintDefaults()
	}
	var pos []string
	if code, done := parseFlags(fset, stderr, func() (err error) { pos, err = parseInterspersed(fset, args); return err }); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandboxd init: "+format+"\n", a...)
		return exitUsage
	}
	if len(pos) != 1 {
		return usage("want one DIR, got %d arguments (see sandboxd help init)", len(pos))
	}
	dir := pos[0]
	tmpl := *lang
	switch {
	case !contains(initLangs, *lang):
		return usage("--lang wants one of %s, got %q", strings.Join(initLangs, ", "), *lang)
	case *kind == "check" && *lang != "go":
		return usage("--kind check is written in Go only: use --lang go (a check is any ABI v1 handler; see docs/packs.md \"Guardrail checks are tools\")")
	case *kind == "check":
		tmpl = "go-check"
	case *kind != "tool":
		return usage("--kind wants tool or check, got %q", *kind)
	}
	toolID := *id
	if toolID == "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return usage("%v", err)
		}
		toolID = deriveToolID(filepath.Base(abs))
	} else if !mcpToolName.MatchString(toolID) {
		return usage("--id %q: a tool id sandboxd mcp can serve is 1 to 128 of A-Z a-z 0-9 _ . - (e.g. acme.greet)", toolID)
	}
	if err := checkEmptyDir(dir); err != nil {
		return usage("%v", err)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return usage("%v", err)
	}
	d := initData{ID: toolID, Dir: filepath.ToSlash(absDir), Name: path.Base(strings.ReplaceAll(toolID, ".", "/")), Module: "handler.wasm",
		Lang: *lang, Kind: *kind, GoModule: "example.com/" + toolID, NPMName: npmName(toolID)}
	if *lang == "go" {
		if err := d.sdkRequirement(*sdk); err != nil {
			return usage("%v", err)
		}
	}
	files, err := renderTemplate(tmpl, d)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd init: %v\n", err)
		return exitError
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "sandboxd init: %v\n", err)
		return exitError
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o644); err != nil {
			fmt.Fprintf(stderr, "sandboxd init: %v\n", err)
			return exitError
		}
	}
	fmt.Fprintf(stdout, "wrote %s %s %q in %s: %s\n", *lang, *kind, toolID, dir, strings.Join(names, ", "))
	fmt.Fprintf(stdout, "next: cd %s && make && sandboxd run --manifest tool.json --input input.json && sandboxd conformance .\n", dir)
	if d.SDKReplace != "" {
		fmt.Fprintf(stdout, "go.mod replaces %s with %s (%s)\n", sdkModule, d.SDKReplace, d.SDKReplaceWhy)
	}
	return exitOK
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// deriveToolID turns a directory name into a tool id: lower case, every
// run of characters outside [a-z0-9._-] one '-', no leading or trailing
// '-', '.' or '_', at most 64 characters; "my-tool" when nothing is left.
func deriveToolID(base string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(base) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.Trim(b.String(), "-._")
	if len(s) > 64 {
		s = strings.Trim(s[:64], "-._")
	}
	if s == "" {
		return "my-tool"
	}
	return s
}

// npmName is id as an npm package name (lower case, no leading . or _).
func npmName(id string) string {
	s := strings.TrimLeft(strings.ToLower(id), "._")
	if s == "" {
		return "sandboxd-tool"
	}
	return s
}

// checkEmptyDir accepts a directory that does not exist or is empty.
func checkEmptyDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory: name a new directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty (%d entries, e.g. %s): init never overwrites; name a new or empty directory, or move the files away", dir, len(ents), ents[0].Name())
	}
	return nil
}

// sdkRequirement fills the Go templates' requirement on the SDK module: a
// replace of the source tree --sdk names; else the binary's own module
// version (go install …@vX); else, for a devel build, a replace of the
// tree it was built from when known.
func (d *initData) sdkRequirement(sdkDir string) error {
	d.GoVersion = goVersionOf(runtime.Version())
	if sdkDir != "" {
		abs, err := sdkTree(sdkDir)
		if err != nil {
			return fmt.Errorf("--sdk %s: %v", sdkDir, err)
		}
		d.setReplace(abs, "named by --sdk")
		return nil
	}
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Path == sdkModule && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		d.SDKVersion = bi.Main.Version
		return nil
	}
	for _, dir := range builtFrom() {
		if abs, err := sdkTree(dir); err == nil {
			d.setReplace(abs, "this sandboxd was built from")
			return nil
		}
	}
	return fmt.Errorf("this sandboxd is a development build that does not know its source tree, and the SDK module is on no module proxy: pass --sdk DIR, DIR a sandboxd checkout")
}

func (d *initData) setReplace(abs, why string) {
	d.SDKVersion, d.SDKReplace, d.SDKReplaceWhy = sdkPlaceholder, filepath.ToSlash(abs), why
	if b, err := os.ReadFile(filepath.Join(abs, "go.mod")); err == nil {
		if v := goDirective(b); v != "" {
			d.GoVersion = v
		}
	}
}

// builtFrom lists candidate source trees of this binary: the link-time
// sdkSourceDir, then the tree two levels above this file's compiled path
// (absolute unless the build used -trimpath).
func builtFrom() []string {
	var out []string
	if sdkSourceDir != "" {
		out = append(out, sdkSourceDir)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		out = append(out, filepath.Dir(filepath.Dir(filepath.Dir(file))))
	}
	return out
}

// sdkTree checks that dir is a sandboxd source tree (go.mod of module
// github.com/sandboxd/sandboxd, with guest-sdk/go) and returns it absolute.
func sdkTree(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(abs, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("not a sandboxd source tree (no go.mod)")
	}
	if !bytes.Contains(b, []byte("module "+sdkModule+"\n")) {
		return "", fmt.Errorf("not a sandboxd source tree (go.mod is not module %s)", sdkModule)
	}
	if fi, err := os.Stat(filepath.Join(abs, "guest-sdk", "go")); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("not a sandboxd source tree (no guest-sdk/go)")
	}
	return abs, nil
}

// goDirective returns the go line's version of a go.mod.
func goDirective(mod []byte) string {
	for _, line := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go" {
			return f[1]
		}
	}
	return ""
}

// goVersionOf turns runtime.Version ("go1.26.0") into a go.mod version;
// a development toolchain gets 1.26.0, the repository's.
func goVersionOf(v string) string {
	v = strings.TrimPrefix(v, "go")
	if regexp.MustCompile(`^1\.\d+(\.\d+)?$`).MatchString(v) {
		return v
	}
	return "1.26.0"
}

// renderTemplate executes every file of templates/name, plus the shared
// README, and returns them by output name (.tmpl dropped).
func renderTemplate(name string, d initData) (map[string][]byte, error) {
	out := map[string][]byte{}
	root := "templates/" + name
	paths := []string{"templates/README.md.tmpl"}
	err := fs.WalkDir(templates, root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		src, err := templates.ReadFile(p)
		if err != nil {
			return nil, err
		}
		t, err := template.New(p).Delims("[[", "]]").Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(path.Base(p), ".tmpl")] = b.Bytes()
	}
	return out, nil
}
