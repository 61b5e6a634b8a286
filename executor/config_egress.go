package executor

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/egress"
)

// egressConfig is the operator's egress settings (see the WithEgress*
// options).
type egressConfig struct {
	allowRanges  []netip.Prefix
	resolver     egress.Resolver
	dial         egress.DialFunc
	tls          *tls.Config
	limits       egress.Limits
	secrets      SecretSource
	secretDests  egress.SecretDestinations
	secretScopes SecretScopes
}

// WithEgressAllowCIDRs sets operator allow-ranges: addresses inside them may
// be reached by the HTTP import although their class (loopback, private,
// link-local, …) is denied by default. The tool's network policy must still
// admit the destination's host. `--egress-allow-cidr`.
func (c Config) WithEgressAllowCIDRs(ranges ...netip.Prefix) Config {
	c.egress.allowRanges = append([]netip.Prefix(nil), ranges...)
	return c
}

// WithEgressResolver sets the resolver the HTTP import uses (default: the
// system resolver). Tests inject a fake.
func (c Config) WithEgressResolver(r egress.Resolver) Config {
	c.egress.resolver = r
	return c
}

// WithEgressDialer sets how the HTTP import connects to an address that
// passed the policy (default: a TCP dialer). Tests inject a recorder.
func (c Config) WithEgressDialer(d egress.DialFunc) Config {
	c.egress.dial = d
	return c
}

// WithEgressTLS sets the TLS client configuration for https requests
// (default: the system roots). It is cloned per invocation.
func (c Config) WithEgressTLS(tc *tls.Config) Config {
	c.egress.tls = tc
	return c
}

// WithEgressLimits sets the per-invocation egress budgets; zero fields keep
// egress.DefaultLimits.
func (c Config) WithEgressLimits(l egress.Limits) Config {
	c.egress.limits = l
	return c
}

// WithSecrets sets the operator's secret source, consulted for a declared
// secret the call context does not carry (`run` and `serve` without a
// Kindgi caller). Only names a manifest declares in needsSpec.secrets are
// ever looked up.
func (c Config) WithSecrets(src SecretSource) Config {
	c.egress.secrets = src
	return c
}

// WithSecretDestinations binds secrets to the destinations they may be sent
// to (`--secret-destination NAME=origin`, parsed by
// egress.ParseSecretDestinations): a bound secret is substituted into a
// request header only when the request's origin matches one of its entries
// (and the tool's allowlist admits it); anywhere else the request is refused
// with an egress "denied" error naming the secret, never its value. Secrets
// not bound go to any destination of the tool's allowlist (for a declarative
// HTTP tool without network, its urlTemplate's origin). See docs/egress.md.
func (c Config) WithSecretDestinations(d egress.SecretDestinations) Config {
	c.egress.secretDests = make(egress.SecretDestinations, len(d))
	for k, v := range d {
		c.egress.secretDests[k] = append([]egress.Entry(nil), v...)
	}
	return c
}

// SecretSource supplies secret values by name. Implementations must be safe
// for concurrent use and must never log values.
type SecretSource interface {
	Secret(name string) (string, bool)
}

// Secrets is a fixed SecretSource.
type Secrets map[string]string

// Secret implements SecretSource.
func (s Secrets) Secret(name string) (string, bool) {
	v, ok := s[name]
	return v, ok
}

// SecretsFromEnv returns the secrets found in the process environment under
// prefix: secret NAME is the variable prefix+NAME. The environment is read
// now, once.
func SecretsFromEnv(prefix string) Secrets {
	out := Secrets{}
	if prefix == "" {
		return out
	}
	for _, kv := range os.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, prefix) && len(k) > len(prefix) {
			out[k[len(prefix):]] = v
		}
	}
	return out
}

// maxSecretsFile caps a secrets file.
const maxSecretsFile = 1 << 20

// SecretsFromFile reads a secrets file: a JSON object {"NAME": "value"}, or
// NAME=VALUE lines (blank lines and lines starting with # ignored). Errors
// name the file and line, never a value.
func SecretsFromFile(path string) (Secrets, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	if st.Size() > maxSecretsFile {
		return nil, fmt.Errorf("secrets file %s is over %d bytes", path, maxSecretsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file: %w", err)
	}
	out := Secrets{}
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "{") {
		if err := json.Unmarshal(b, (*map[string]string)(&out)); err != nil {
			return nil, fmt.Errorf("secrets file %s: want a JSON object of string values", path)
		}
		return out, nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 64<<10), maxSecretsFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("secrets file %s line %d: want NAME=VALUE", path, n)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

// chainSecrets consults sources in order.
type chainSecrets []SecretSource

func (c chainSecrets) Secret(name string) (string, bool) {
	for _, s := range c {
		if s == nil {
			continue
		}
		if v, ok := s.Secret(name); ok {
			return v, true
		}
	}
	return "", false
}

// ChainSecrets returns a source that asks each of srcs in turn.
func ChainSecrets(srcs ...SecretSource) SecretSource { return chainSecrets(srcs) }

// WithSecretScopes limits which tools may read each operator secret
// (`--secret-scope NAME=PATTERN[,PATTERN…]`): a scoped secret from the
// operator's source (WithSecrets) is given only to tools whose id matches
// one of its patterns (path.Match syntax, e.g. "acme.*"); to every other tool
// it does not exist (secret_get answers not-found, a placeholder is
// refused as for a missing secret). A secret without a scope is given to
// any tool that declares it in needsSpec.secrets. Secrets the caller passes
// in the call context are the caller's to give and are not scoped. Patterns
// are checked by ParseSecretScopes.
func (c Config) WithSecretScopes(s SecretScopes) Config {
	c.egress.secretScopes = make(SecretScopes, len(s))
	for k, v := range s {
		c.egress.secretScopes[k] = append([]string(nil), v...)
	}
	return c
}

// SecretScopes maps an operator secret's name to the tool-id patterns that
// may read it.
type SecretScopes map[string][]string

// ParseSecretScopes parses NAME=PATTERN[,PATTERN…] entries (repeatable;
// entries for one name add up). Errors never contain a secret value (the
// entries hold none).
func ParseSecretScopes(entries []string) (SecretScopes, error) {
	out := SecretScopes{}
	for _, e := range entries {
		name, pats, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.TrimSpace(pats) == "" {
			return nil, fmt.Errorf("%q: want NAME=TOOL_PATTERN[,TOOL_PATTERN…]", e)
		}
		for _, p := range strings.Split(pats, ",") {
			p = strings.TrimSpace(p)
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return nil, fmt.Errorf("%q: bad tool pattern %q", e, p)
			}
			out[name] = append(out[name], p)
		}
	}
	return out, nil
}

// operatorSecret returns the operator's value of secret name for tool id,
// honouring its scope.
func (ec *egressConfig) operatorSecret(toolID, name string) (string, bool) {
	if ec.secrets == nil {
		return "", false
	}
	if pats, scoped := ec.secretScopes[name]; scoped {
		allowed := false
		for _, p := range pats {
			if ok, _ := path.Match(p, toolID); ok {
				allowed = true
				break
			}
		}
		if !allowed {
			return "", false
		}
	}
	return ec.secrets.Secret(name)
}
