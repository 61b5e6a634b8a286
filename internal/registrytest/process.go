package registrytest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the registry program Start runs (Debian package docker-registry).
const Binary = "docker-registry"

// Registry is a docker-registry process serving plain HTTP on a loopback
// port, with its storage in a temporary directory.
type Registry struct {
	// Host is "127.0.0.1:<port>", the registry part of image references.
	Host string

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *lockedWriter
	done chan struct{}
}

// Start runs docker-registry for the test and stops it in t.Cleanup. When
// the binary is missing the test is skipped, unless the environment has
// CI=true: then a missing registry fails the test.
func Start(t testing.TB) *Registry {
	t.Helper()
	return StartWith(t, Options{})
}

// Options configure a registry started by StartWith.
type Options struct {
	// TLSCert and TLSKey (PEM files) make the registry serve HTTPS only.
	TLSCert, TLSKey string
	// Htpasswd (a file of user:bcrypt-hash lines) makes it demand basic
	// auth (docker-registry's htpasswd auth).
	Htpasswd string
}

// StartWith is Start with TLS and/or htpasswd auth.
func StartWith(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (apt-get install docker-registry); CI=true requires it", Binary)
		}
		t.Skipf("%s is not installed (apt-get install docker-registry)", Binary)
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		r, err := startOnce(bin, dir, opts)
		if err == nil {
			t.Cleanup(r.Stop)
			return r
		}
		lastErr = err
	}
	t.Fatalf("cannot start %s: %v", Binary, lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startOnce(bin, dir string, opts Options) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	storage := filepath.Join(dir, fmt.Sprintf("storage-%d", port))
	if err := os.MkdirAll(storage, 0o700); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: registrytest-not-secret
`, storage, host)
	if opts.TLSCert != "" {
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", opts.TLSCert, opts.TLSKey)
	}
	if opts.Htpasswd != "" {
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: registrytest\n    path: %s\n", opts.Htpasswd)
	}
	cfgPath := filepath.Join(dir, fmt.Sprintf("config-%d.yml", port))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	out := &lockedWriter{}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Registry{Host: host, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(15 * time.Second)
	// The readiness probe only asks whether the registry answers: it does
	// not check the certificate (the tests' clients do).
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scheme := "http"
	if opts.TLSCert != "" {
		scheme = "https"
	}
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			return nil, fmt.Errorf("%s exited early: %s", Binary, r.Output())
		default:
		}
		resp, err := client.Get(scheme + "://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || opts.Htpasswd != "" && resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Stop()
	return nil, fmt.Errorf("%s did not answer on %s within 15s: %s", Binary, host, r.Output())
}

// Stop terminates the registry (SIGTERM, then SIGKILL after 5 s) and waits
// for it. It is idempotent; tests call it to take the registry down.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// Output returns what the registry printed so far.
func (r *Registry) Output() string {
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	return r.out.w.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<20 {
		return len(p), nil
	}
	return l.w.Write(p)
}
