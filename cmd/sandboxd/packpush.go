package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/pack"
)

func init() {
	commands["push-pack"] = command{"push a pack index and the modules it names as one OCI artifact (serve it with --index oci://REF)", cmdPushPack}
}

// cmdPushPack reads a pack index as serve does (every module it names,
// through the bundle map) and pushes index.json, each module at its path
// under the module root and the bundle map as bundle-map.json: a pack
// image of file layers (docs/packs.md "Pack images").
func cmdPushPack(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("push-pack", "Usage: sandboxd push-pack --index index.json [--module-root DIR] [--bundle-map FILE] REF [flags]\n\n"+
		"Reads the index and every module its tools and guardrails name (as serve --index does;\n"+
		"any problem refuses the push), then pushes one artifact to REF (registry/repo:tag or\n"+
		"oci-layout:DIR[:tag]): index.json, each module titled with its path under the module\n"+
		"root, and bundle-map.json. sandboxd serve --index oci://REF serves it with no other flag.\n"+
		"Prints the digest-pinned reference.", stderr)
	index := c.fs.String("index", "", "the pack index (index.json)")
	moduleRoot := c.fs.String("module-root", "", "directory the index's modulePaths are relative to (default: the index's directory)")
	bundleMap := c.fs.String("bundle-map", "", "bundle map file (Kindgi's dist/bundle-map.json), pushed as bundle-map.json")
	version := c.fs.String("artifact-version", "", "org.opencontainers.image.version of the artifact (default: the index's artifactVersion)")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if *index == "" || len(pos) != 1 {
		return c.usage("want --index index.json and one target reference (see sandboxd help push-pack)")
	}
	root := *moduleRoot
	if root == "" {
		root = filepath.Dir(*index)
	}
	src := pack.IndexSource{Index: *index, ModuleRoot: root}
	var files []artifact.PackFile
	if *bundleMap != "" {
		bm, err := pack.ReadBundleMap(*bundleMap)
		if err != nil {
			return c.usage("--bundle-map: %v", err)
		}
		src.BundleMap = bm
		b, err := artifact.ReadRegular(*bundleMap, pack.MaxFileBytes)
		if err != nil {
			return c.fail(err)
		}
		files = append(files, artifact.PackFile{Title: "bundle-map.json", Data: b})
	}
	ix, err := artifact.ReadRegular(*index, pack.MaxFileBytes)
	if err != nil {
		return c.fail(err)
	}
	// Every problem at once: the schema's (what conformance --index
	// checks), then reading every module as serve does.
	var lines []string
	schemaLines, err := pack.ValidateIndex(ix)
	if err != nil {
		return c.fail(err)
	}
	for _, l := range schemaLines {
		lines = append(lines, "not valid against pack-index.schema.json 1.4.0: "+l)
	}
	p, problems := src.Read()
	for _, pr := range problems {
		lines = append(lines, pr.String())
	}
	if len(lines) > 0 {
		for _, l := range lines {
			fmt.Fprintf(stderr, "sandboxd push-pack: %s\n", l)
		}
		fmt.Fprintf(stderr, "sandboxd push-pack: %d problem(s); nothing pushed (sandboxd index --tools DIR writes a valid index)\n", len(lines))
		return exitError
	}
	files = append(files, artifact.PackFile{Title: "index.json", Data: ix})
	reserved := map[string]bool{"index.json": true, "bundle-map.json": true}
	added := map[string]bool{}
	mods := append([]pack.Tool(nil), p.Tools...)
	for _, ch := range p.Checks {
		mods = append(mods, ch.Tool)
	}
	for _, m := range mods {
		switch {
		case m.Module == nil || added[m.ModuleFile]:
			continue // declarative, or a module several entries share
		case reserved[m.ModuleFile]:
			return c.usage("%s runs module %s, a name the pack image keeps for its own file", m.ID, m.ModuleFile)
		}
		added[m.ModuleFile] = true
		files = append(files, artifact.PackFile{Title: m.ModuleFile, Data: m.Module})
	}
	v := *version
	if v == "" {
		v = p.ArtifactVersion
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	art, err := oci.PushPack(ctx, strings.TrimPrefix(pos[0], "oci://"), v, files)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintln(stdout, art.Ref)
	return exitOK
}
