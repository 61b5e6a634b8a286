package main

import (
	"flag"
	"fmt"
	"net/netip"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/executor"
)

// egressFlags are the operator's egress and secret settings shared by the
// commands that run tools.
type egressFlags struct {
	allowCIDRs   stringList
	secretsFiles stringList
	secretsEnv   string
	secretDests  stringList
	secretScopes stringList
}

func (f *egressFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.allowCIDRs, "egress-allow-cidr", "let the HTTP import reach addresses in this CIDR although they are loopback/private/link-local (repeatable; the tool's network policy must still admit the host)")
	fs.Var(&f.secretsFiles, "secrets-file", "operator secrets: a JSON object {\"NAME\":\"value\"} or NAME=VALUE lines (repeatable; later files win; only names a tool declares in needsSpec.secrets are used)")
	fs.StringVar(&f.secretsEnv, "secrets-env-prefix", "", "operator secrets from environment variables PREFIX+NAME (the call context's secrets and --secrets-file win)")
	fs.Var(&f.secretScopes, "secret-scope", "NAME=TOOL_PATTERN[,TOOL_PATTERN…]: operator secret NAME is given only to tools whose id matches (path.Match, e.g. acme.*; repeatable; default: any tool that declares it)")
	fs.Var(&f.secretDests, "secret-destination", "NAME=[scheme://]host[:port]: secret NAME is substituted only into requests to this destination (repeatable; default: any destination of the tool's allowlist; see docs/egress.md)")
}

// apply adds the settings to cfg. Errors never contain a secret value.
func (f *egressFlags) apply(cfg executor.Config) (executor.Config, error) {
	var ranges []netip.Prefix
	for _, s := range f.allowCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			ip, ierr := netip.ParseAddr(s)
			if ierr != nil {
				return cfg, fmt.Errorf("--egress-allow-cidr: %q is not a CIDR or an IP address", s)
			}
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		ranges = append(ranges, p.Masked())
	}
	if len(ranges) > 0 {
		cfg = cfg.WithEgressAllowCIDRs(ranges...)
	}
	var srcs []executor.SecretSource
	for i := len(f.secretsFiles) - 1; i >= 0; i-- {
		s, err := executor.SecretsFromFile(f.secretsFiles[i])
		if err != nil {
			return cfg, fmt.Errorf("--secrets-file: %v", err)
		}
		srcs = append(srcs, s)
	}
	if f.secretsEnv != "" {
		srcs = append(srcs, executor.SecretsFromEnv(f.secretsEnv))
	}
	if len(srcs) > 0 {
		cfg = cfg.WithSecrets(executor.ChainSecrets(srcs...))
	}
	if len(f.secretDests) > 0 {
		d, err := egress.ParseSecretDestinations(f.secretDests)
		if err != nil {
			return cfg, fmt.Errorf("--secret-destination: %v", err)
		}
		cfg = cfg.WithSecretDestinations(d)
	}
	if len(f.secretScopes) > 0 {
		sc, err := executor.ParseSecretScopes(f.secretScopes)
		if err != nil {
			return cfg, fmt.Errorf("--secret-scope: %v", err)
		}
		cfg = cfg.WithSecretScopes(sc)
	}
	return cfg, nil
}
