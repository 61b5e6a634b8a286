package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/toolerr"
)

func init() {
	commands["push"] = command{"push .wasm modules to a registry or oci-layout dir as a Wasm OCI artifact", cmdPush}
	commands["pull"] = command{"pull an OCI artifact into the local cache and print its digest ref", cmdPull}
	commands["inspect"] = command{"describe an OCI artifact: media types, modules, version, sizes", cmdInspect}
	commands["tag"] = command{"point more tags at an OCI artifact's manifest", cmdTag}
	commands["copy"] = command{"copy an OCI artifact to another registry repository", cmdCopy}
	commands["login"] = command{"check registry credentials and store them in the docker config", cmdLogin}
	commands["tags"] = command{"list the tags of a registry repository", cmdTags}
	commands["cache"] = command{"list, size or prune the OCI artifact cache", cmdCache}
	commands["logout"] = command{"remove a registry's credentials from the docker config", cmdLogout}
}

// ociCommand is the shared frame of push, pull and inspect: flags, the
// resolver, the deadline and error reporting.
type ociCommand struct {
	name   string
	fs     *flag.FlagSet
	flags  ociFlags
	stderr io.Writer
}

func newOCICommand(name, usage string, stderr io.Writer) *ociCommand {
	c := &ociCommand{name: name, fs: flag.NewFlagSet("sandboxd "+name, flag.ContinueOnError), stderr: stderr}
	c.fs.SetOutput(stderr)
	c.flags.register(c.fs, true)
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\nFlags:\n", usage)
		c.fs.PrintDefaults()
	}
	return c
}

// parse returns the positional arguments, or an exit code when done.
func (c *ociCommand) parse(args []string) ([]string, int, bool) {
	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK, false
		}
		return nil, exitUsage, false
	}
	if c.flags.timeout <= 0 {
		return nil, c.usage("--timeout must be positive"), false
	}
	return pos, 0, true
}

// open makes the command's registry client and its deadline; done closes
// both.
func (c *ociCommand) open(ctx context.Context) (*artifact.OCI, context.Context, func(), error) {
	oci, err := c.flags.resolver()
	if err != nil {
		return nil, ctx, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.flags.timeout)
	return oci, ctx, func() { cancel(); oci.Close() }, nil
}

func (c *ociCommand) usage(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "sandboxd %s: %s\n", c.name, fmt.Sprintf(format, a...))
	return exitUsage
}

func (c *ociCommand) fail(err error) int {
	te := toolerr.As(err)
	fmt.Fprintf(c.stderr, "sandboxd %s: %s\n", c.name, te.Error())
	return exitError
}

func cmdPush(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("push", "Usage: sandboxd push FILE.wasm[=TITLE]... REF --artifact-version V [flags]\n\n"+
		"Builds a CNCF Wasm OCI artifact (config "+artifact.MediaTypeWasmConfig+", one\n"+
		artifact.MediaTypeWasmLayer+" layer per module, titled TITLE or the file's base name;\n"+
		"codeArtifactRef.modulePath names a module by its title), pushes it to REF\n"+
		"(registry/repo:tag, registry/repo:tag1,tag2 for several tags, or\n"+
		"oci-layout:DIR[:tag] for an OCI image layout directory)\n"+
		"and prints the digest-pinned reference.", stderr)
	version := c.fs.String("artifact-version", "", "the artifact's version (org.opencontainers.image.version); required")
	var annotations stringList
	c.fs.Var(&annotations, "annotation", "KEY=VALUE manifest annotation (repeatable)")
	asJSON := c.fs.Bool("json", false, "print the pushed artifact's description as JSON instead of its reference")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return c.usage("want one or more .wasm files and a target reference (see sandboxd help push)")
	}
	if *version == "" {
		return c.usage("--artifact-version is required")
	}
	ref := pos[len(pos)-1]
	var mods []artifact.PushModule
	for _, spec := range pos[:len(pos)-1] {
		file, title, ok := strings.Cut(spec, "=")
		if !ok {
			title = baseName(file)
		}
		if err := artifact.CheckTitle(title); err != nil {
			return c.usage("%s: %v", spec, toolerr.As(err).Message)
		}
		if err := checkModuleFile(file); err != nil {
			return c.usage("%v", err)
		}
		// Streamed by Push (hashed into the cache, uploaded from there),
		// not read into memory here.
		mods = append(mods, artifact.PushModule{Title: title, File: file})
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	prog := newProgress(stdout, stderr)
	var pushOpts []artifact.CallOption
	if prog.on {
		pushOpts = append(pushOpts, artifact.WithProgress(prog.update))
	}
	if len(annotations) > 0 {
		ann := map[string]string{}
		for _, a := range annotations {
			k, v, ok := strings.Cut(a, "=")
			if !ok || k == "" {
				return c.usage("--annotation %q: want KEY=VALUE", a)
			}
			ann[k] = v
		}
		pushOpts = append(pushOpts, artifact.WithAnnotations(ann))
	}
	// registry/repo:t1,t2 pushes to t1 and tags t2 too (as oras push does).
	if head, more, ok := strings.Cut(ref, ","); ok && !strings.HasPrefix(ref, artifact.LayoutPrefix) {
		ref = head
		pushOpts = append(pushOpts, artifact.WithTags(strings.Split(more, ",")...))
	}
	if created, ok, err := sourceDateEpoch(); err != nil {
		return c.usage("%v", err)
	} else if ok {
		pushOpts = append(pushOpts, artifact.WithCreated(created))
	}
	art, err := oci.Push(ctx, ref, *version, mods, pushOpts...)
	prog.finish()
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(art, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintln(stdout, art.Ref)
	return exitOK
}

func cmdPull(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("pull", "Usage: sandboxd pull REF [flags]\n\n"+
		"Fetches the artifact's manifest, config and layers into the local cache,\n"+
		"each verified against its digest, and prints the digest-pinned reference.\n"+
		"A pulled digest-pinned reference then resolves with the registry down.\n"+
		"With -o DIR the artifact's modules are also written to DIR under their titles.", stderr)
	outDir := c.fs.String("o", "", "also write the modules to this directory, each under its title")
	asJSON := c.fs.Bool("json", false, "print the artifact's description (and the files -o wrote) as JSON instead of its reference")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usage("want exactly one reference")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	prog := newProgress(stdout, stderr)
	var pullOpts []artifact.CallOption
	if prog.on {
		pullOpts = append(pullOpts, artifact.WithProgress(prog.update))
	}
	art, err := oci.Pull(ctx, pos[0], pullOpts...)
	prog.finish()
	if err != nil {
		return c.fail(err)
	}
	var mods []artifact.ExportedModule
	if *outDir != "" {
		if _, mods, err = oci.Export(ctx, art.Ref, *outDir); err != nil {
			return c.fail(err)
		}
		for _, m := range mods {
			fmt.Fprintf(stderr, "wrote %s (%s)\n", m.Path, humanBytes(m.Size))
		}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(struct {
			*artifact.Artifact
			Files []artifact.ExportedModule `json:"files,omitempty"`
		}{art, mods}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintln(stdout, art.Ref)
	return exitOK
}

func cmdTag(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("tag", "Usage: sandboxd tag REF TAG... [flags]\n\n"+
		"Points each TAG of REF's repository at the manifest REF names and prints\n"+
		"the digest-pinned reference.", stderr)
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return c.usage("want a reference and one or more tags")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	pinned, err := oci.Tag(ctx, pos[0], pos[1:]...)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintln(stdout, pinned)
	return exitOK
}

func cmdCopy(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("copy", "Usage: sandboxd copy SRC DST [flags]\n\n"+
		"Copies the artifact SRC names (its manifest, config and layers, each\n"+
		"verified) to the registry tag DST and prints DST's digest-pinned reference.", stderr)
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return c.usage("want a source and a destination reference")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	art, err := oci.Copy(ctx, pos[0], pos[1])
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintln(stdout, art.Ref)
	return exitOK
}

func cmdLogin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("login", "Usage: sandboxd login REGISTRY -u USER --password-stdin [flags]\n\n"+
		"Checks the credentials against REGISTRY and stores them in the docker config\n"+
		"($DOCKER_CONFIG/config.json or ~/.docker/config.json, mode 0600), where\n"+
		"sandboxd, docker, crane and oras read them. The password is read from stdin.", stderr)
	user := c.fs.String("u", "", "user name")
	fromStdin := c.fs.Bool("password-stdin", false, "read the password from stdin (required: never on the command line)")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 || *user == "" || !*fromStdin {
		return c.usage("want REGISTRY -u USER --password-stdin")
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 64<<10))
	if err != nil {
		return c.usage("reading the password: %v", err)
	}
	password := strings.TrimRight(string(b), "\r\n")
	if password == "" {
		return c.usage("an empty password on stdin")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	p, err := oci.Login(ctx, pos[0], *user, password)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "Login succeeded: credentials for %s stored in %s\n", pos[0], p)
	return exitOK
}

func cmdLogout(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("logout", "Usage: sandboxd logout REGISTRY\n\n"+
		"Removes REGISTRY's credentials from the docker config.", stderr)
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usage("want one registry")
	}
	p, had, err := artifact.Logout(pos[0])
	if err != nil {
		return c.fail(err)
	}
	if !had {
		fmt.Fprintf(stdout, "%s had no credentials in %s\n", pos[0], p)
		return exitOK
	}
	fmt.Fprintf(stdout, "Removed the credentials for %s from %s\n", pos[0], p)
	return exitOK
}

func cmdInspect(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("inspect", "Usage: sandboxd inspect REF [--json] [flags]\n\n"+
		"Fetches the artifact's manifest (not its layers) and prints its media types,\n"+
		"version, modules and sizes.", stderr)
	asJSON := c.fs.Bool("json", false, "print the description as JSON")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usage("want exactly one reference")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	art, err := oci.Inspect(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(art, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ref:\t%s\n", art.Ref)
	fmt.Fprintf(tw, "manifest:\t%s\n", art.MediaType)
	if art.ArtifactType != "" {
		fmt.Fprintf(tw, "artifactType:\t%s\n", art.ArtifactType)
	}
	fmt.Fprintf(tw, "config:\t%s\n", art.ConfigMediaType)
	fmt.Fprintf(tw, "layout:\t%s\n", art.Layout)
	if art.Index != "" {
		fmt.Fprintf(tw, "index:\t%s\n", art.Index)
	}
	v := art.Version + " (" + art.VersionFrom + ")"
	if art.Version == "" {
		v = "(none: no " + artifact.AnnotationVersion + " annotation or label)"
	}
	if art.Architecture != "" || art.OS != "" {
		fmt.Fprintf(tw, "platform:\t%s/%s\n", art.Architecture, art.OS)
	}
	fmt.Fprintf(tw, "version:\t%s\n", v)
	fmt.Fprintf(tw, "size:\t%s (%d bytes)\n", humanBytes(art.Size), art.Size)
	tw.Flush()
	if art.Layout == artifact.LayoutWasm {
		fmt.Fprintln(stdout, "modules:")
	} else {
		fmt.Fprintln(stdout, "layers:")
	}
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, l := range art.Layers {
		title := l.Title
		switch {
		case title == "" && art.Layout == artifact.LayoutWasm && len(art.Layers) == 1:
			title = "(untitled: any modulePath)"
		case title == "":
			title = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d bytes\n", title, l.MediaType, l.Digest, l.Size)
	}
	tw.Flush()
	if len(art.IndexManifests) > 0 {
		fmt.Fprintln(stdout, "index manifests:")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, e := range art.IndexManifests {
			mark, plat := " ", e.Platform
			if e.Chosen {
				mark = "*"
			}
			if plat == "" {
				plat = "(no platform)"
			}
			fmt.Fprintf(tw, "%s %s\t%s\t%s\n", mark, e.Digest, plat, e.ArtifactType)
		}
		tw.Flush()
	}
	if len(art.Referrers) > 0 {
		fmt.Fprintln(stdout, "referrers:")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, r := range art.Referrers {
			at := r.ArtifactType
			if at == "" {
				at = r.MediaType
			}
			fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", r.Digest, at, r.Via)
		}
		tw.Flush()
	}
	return exitOK
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org), the
// created time push writes in the config; without it the config says the
// Unix epoch, so the same inputs give the same digest.
func sourceDateEpoch() (time.Time, bool, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Time{}, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, false, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a count of seconds", v)
	}
	return time.Unix(n, 0).UTC(), true, nil
}

// maxPushModule caps a module file read by push.
const maxPushModule = artifact.DefaultMaxModuleSize

// checkModuleFile refuses what push cannot take as a module file: a
// missing or non-regular file, or one over the module cap.
func checkModuleFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxPushModule {
		return fmt.Errorf("%s is %d bytes, over the %d-byte module cap", path, st.Size(), maxPushModule)
	}
	return nil
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

func cmdCache(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("cache", "Usage: sandboxd cache list|size|prune [--older-than D] [--max-size-mb N] [--json] [flags]\n\n"+
		"Works on the OCI artifact cache (--artifact-cache-dir). list prints its blobs,\n"+
		"least recently used first; size their count and bytes; prune evicts the blobs\n"+
		"unused for longer than --older-than, then the least recently used until the\n"+
		"cache holds at most --max-size-mb. An evicted blob is fetched again when needed.", stderr)
	older := c.fs.Duration("older-than", 0, "prune: evict blobs unused for longer than this (0: no age limit)")
	maxMB := c.fs.Int64("max-size-mb", -1, "prune: evict least recently used blobs until the cache holds at most this many MiB (-1: no limit)")
	asJSON := c.fs.Bool("json", false, "print JSON")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usage("want list, size or prune")
	}
	dir := c.flags.cacheDir
	if dir == "" {
		d, err := artifact.DefaultOCICacheDir()
		if err != nil {
			return c.usage("no cache directory: %v", err)
		}
		dir = d
	}
	print := func(v any, text func()) int {
		if *asJSON {
			b, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			text()
		}
		return exitOK
	}
	switch pos[0] {
	case "list", "size":
		blobs, err := artifact.CacheList(dir)
		if err != nil {
			return c.fail(err)
		}
		var total int64
		for _, b := range blobs {
			total += b.Size
		}
		if pos[0] == "size" {
			return print(map[string]any{"dir": dir, "blobs": len(blobs), "bytes": total}, func() {
				fmt.Fprintf(stdout, "%s: %d blobs, %s (%d bytes)\n", dir, len(blobs), humanBytes(total), total)
			})
		}
		return print(blobs, func() {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			for _, b := range blobs {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", b.Digest, b.Size, b.Used.UTC().Format(time.RFC3339))
			}
			tw.Flush()
		})
	case "prune":
		if *older <= 0 && *maxMB < 0 {
			return c.usage("prune needs --older-than or --max-size-mb")
		}
		limit := int64(-1)
		if *maxMB >= 0 {
			limit = *maxMB << 20
		}
		removed, err := artifact.CachePrune(dir, *older, limit)
		if err != nil {
			return c.fail(err)
		}
		var freed int64
		for _, b := range removed {
			freed += b.Size
		}
		return print(removed, func() {
			fmt.Fprintf(stdout, "removed %d blobs, %s\n", len(removed), humanBytes(freed))
		})
	}
	return c.usage("unknown cache subcommand %q (want list, size or prune)", pos[0])
}

func cmdTags(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand("tags", "Usage: sandboxd tags REGISTRY/REPO [--json] [flags]\n\n"+
		"Lists the repository's tags, one a line.", stderr)
	asJSON := c.fs.Bool("json", false, "print a JSON array")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usage("want one repository")
	}
	oci, ctx, done, err := c.open(ctx)
	if err != nil {
		return c.usage("%v", err)
	}
	defer done()
	tags, err := oci.Tags(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		if tags == nil {
			tags = []string{}
		}
		b, _ := json.Marshal(tags)
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	for _, t := range tags {
		fmt.Fprintln(stdout, t)
	}
	return exitOK
}
