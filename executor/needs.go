package executor

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/abi"
	"github.com/sandboxd/sandboxd/manifest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// needs holds the compiled value schemas of needsSpec.env, .config and
// .secrets and the declared secret names. Every schema is compiled once, at
// load: a call only validates (a manifest.Schema is safe for concurrent
// use).
type needs struct {
	env     map[string]*manifest.Schema
	config  map[string]*manifest.Schema
	secrets map[string]bool
	// secretChecks are the declared secrets in name order, as checkSecrets
	// checks them.
	secretChecks []secretCheck
}

// secretCheck is one declared secret: its compiled schema, whether a needs
// entry makes it optional, and its pointer in the call context.
type secretCheck struct {
	name, pointer string // pointer: /ctx/secrets/NAME
	schema        *manifest.Schema
	optional      bool
}

func compileNeeds(m *manifest.Manifest) (*needs, error) {
	n := &needs{env: map[string]*manifest.Schema{}, config: map[string]*manifest.Schema{}, secrets: map[string]bool{}}
	if m.NeedsSpec == nil {
		return n, nil
	}
	for name, raw := range m.NeedsSpec.Env {
		s, err := manifest.CompileSchema("/needsSpec/env/"+escapePointer(name), raw)
		if err != nil {
			return nil, err
		}
		n.env[name] = s
	}
	for name, raw := range m.NeedsSpec.Config {
		s, err := manifest.CompileSchema("/needsSpec/config/"+escapePointer(name), raw)
		if err != nil {
			return nil, err
		}
		n.config[name] = s
	}
	optional := map[string]bool{}
	for _, need := range m.Needs {
		if need.Optional {
			optional[need.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.NeedsSpec.Secrets)) {
		s, err := manifest.CompileSchema("/needsSpec/secrets/"+escapePointer(name), m.NeedsSpec.Secrets[name])
		if err != nil {
			return nil, err
		}
		n.secrets[name] = true
		n.secretChecks = append(n.secretChecks, secretCheck{name: name, pointer: "/ctx/secrets/" + escapePointer(name), schema: s, optional: optional[name]})
	}
	return n, nil
}

func escapePointer(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// resolveNeeds validates the call's env and config values against the
// declared schemas within w (validate.go), keeping declared names only. A
// declared env value that is missing or invalid fails the call before any
// guest starts; so does a validation w stops (needsStopped).
func (t *Tool) resolveNeeds(cc *CallContext, w manifest.Work) (env map[string]string, cfg map[string][]byte, err error) {
	if len(t.needs.env) == 0 && len(t.needs.config) == 0 {
		// Nothing declared: the shared empty maps (read only everywhere;
		// the context document's env is {} as with a fresh empty map).
		return noEnv, noConfig, nil
	}
	var issues []toolerr.Issue
	names := make([]string, 0, len(t.needs.env))
	for name := range t.needs.env {
		names = append(names, name)
	}
	sort.Strings(names)
	env = make(map[string]string, len(names))
	for _, name := range names {
		v, ok := cc.Env[name]
		if !ok {
			issues = append(issues, toolerr.Issue{InstancePath: "/ctx/env", SchemaPath: "#/needsSpec/env", Keyword: "required",
				Params: map[string]any{"missingProperty": name}, Message: "must have required property '" + name + "'"})
			continue
		}
		doc, _ := json.Marshal(v)
		_, iss, verr := t.needs.env[name].ValidateLimited(doc, false, 0, w)
		if verr != nil {
			return nil, nil, needsStopped("/ctx/env/"+escapePointer(name), verr)
		}
		for _, is := range iss {
			is.InstancePath = "/ctx/env/" + escapePointer(name) + is.InstancePath
			issues = append(issues, is)
		}
		env[name] = v
	}
	cfg = make(map[string][]byte, len(t.needs.config))
	for name, s := range t.needs.config {
		raw, ok := cc.Config[name]
		if !ok {
			continue // config_get answers not-found
		}
		out, iss, verr := s.ValidateLimited(raw, true, 0, w)
		if stopped := needsStopped("/ctx/config/"+escapePointer(name), verr); stopped != nil {
			return nil, nil, stopped
		}
		if verr != nil {
			issues = append(issues, toolerr.Issue{InstancePath: "/ctx/config/" + escapePointer(name), Keyword: "type", Params: map[string]any{}, Message: "must be a JSON value"})
			continue
		}
		for _, is := range iss {
			is.InstancePath = "/ctx/config/" + escapePointer(name) + is.InstancePath
			issues = append(issues, is)
		}
		cfg[name] = out
	}
	if len(issues) > 0 {
		return nil, nil, &toolerr.Error{Code: toolerr.InputValidationFailed, Message: "call context does not satisfy needsSpec: " + issues[0].InstancePath + " " + issues[0].Message, Issues: issues}
	}
	return env, cfg, nil
}

// noEnv and noConfig are what resolveNeeds returns for a tool that declares
// no env and no config. Nothing may write to them.
var (
	noEnv    = map[string]string{}
	noConfig = map[string][]byte{}
)

func (t *Tool) config(inv *invocation, name string) ([]byte, abi.Errno, string) {
	if _, ok := t.needs.config[name]; !ok {
		return nil, abi.ErrNotFound, "config " + name + " is not declared in needsSpec.config"
	}
	v, ok := inv.config[name]
	if !ok {
		return nil, abi.ErrNotFound, "config " + name + " has no value"
	}
	return v, 0, ""
}

// needsKey is a digest of the values a call gives its guest from its
// context: declared env, config and secrets. A posture-none warm instance is
// reused only for calls with its key (warmSet). The digest is salted with a
// random per-process value, so that it says nothing about a secret to anyone
// who sees the memory it is kept in.
type needsKey [sha256.Size]byte

var needsSalt = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// warmKey returns the key of a call with env and inv's config and secrets;
// the zero key for a tool that keeps no warm instances.
func (t *reactorHandler) warmKey(env map[string]string, inv *invocation) needsKey {
	if t.idle == nil {
		return needsKey{}
	}
	if len(env) == 0 && len(inv.config) == 0 && len(inv.secrets) == 0 {
		return emptyNeedsKey() // the same digest, made once
	}
	return needsDigest(env, inv.config, inv.secrets)
}

// emptyNeedsKey is the key of every call without env, config or secrets.
var emptyNeedsKey = sync.OnceValue(func() needsKey { return needsDigest(nil, nil, nil) })

// needsDigest hashes the salt, then env, config and secrets (writeMap).
func needsDigest(env map[string]string, config map[string][]byte, secrets map[string]string) needsKey {
	var k needsKey
	h := sha256.New()
	h.Write(needsSalt)
	writeMap(h, 'e', len(env), func(yield func(string, []byte)) {
		for name, v := range env {
			yield(name, []byte(v))
		}
	})
	writeMap(h, 'c', len(config), func(yield func(string, []byte)) {
		for name, v := range config {
			yield(name, v)
		}
	})
	writeMap(h, 's', len(secrets), func(yield func(string, []byte)) {
		for name, v := range secrets {
			yield(name, []byte(v))
		}
	})
	h.Sum(k[:0])
	return k
}

// writeMap hashes a map unambiguously: a tag, the entry count, then every
// entry in name order with length-prefixed name and value.
func writeMap(h hash.Hash, tag byte, n int, each func(yield func(string, []byte))) {
	type entry struct {
		name  string
		value []byte
	}
	entries := make([]entry, 0, n)
	each(func(name string, v []byte) { entries = append(entries, entry{name, v}) })
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var b [binary.MaxVarintLen64]byte
	h.Write([]byte{tag})
	h.Write(b[:binary.PutUvarint(b[:], uint64(len(entries)))])
	for _, e := range entries {
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(e.name)))])
		h.Write([]byte(e.name))
		h.Write(b[:binary.PutUvarint(b[:], uint64(len(e.value)))])
		h.Write(e.value)
	}
}
