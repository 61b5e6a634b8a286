package executor

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

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
