package main

import (
	"cmp"
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

// ociCommand is what the registry subcommands (ociCmd.run) and push-pack
// share: the artifact-source flags, the resolver, the deadline and error
// reporting.
type ociCommand struct {
	name   string
	fs     *flag.FlagSet
	flags  ociFlags
	stdin  io.Reader
	stdout io.Writer
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
	var pos []string
	if code, done := parseFlags(c.fs, c.stderr, func() (err error) { pos, err = parseInterspersed(c.fs, args); return err }); done {
		return nil, code, false
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

// progress is the transfer meter of a push or pull and the call option
// that feeds it (none when it is off).
func (c *ociCommand) progress() (*progress, []artifact.CallOption) {
	p := newProgress(c.stdout, c.stderr)
	if !p.on {
		return p, nil
	}
	return p, []artifact.CallOption{artifact.WithProgress(p.update)}
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

// ociCmd is one registry subcommand. Its run does parse, arity, --json,
// open, fail and print once for all of them. check runs before the
// registry client opens, and an error from it is a usage error; call's
// result is printed as JSON (--json) or by text (nil: fmt.Fprintln); a
// usageError from call is a usage error too, any other error a failure.
type ociCmd struct {
	name, summary, usage string
	args                 arity
	json                 string // the --json flag's help; "" when the command has none
	compact              bool   // --json prints one line, not indented
	local                bool   // no registry client: call gets nil (logout, cache)
	// bind, when set, registers the command's own flags on c.fs and sets
	// the steps below (on run's copy of the command), which read them.
	bind  func(c *ociCommand, d *ociCmd)
	check func(pos []string) error
	call  func(ctx context.Context, o *artifact.OCI, pos []string) (any, error)
	text  func(w io.Writer, v any)
}

// arity is how many positional arguments a command takes, and what it
// says otherwise.
type arity struct {
	min, max int // max < 0: no limit
	want     string
}

func exactly(n int, want string) arity { return arity{n, n, want} }
func atLeast(n int, want string) arity { return arity{n, -1, want} }

// usageError is an error of the command line found by a call.
type usageError string

func (e usageError) Error() string { return string(e) }

func usagef(format string, a ...any) error { return usageError(fmt.Sprintf(format, a...)) }

func init() {
	for _, d := range ociCmds {
		commands[d.name] = command{d.summary, d.run}
	}
}

func (d ociCmd) run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newOCICommand(d.name, d.usage, stderr)
	c.stdin, c.stdout = stdin, stdout
	var asJSON *bool
	if d.json != "" {
		asJSON = c.fs.Bool("json", false, d.json)
	}
	if d.bind != nil {
		d.bind(c, &d)
	}
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) < d.args.min || d.args.max >= 0 && len(pos) > d.args.max {
		return c.usage("%s", d.args.want)
	}
	if d.check != nil {
		if err := d.check(pos); err != nil {
			return c.usage("%v", err)
		}
	}
	var oci *artifact.OCI
	if !d.local {
		o, octx, done, err := c.open(ctx)
		if err != nil {
			return c.usage("%v", err)
		}
		defer done()
		oci, ctx = o, octx
	}
	v, err := d.call(ctx, oci, pos)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return c.usage("%s", ue)
	case err != nil:
		return c.fail(err)
	case asJSON != nil && *asJSON:
		var b []byte
		if d.compact {
			b, _ = json.Marshal(v)
		} else {
			b, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintf(stdout, "%s\n", b)
	case d.text != nil:
		d.text(stdout, v)
	default:
		fmt.Fprintln(stdout, v)
	}
	return exitOK
}

// printRef prints the digest-pinned reference of a pushed or pulled artifact.
func printRef(w io.Writer, v any) {
	switch v := v.(type) {
	case *artifact.Artifact:
		fmt.Fprintln(w, v.Ref)
	case pulled:
		fmt.Fprintln(w, v.Ref)
	}
}

// pulled is what pull --json prints: the artifact and the files -o wrote.
type pulled struct {
	*artifact.Artifact
	Files []artifact.ExportedModule `json:"files,omitempty"`
}

var ociCmds = []ociCmd{{
	name: "push", summary: "push .wasm modules to a registry or oci-layout dir as a Wasm OCI artifact",
	usage: "Usage: sandboxd push FILE.wasm[=TITLE]... REF --artifact-version V [flags]\n\n" +
		"Builds a CNCF Wasm OCI artifact (config " + artifact.MediaTypeWasmConfig + ", one\n" +
		artifact.MediaTypeWasmLayer + " layer per module, titled TITLE or the file's base name;\n" +
		"codeArtifactRef.modulePath names a module by its title), pushes it to REF\n" +
		"(registry/repo:tag, registry/repo:tag1,tag2 for several tags, or\n" +
		"oci-layout:DIR[:tag] for an OCI image layout directory)\n" +
		"and prints the digest-pinned reference.",
	args: atLeast(2, "want one or more .wasm files and a target reference (see sandboxd help push)"),
	json: "print the pushed artifact's description as JSON instead of its reference",
	bind: bindPush,
}, {
	name: "pull", summary: "pull an OCI artifact into the local cache and print its digest ref",
	usage: "Usage: sandboxd pull REF [flags]\n\n" +
		"Fetches the artifact's manifest, config and layers into the local cache,\n" +
		"each verified against its digest, and prints the digest-pinned reference.\n" +
		"A pulled digest-pinned reference then resolves with the registry down.\n" +
		"With -o DIR the artifact's modules are also written to DIR under their titles.",
	args: exactly(1, "want exactly one reference"),
	json: "print the artifact's description (and the files -o wrote) as JSON instead of its reference",
	bind: bindPull,
}, {
	name: "inspect", summary: "describe an OCI artifact: media types, modules, version, sizes",
	usage: "Usage: sandboxd inspect REF [--json] [flags]\n\n" +
		"Fetches the artifact's manifest (not its layers) and prints its media types,\n" +
		"version, modules and sizes.",
	args: exactly(1, "want exactly one reference"),
	json: "print the description as JSON",
	call: func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		return o.Inspect(ctx, pos[0])
	}, text: inspectText,
}, {
	name: "tag", summary: "point more tags at an OCI artifact's manifest",
	usage: "Usage: sandboxd tag REF TAG... [flags]\n\n" +
		"Points each TAG of REF's repository at the manifest REF names and prints\n" +
		"the digest-pinned reference.",
	args: atLeast(2, "want a reference and one or more tags"),
	call: func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		return o.Tag(ctx, pos[0], pos[1:]...)
	},
}, {
	name: "copy", summary: "copy an OCI artifact to another registry repository",
	usage: "Usage: sandboxd copy SRC DST [flags]\n\n" +
		"Copies the artifact SRC names (its manifest, config and layers, each\n" +
		"verified) to the registry tag DST and prints DST's digest-pinned reference.",
	args: exactly(2, "want a source and a destination reference"),
	call: func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		return o.Copy(ctx, pos[0], pos[1])
	}, text: printRef,
}, {
	name: "login", summary: "check registry credentials and store them in the docker config",
	usage: "Usage: sandboxd login REGISTRY -u USER --password-stdin [flags]\n\n" +
		"Checks the credentials against REGISTRY and stores them in the docker config\n" +
		"($DOCKER_CONFIG/config.json or ~/.docker/config.json, mode 0600), where\n" +
		"sandboxd, docker, crane and oras read them. The password is read from stdin.",
	args: exactly(1, "want REGISTRY -u USER --password-stdin"),
	bind: bindLogin,
}, {
	name: "tags", summary: "list the tags of a registry repository",
	usage: "Usage: sandboxd tags REGISTRY/REPO [--json] [flags]\n\n" +
		"Lists the repository's tags, one a line.",
	args: exactly(1, "want one repository"),
	json: "print a JSON array", compact: true,
	call: func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		tags, err := o.Tags(ctx, pos[0])
		if tags == nil {
			tags = []string{}
		}
		return tags, err
	}, text: func(w io.Writer, v any) {
		for _, t := range v.([]string) {
			fmt.Fprintln(w, t)
		}
	},
}, {
	name: "cache", summary: "list, size or prune the OCI artifact cache",
	usage: "Usage: sandboxd cache list|size|prune [--older-than D] [--max-size-mb N] [--json] [flags]\n\n" +
		"Works on the OCI artifact cache (--artifact-cache-dir). list prints its blobs,\n" +
		"least recently used first; size their count and bytes; prune evicts the blobs\n" +
		"unused for longer than --older-than, then the least recently used until the\n" +
		"cache holds at most --max-size-mb. An evicted blob is fetched again when needed.",
	args: exactly(1, "want list, size or prune"),
	json: "print JSON", local: true,
	bind: bindCache,
}, {
	name: "logout", summary: "remove a registry's credentials from the docker config",
	usage: "Usage: sandboxd logout REGISTRY\n\n" +
		"Removes REGISTRY's credentials from the docker config.",
	args: exactly(1, "want one registry"), local: true,
	call: func(_ context.Context, _ *artifact.OCI, pos []string) (any, error) {
		p, had, err := artifact.Logout(pos[0])
		if !had {
			return fmt.Sprintf("%s had no credentials in %s", pos[0], p), err
		}
		return fmt.Sprintf("Removed the credentials for %s from %s", pos[0], p), err
	},
}}

func bindPush(c *ociCommand, d *ociCmd) {
	version := c.fs.String("artifact-version", "", "the artifact's version (org.opencontainers.image.version); required")
	var annotations stringList
	c.fs.Var(&annotations, "annotation", "KEY=VALUE manifest annotation (repeatable)")
	var mods []artifact.PushModule
	d.check = func(pos []string) error {
		if *version == "" {
			return errors.New("--artifact-version is required")
		}
		for _, spec := range pos[:len(pos)-1] {
			file, title, ok := strings.Cut(spec, "=")
			if !ok {
				title = baseName(file)
			}
			if err := artifact.CheckTitle(title); err != nil {
				return fmt.Errorf("%s: %v", spec, toolerr.As(err).Message)
			}
			if err := checkModuleFile(file); err != nil {
				return err
			}
			// Streamed by Push (hashed into the cache, uploaded from there),
			// not read into memory here.
			mods = append(mods, artifact.PushModule{Title: title, File: file})
		}
		return nil
	}
	d.call = func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		prog, opts := c.progress()
		if len(annotations) > 0 {
			ann := map[string]string{}
			for _, a := range annotations {
				k, v, ok := strings.Cut(a, "=")
				if !ok || k == "" {
					return nil, usagef("--annotation %q: want KEY=VALUE", a)
				}
				ann[k] = v
			}
			opts = append(opts, artifact.WithAnnotations(ann))
		}
		// registry/repo:t1,t2 pushes to t1 and tags t2 too (as oras push does).
		ref := pos[len(pos)-1]
		if head, more, ok := strings.Cut(ref, ","); ok && !strings.HasPrefix(ref, artifact.LayoutPrefix) {
			ref = head
			opts = append(opts, artifact.WithTags(strings.Split(more, ",")...))
		}
		if created, ok, err := sourceDateEpoch(); err != nil {
			return nil, usageError(err.Error())
		} else if ok {
			opts = append(opts, artifact.WithCreated(created))
		}
		art, err := o.Push(ctx, ref, *version, mods, opts...)
		prog.finish()
		return art, err
	}
	d.text = printRef
}

func bindPull(c *ociCommand, d *ociCmd) {
	outDir := c.fs.String("o", "", "also write the modules to this directory, each under its title")
	d.call = func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		prog, opts := c.progress()
		art, err := o.Pull(ctx, pos[0], opts...)
		prog.finish()
		if err != nil || *outDir == "" {
			return pulled{Artifact: art}, err
		}
		_, mods, err := o.Export(ctx, art.Ref, *outDir)
		for _, m := range mods {
			fmt.Fprintf(c.stderr, "wrote %s (%s)\n", m.Path, humanBytes(m.Size))
		}
		return pulled{art, mods}, err
	}
	d.text = printRef
}

func bindLogin(c *ociCommand, d *ociCmd) {
	user := c.fs.String("u", "", "user name")
	fromStdin := c.fs.Bool("password-stdin", false, "read the password from stdin (required: never on the command line)")
	var password string
	d.check = func([]string) error {
		if *user == "" || !*fromStdin {
			return errors.New("want REGISTRY -u USER --password-stdin")
		}
		b, err := io.ReadAll(io.LimitReader(c.stdin, 64<<10))
		if err != nil {
			return fmt.Errorf("reading the password: %v", err)
		}
		if password = strings.TrimRight(string(b), "\r\n"); password == "" {
			return errors.New("an empty password on stdin")
		}
		return nil
	}
	d.call = func(ctx context.Context, o *artifact.OCI, pos []string) (any, error) {
		p, err := o.Login(ctx, pos[0], *user, password)
		return fmt.Sprintf("Login succeeded: credentials for %s stored in %s", pos[0], p), err
	}
}

// cacheSize is what cache size prints.
type cacheSize struct {
	Blobs int    `json:"blobs"`
	Bytes int64  `json:"bytes"`
	Dir   string `json:"dir"`
}

// prunedBlobs are the blobs cache prune removed.
type prunedBlobs []artifact.CachedBlob

func bindCache(c *ociCommand, d *ociCmd) {
	older := c.fs.Duration("older-than", 0, "prune: evict blobs unused for longer than this (0: no age limit)")
	maxMB := c.fs.Int64("max-size-mb", -1, "prune: evict least recently used blobs until the cache holds at most this many MiB (-1: no limit)")
	d.call = func(_ context.Context, _ *artifact.OCI, pos []string) (any, error) {
		dir := c.flags.cacheDir
		if dir == "" {
			def, err := artifact.DefaultOCICacheDir()
			if err != nil {
				return nil, usagef("no cache directory: %v", err)
			}
			dir = def
		}
		switch pos[0] {
		case "list", "size":
			blobs, err := artifact.CacheList(dir)
			if err != nil || pos[0] == "list" {
				return blobs, err
			}
			s := cacheSize{Blobs: len(blobs), Dir: dir}
			for _, b := range blobs {
				s.Bytes += b.Size
			}
			return s, nil
		case "prune":
			if *older <= 0 && *maxMB < 0 {
				return nil, usagef("prune needs --older-than or --max-size-mb")
			}
			limit := int64(-1)
			if *maxMB >= 0 {
				limit = *maxMB << 20
			}
			removed, err := artifact.CachePrune(dir, *older, limit)
			return prunedBlobs(removed), err
		}
		return nil, usagef("unknown cache subcommand %q (want list, size or prune)", pos[0])
	}
	d.text = func(w io.Writer, v any) {
		switch v := v.(type) {
		case cacheSize:
			fmt.Fprintf(w, "%s: %d blobs, %s (%d bytes)\n", v.Dir, v.Blobs, humanBytes(v.Bytes), v.Bytes)
		case []artifact.CachedBlob:
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			for _, b := range v {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", b.Digest, b.Size, b.Used.UTC().Format(time.RFC3339))
			}
			tw.Flush()
		case prunedBlobs:
			var freed int64
			for _, b := range v {
				freed += b.Size
			}
			fmt.Fprintf(w, "removed %d blobs, %s\n", len(v), humanBytes(freed))
		}
	}
}

// inspectText is what inspect prints without --json.
func inspectText(w io.Writer, v any) {
	art := v.(*artifact.Artifact)
	rows := []string{"ref:\t" + art.Ref, "manifest:\t" + art.MediaType}
	if art.ArtifactType != "" {
		rows = append(rows, "artifactType:\t"+art.ArtifactType)
	}
	rows = append(rows, "config:\t"+art.ConfigMediaType, "layout:\t"+art.Layout)
	if art.Index != "" {
		rows = append(rows, "index:\t"+art.Index)
	}
	ver := art.Version + " (" + art.VersionFrom + ")"
	if art.Version == "" {
		ver = "(none: no " + artifact.AnnotationVersion + " annotation or label)"
	}
	if art.Architecture != "" || art.OS != "" {
		rows = append(rows, "platform:\t"+art.Architecture+"/"+art.OS)
	}
	tabulate(w, "", append(rows, "version:\t"+ver, fmt.Sprintf("size:\t%s (%d bytes)", humanBytes(art.Size), art.Size)))
	rows = nil
	for _, l := range art.Layers {
		title := l.Title
		switch {
		case title == "" && art.Layout == artifact.LayoutWasm && len(art.Layers) == 1:
			title = "(untitled: any modulePath)"
		case title == "":
			title = "-"
		}
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%d bytes", title, l.MediaType, l.Digest, l.Size))
	}
	if art.Layout == artifact.LayoutWasm {
		fmt.Fprintln(w, "modules:")
	} else {
		fmt.Fprintln(w, "layers:")
	}
	tabulate(w, "", rows)
	rows = nil
	for _, e := range art.IndexManifests {
		mark, plat := " ", cmp.Or(e.Platform, "(no platform)")
		if e.Chosen {
			mark = "*"
		}
		rows = append(rows, fmt.Sprintf("%s %s\t%s\t%s", mark, e.Digest, plat, e.ArtifactType))
	}
	tabulate(w, "index manifests:", rows)
	rows = nil
	for _, r := range art.Referrers {
		rows = append(rows, fmt.Sprintf("  %s\t%s\t(%s)", r.Digest, cmp.Or(r.ArtifactType, r.MediaType), r.Via))
	}
	tabulate(w, "referrers:", rows)
}

// tabulate prints head (unless it is "") and rows in tab-aligned columns;
// a section with a head and no rows prints nothing.
func tabulate(w io.Writer, head string, rows []string) {
	if head != "" {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintln(w, head)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
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
