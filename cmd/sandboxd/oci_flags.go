package main

import (
	"crypto"
	"flag"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/artifact"
)

// ociFlags are the artifact-source flags shared by run, push, pull and inspect.
type ociFlags struct {
	insecure   stringList
	caFiles    stringList
	verifyKeys stringList
	cacheDir   string
	timeout    time.Duration
	regTimeout time.Duration
	parallel   int
	fsync      bool
	// log, when set, receives the resolver's artifact-* events (serve).
	log *slog.Logger
}

func (f *ociFlags) register(fs *flag.FlagSet, withTimeout bool) {
	fs.Var(&f.insecure, "insecure-registry", "host:port of a loopback registry to reach over plain HTTP (repeatable)")
	fs.BoolVar(&f.fsync, "artifact-fsync", false, "fsync every blob written to the artifact cache (survives power loss; blobs are re-verified on read either way)")
	fs.Var(&f.verifyKeys, "verify-key", "PEM public key (cosign.pub): OCI artifacts must carry a cosign key-based signature by it (or another --verify-key); unsigned ones are refused (repeatable)")
	fs.Var(&f.caFiles, "registry-ca", "PEM file of a CA to trust for registry TLS, beside the system roots and /etc/docker/certs.d/<host:port>/*.crt (repeatable)")
	fs.StringVar(&f.cacheDir, "artifact-cache-dir", "", "OCI artifact cache directory (default: sandboxd/oci under the user cache dir)")
	fs.DurationVar(&f.regTimeout, "registry-timeout", artifact.DefaultRequestTimeout, "deadline of each registry request: its answer must start, and a download may pause, no longer than this")
	f.parallel = artifact.DefaultConcurrency
	if withTimeout { // push, pull, inspect
		fs.IntVar(&f.parallel, "concurrency", artifact.DefaultConcurrency, "blobs a pull fetches at once")
		fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "deadline for the whole operation")
	}
}

// resolver builds the OCI resolver the flags describe.
func (f *ociFlags) resolver() (*artifact.OCI, error) {
	cfg := artifact.NewOCIConfig().WithInsecureRegistries(f.insecure...).WithRequestTimeout(f.regTimeout).WithLogger(f.log).WithRegistryCA(f.caFiles...).WithConcurrency(f.parallel).WithFsync(f.fsync)
	if f.cacheDir != "" {
		cfg = cfg.WithCacheDir(f.cacheDir)
	}
	if len(f.verifyKeys) > 0 {
		var keys []crypto.PublicKey
		for _, p := range f.verifyKeys {
			k, err := artifact.LoadVerifyKey(p)
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
		cfg = cfg.WithVerifyKeys(keys...)
	}
	return artifact.NewOCI(cfg)
}

// parseInterspersed parses flags that may appear before, between and after
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
