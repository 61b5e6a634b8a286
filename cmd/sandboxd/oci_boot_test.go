package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// standIn is a registry stand-in on loopback: the in-memory registry,
// except that requests matching hang (path substring, GET) are held — with
// headers sent when length > 0 — until the test ends.
type standIn struct {
	host, target string
	mu           sync.Mutex
	hang         string
	length       int
	requests     []string
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	inner := registrytest.NewInMemory(t, nil)
	s := &standIn{target: registrytest.Host(inner)}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		hang, length := s.hang, s.length
		s.mu.Unlock()
		if hang == "" || !strings.Contains(r.URL.Path, hang) || r.Method != http.MethodGet {
			inner.Config.Handler.ServeHTTP(w, r)
			return
		}
		if length > 0 {
			w.Header().Set("Content-Length", strconv.Itoa(length))
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("\x00asm"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s.host = registrytest.Host(srv)
	return s
}

func (s *standIn) setHang(substr string, length int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang, s.length = substr, length
}

func (s *standIn) count(method, substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

// servedProcess is a `sandboxd serve` child whose stderr events are collected.
type servedProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	events chan map[string]any
	done   chan struct{}
	mu     sync.Mutex
	lines  []string
}

func startServe(t *testing.T, args ...string) *servedProcess {
	t.Helper()
	cmd := exec.Command(sandboxdBinary(t), append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), tokenEnv+"=tok-123", "PORT=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &servedProcess{t: t, cmd: cmd, events: make(chan map[string]any, 256), done: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case p.events <- m:
				default:
				}
			}
		}
		close(p.events)
		_ = cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *servedProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitEvent waits up to 60 s for an event of kind whose fields contain want.
func (p *servedProcess) waitEvent(kind string, want map[string]string) map[string]any {
	p.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case m, ok := <-p.events:
			if !ok {
				p.t.Fatalf("serve exited before a %s event:\n%s", kind, p.output())
			}
			if m["kind"] != kind {
				continue
			}
			match := true
			for k, v := range want {
				if s, _ := m[k].(string); !strings.Contains(s, v) {
					match = false
				}
			}
			if match {
				return m
			}
		case <-timeout:
			p.t.Fatalf("no %s event %v within 60s:\n%s", kind, want, p.output())
		}
	}
}

// wait returns the exit code, failing the test if it takes over d.
func (p *servedProcess) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("serve still running %s later:\n%s", d, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

func ociToolsDir(t *testing.T, imageRef, modulePath, version string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(ociManifest(t, imageRef, modulePath, version, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tool.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func pushFixture(t *testing.T, host, ref, version, file string) *artifact.Artifact {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "testdata", "wasm", file))
	if err != nil {
		t.Fatal(err)
	}
	o, err := artifact.NewOCI(artifact.NewOCIConfig().WithCacheDir(t.TempDir()).WithInsecureRegistries(host).WithKeychain(authn.NewMultiKeychain()))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := o.Push(ctx, ref, version, []artifact.PushModule{{Title: "m.wasm", Wasm: wasm}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestServeBootBounded: serve's boot against a registry that hangs is
// bounded by the per-request deadline (boot-failed naming the step) and
// interruptible by SIGTERM at each stage (handshake, blob download),
// with its progress logged.
func TestServeBootBounded(t *testing.T) {
	s := newStandIn(t)
	a := pushFixture(t, s.target, s.target+"/acme/echo:1", "1", "echo_reactor.wasm")
	pinned := s.host + "/acme/echo@" + a.Digest
	layer := a.Layers[0]
	serveArgs := func(extra ...string) []string {
		return append([]string{"--tools", ociToolsDir(t, pinned, "m.wasm", "1"), "--insecure-registry", s.host,
			"--artifact-cache-dir", filepath.Join(t.TempDir(), "c"), "--cache-dir", sandboxtest.CacheDir(t)}, extra...)
	}

	t.Run("hung blob GET fails the boot with the step", func(t *testing.T) {
		s.setHang("/blobs/"+layer.Digest, int(layer.Size))
		p := startServe(t, serveArgs("--registry-timeout", "2s")...)
		p.waitEvent("artifact-download", map[string]string{"digest": layer.Digest, "state": "started"})
		ev := p.waitEvent("boot-failed", nil)
		b, _ := json.Marshal(ev["problems"])
		if !strings.Contains(string(b), "deadline-exceeded") || !strings.Contains(string(b), "GET blob "+layer.Digest) {
			t.Fatalf("boot-failed does not name the step: %s", b)
		}
		if code := p.wait(10 * time.Second); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
	})

	for _, c := range []struct{ stage, hang, wait string }{
		{"handshake", "/v2/", "artifact-resolve"},
		{"blob download", "/blobs/" + layer.Digest, "artifact-download"},
	} {
		t.Run("SIGTERM during "+c.stage, func(t *testing.T) {
			length := 0
			if strings.Contains(c.hang, "/blobs/") {
				length = int(layer.Size)
			}
			s.setHang(c.hang, length)
			p := startServe(t, serveArgs()...) // the default 30 s request deadline
			p.waitEvent(c.wait, nil)
			time.Sleep(100 * time.Millisecond) // inside the hung request
			start := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.wait(10 * time.Second)
			t.Logf("exit %d %s after SIGTERM", code, time.Since(start).Round(time.Millisecond))
			if code != 0 || !strings.Contains(p.output(), `"during":"boot"`) {
				t.Fatalf("exit %d, want 0 with stopped during boot:\n%s", code, p.output())
			}
		})
	}
	s.setHang("", 0)
}

// TestServeReloadReresolvesTags: SIGHUP re-resolves a tag at once (no tag
// TTL window): a tag moved to a new artifact is served after the reload.
func TestServeReloadReresolvesTags(t *testing.T) {
	s := newStandIn(t)
	pushFixture(t, s.target, s.target+"/acme/live:1", "1", "echo_reactor.wasm")
	p := startServe(t, "--tools", ociToolsDir(t, s.host+"/acme/live:1", "m.wasm", "1"), "--insecure-registry", s.host,
		"--artifact-cache-dir", filepath.Join(t.TempDir(), "c"), "--cache-dir", sandboxtest.CacheDir(t))
	p.waitEvent("listening", nil)
	moved := pushFixture(t, s.target, s.target+"/acme/live:1", "1", "counter_reactor.wasm")
	heads := s.count(http.MethodHead, "/manifests/1")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitEvent("artifact-download", map[string]string{"digest": moved.Layers[0].Digest, "state": "done"})
	p.waitEvent("reloaded", nil)
	if s.count(http.MethodHead, "/manifests/1") <= heads {
		t.Fatal("the reload did not ask the registry where the tag points")
	}
}

// openPTY returns the terminal end of a new pseudo-terminal.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestProgressOnStderrTerminal: the meter is drawn when stderr is a
// terminal even with stdout captured (REF=$(sandboxd pull …)).
func TestProgressOnStderrTerminal(t *testing.T) {
	var captured strings.Builder
	if p := newProgress(&captured, openPTY(t)); !p.on {
		t.Fatal("no progress with stderr on a terminal and stdout captured")
	}
	if p := newProgress(openPTY(t), &captured); p.on {
		t.Fatal("progress drawn into a non-terminal stderr")
	}
}

// TestOCIRunVerifyKey: run --verify-key refuses an unsigned artifact and
// runs it once a cosign key-based signature by that key is pushed (made
// here, pushed with ORAS under cosign's .sig tag); inspect lists it.
func TestOCIRunVerifyKey(t *testing.T) {
	reg := registrytest.Start(t)
	oras := orasBinary(t)
	host := reg.Host
	fixture := filepath.Join("..", "..", "testdata", "wasm", "echo_reactor.wasm")
	code, stdout, stderr := runCLI(t, "", "push", fixture, host+"/acme/signed:1", "--artifact-version", "1", "--insecure-registry", host, "--artifact-cache-dir", t.TempDir()+"/c")
	if code != 0 {
		t.Fatalf("push: %s", stderr)
	}
	pinned := strings.TrimSpace(stdout)
	digest := pinned[strings.Index(pinned, "@")+1:]
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	dir := t.TempDir()
	pub := filepath.Join(dir, "cosign.pub")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)

	manifest := ociManifest(t, pinned, "echo_reactor.wasm", "1", nil)
	in := writeInput(t, `{"message":"hi"}`)
	run := func() map[string]any {
		_, stdout, _ := runCLI(t, "", "run", "--manifest", manifest, "--input", in, "--insecure-registry", host, "--artifact-cache-dir", t.TempDir()+"/c", "--verify-key", pub)
		return envelope(t, stdout)
	}
	if env := run(); env["kind"] != "error" || env["code"] != "artifact-refused" {
		t.Fatalf("unsigned under --verify-key: %v", env)
	}

	payload, _ := json.Marshal(map[string]any{"critical": map[string]any{
		"identity": map[string]string{"docker-reference": host + "/acme/signed"},
		"image":    map[string]string{"docker-manifest-digest": digest},
		"type":     "cosign container image signature"}, "optional": nil})
	sum := sha256.Sum256(payload)
	sig, _ := ecdsa.SignASN1(rand.Reader, k, sum[:])
	ann, _ := json.Marshal(map[string]map[string]string{"payload.json": {artifact.AnnotationCosignSignature: base64.StdEncoding.EncodeToString(sig)}})
	os.WriteFile(filepath.Join(dir, "payload.json"), payload, 0o644)
	os.WriteFile(filepath.Join(dir, "ann.json"), ann, 0o644)
	cmd := exec.Command(oras, "push", "--plain-http", host+"/acme/signed:sha256-"+strings.TrimPrefix(digest, "sha256:")+".sig",
		"payload.json:"+artifact.MediaTypeCosignPayload, "--annotation-file", "ann.json")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oras push: %v\n%s", err, out)
	}
	if env := run(); env["kind"] != "result" {
		t.Fatalf("signed under --verify-key: %v", env)
	}
	code, stdout, _ = runCLI(t, "", "inspect", pinned, "--insecure-registry", host, "--artifact-cache-dir", t.TempDir()+"/c")
	if code != 0 || !strings.Contains(stdout, "referrers:") || !strings.Contains(stdout, "cosign tag") {
		t.Fatalf("inspect: exit %d\n%s", code, stdout)
	}
}
