package sdk

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/sandboxd/sandboxd/abi"
)

// host is what a Context needs from sandboxd: the sandboxd_v1 functions that
// work in both entry styles.
type host interface {
	context() ([]byte, error)
	config(name string) ([]byte, error)
	secret(name string) ([]byte, error)
	log(level Level, msg string)
}

// reactorHost adds the reactor's input and result functions.
type reactorHost interface {
	host
	input() ([]byte, error)
	setOutput(b []byte) error
	setError(b []byte) error
}

// memHost serves a Context from a Kindgi ctx object in memory, for Invoke and
// for Main outside Wasm.
type memHost struct {
	logw io.Writer

	once    sync.Once
	raw     json.RawMessage // ctx without secrets and config
	secrets map[string]string
	configs map[string]json.RawMessage
}

func newMemHost(ctx json.RawMessage, logw io.Writer) *memHost {
	if len(ctx) == 0 {
		ctx = json.RawMessage("{}")
	}
	return &memHost{raw: ctx, logw: logw}
}

// split moves ctx.secrets and ctx.config out of the context JSON, as sandboxd
// never passes them to context_read.
func (m *memHost) split() {
	m.once.Do(func() {
		var obj map[string]json.RawMessage
		if json.Unmarshal(m.raw, &obj) != nil {
			return // not an object: context() returns it as given
		}
		_ = json.Unmarshal(obj["secrets"], &m.secrets)
		_ = json.Unmarshal(obj["config"], &m.configs)
		_, hasS := obj["secrets"]
		_, hasC := obj["config"]
		if hasS || hasC {
			delete(obj, "secrets")
			delete(obj, "config")
			m.raw, _ = json.Marshal(obj)
		}
	})
}

func (m *memHost) context() ([]byte, error) {
	m.split()
	return m.raw, nil
}

func (m *memHost) config(name string) ([]byte, error) {
	m.split()
	if v, ok := m.configs[name]; ok {
		return v, nil
	}
	return nil, &HostError{Errno: int32(abi.ErrNotFound), Message: fmt.Sprintf("config %q is not in ctx.config", name)}
}

func (m *memHost) secret(name string) ([]byte, error) {
	m.split()
	if v, ok := m.secrets[name]; ok {
		return []byte(v), nil
	}
	return nil, &HostError{Errno: int32(abi.ErrNotFound), Message: fmt.Sprintf("secret %q is not in ctx.secrets", name)}
}

func (m *memHost) log(level Level, msg string) {
	fmt.Fprintf(m.logw, "%s: %s\n", level, msg)
}
