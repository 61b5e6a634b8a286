package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/conformance"
	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/pack"
)

func init() {
	commands["conformance"] = command{"check a pack's tools (static checks + cases); exit 1 on any failure, 2 on usage or infrastructure errors", cmdConformance}
}

func cmdConformance(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cases         = fs.String("cases", "", "directory of case files (*.cases.json); for an oci:// pack it also holds the tool manifests (required)")
		junit         = fs.String("junit", "", "write a JUnit XML report to this file")
		jsonOut       = fs.String("json", "", "write a JSON report to this file (- for stdout instead of the summary)")
		deploy        = fs.Bool("deploy", false, "treat the pack as meant for deploy: filesystem refs fail (sandboxd's pack.json \"deploy\": true does the same; a Kindgi pack.json has no such field)")
		index         = fs.String("index", "", "check a Kindgi pack index (index.json, its modules under --module-root; or oci://REF, an image carrying one) instead of PACK: its tools and guardrail checks")
		moduleRoot    = fs.String("module-root", "", "directory the index's modulePath and checkModulePath resolve under (default: the index's directory; with oci://: a path inside the image, default dist/ or the pack directory)")
		bundleMap     = fs.String("bundle-map", "", "JSON file mapping the index's source paths to files under --module-root (optionally FILE#export; with oci://: a path inside the image, default bundle-map.json when present)")
		envelope      = fs.String("envelope", "", "verify this kindgi-deploy-envelope/v1 file against the index and the image it names (needs --index and --trusted-keys)")
		trustedKeys   = fs.String("trusted-keys", "", "JSON file of trusted signing keys: {\"keys\":[{\"keyId\",\"publicKey\"}]}")
		deterministic = fs.Bool("deterministic", false, "give guests fixed clocks and a seeded random source")
		seed          = fs.Uint64("seed", 1, "random seed for --deterministic")
		unmetered     = fs.Bool("allow-unmetered", false, allowUnmeteredUsage)
		fuelBudget    = fs.Int64("fuel-budget", 0, "deterministic work budget per call in fuel units (about one per Wasm instruction); with --deterministic, a case's outcome is then the same on every machine (0: none)")
		caseTimeout   = fs.Duration("case-timeout", conformance.DefaultCaseTimeout, "wall deadline of one case without its own timeoutMs")
		cacheDir      = fs.String("cache-dir", "", "compilation cache directory (default: in memory)")
		memMB         = fs.Int64("default-mem-mb", executor.DefaultMemMB, "memMB for tools that declare no limits")
		cpuMs         = fs.Int64("default-cpu-ms", executor.DefaultCPUMs, "cpuMs for tools that declare no limits")
		colorMode     = fs.String("color", "auto", "colour the summary: auto (on a terminal), always, never")
		cassettes     = fs.String("cassettes", "", "directory of recordings (*.rec.jsonl, sandboxd run --record): each is a case of the tool it names, replayed offline; a divergence fails it (docs/replay.md)")
	)
	var maxMemMB, maxCPUMs int64
	registerCeilings(fs, &maxMemMB, &maxCPUMs)
	var ociOpts ociFlags
	ociOpts.register(fs, false)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandboxd conformance PACK [flags]\n"+
			"       sandboxd conformance --index index.json [--module-root DIR] [--bundle-map FILE] [flags]\n"+
			"       sandboxd conformance --index oci://REF [--module-root DIR] [--bundle-map FILE] [flags]\n\n"+
			"PACK is a directory — with a Kindgi pack.json (tools and guardrails it lists), or\n"+
			"tool manifests (tool.json, *.tool.json, */tool.json) — and case files\n"+
			"(*.cases.json, also under PACK/cases/), or oci://REF with --cases DIR holding\n"+
			"the manifests and case files. --index checks a Kindgi pack index instead.\n"+
			"See docs/conformance.md and docs/packs.md.\n\n"+
			"Prints one line per check and the totals. Exit 0: every check passed (warnings\n"+
			"allowed); 1: a check failed; 2: usage error or infrastructure error (unreadable\n"+
			"pack, unreachable registry) — no verdict.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var pos []string
	if code, done := parseFlags(fs, stderr, func() (err error) { pos, err = parseInterspersed(fs, args); return err }); done {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandboxd conformance: "+format+"\n", a...)
		return exitUsage
	}
	source := ""
	switch {
	case *index != "" && len(pos) != 0:
		return usage("--index replaces PACK; got %d arguments too", len(pos))
	case *index == "" && len(pos) != 1:
		return usage("want exactly one PACK (a directory or oci://REF) or --index, got %d arguments", len(pos))
	case *index == "":
		source = pos[0]
	}
	ociIndex := strings.HasPrefix(*index, conformance.OCIPrefix)
	if *index == "" && *moduleRoot != "" {
		return usage("--module-root is where an index's modulePaths resolve: it needs --index")
	}
	if !ociIndex && *index != "" && *moduleRoot == "" {
		*moduleRoot = filepath.Dir(*index)
	}
	if *bundleMap != "" && *index == "" {
		return usage("--bundle-map maps an index's modulePaths: it needs --index")
	}
	if *envelope != "" && (*index == "" || *trustedKeys == "") {
		return usage("--envelope needs --index and --trusted-keys")
	}
	if *trustedKeys != "" && *envelope == "" {
		return usage("--trusted-keys is for --envelope")
	}
	var (
		bm     pack.BundleMap
		bmPath string
		err    error
	)
	if ociIndex {
		bmPath = *bundleMap // a path inside the image
	} else if *bundleMap != "" {
		if bm, err = pack.ReadBundleMap(*bundleMap); err != nil {
			return usage("%v", err)
		}
	}
	if *caseTimeout <= 0 {
		return usage("--case-timeout must be positive")
	}
	if *memMB <= 0 || *cpuMs <= 0 {
		return usage("--default-mem-mb and --default-cpu-ms must be positive")
	}
	if err := checkCeilings(*memMB, *cpuMs, maxMemMB, maxCPUMs); err != nil {
		return usage("%v", err)
	}
	var color bool
	switch *colorMode {
	case "auto":
		color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
	case "always":
		color = true
	case "never":
	default:
		return usage("--color wants auto, always or never, got %q", *colorMode)
	}
	oci, err := ociOpts.resolver()
	if err != nil {
		return usage("%v", err)
	}
	defer oci.Close()
	opts := conformance.Options{
		Cases: *cases, Deploy: *deploy, Deterministic: *deterministic, Seed: *seed,
		OCI: oci, CacheDir: *cacheDir, CaseTimeout: *caseTimeout,
		DefaultMemMB: *memMB, DefaultCPUMs: *cpuMs, FuelBudget: *fuelBudget, AllowUnmetered: *unmetered,
		MaxMemMB: maxMemMB, MaxCPUMs: maxCPUMs,
		Index: *index, ModuleRoot: *moduleRoot, BundleMap: bm, BundleMapPath: bmPath, Envelope: *envelope, TrustedKeys: *trustedKeys,
		Cassettes: *cassettes,
	}
	if *fuelBudget < 0 {
		return usage("--fuel-budget must not be negative")
	}
	if strings.HasPrefix(source, conformance.OCIPrefix) && *cases == "" {
		return usage("an oci:// pack needs --cases DIR (its tool manifests and case files)")
	}
	rep, err := conformance.Run(ctx, source, opts)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd conformance: %v\n", err)
		return exitUsage
	}
	write := func(path string, fn func(io.Writer) error) error {
		if path == "-" {
			return fn(stdout)
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if *jsonOut != "-" {
		if err := rep.WriteSummary(stdout, color); err != nil {
			return usage("%v", err)
		}
	}
	if *junit != "" {
		if err := write(*junit, rep.WriteJUnit); err != nil {
			return usage("--junit: %v", err)
		}
	}
	if *jsonOut != "" {
		if err := write(*jsonOut, rep.WriteJSON); err != nil {
			return usage("--json: %v", err)
		}
	}
	if rep.Failed() {
		return exitError
	}
	return exitOK
}
