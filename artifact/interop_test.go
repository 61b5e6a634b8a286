package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// ociTool returns the path of a registry client the interop tests drive
// (oras, crane): from PATH, else from the repository's .tools/bin (where
// .ci/deps.d/40-oci.sh installs it). Missing, the test is skipped, except
// under CI=true, where it fails.
func ociTool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"../.tools/bin", "../../.tools/bin"} {
		if p, err := filepath.Abs(filepath.Join(dir, name)); err == nil {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (make tools); CI=true requires it", name)
	}
	t.Skipf("%s is not installed (make tools)", name)
	return ""
}

// client runs one registry client in dir with a deadline and an empty
// docker config (never the host's credentials).
type client struct {
	t    testing.TB
	bin  string
	dir  string
	args []string // appended to every call (--plain-http, --insecure)
	env  []string
}

func newClient(t testing.TB, name, dir string, args ...string) *client {
	t.Helper()
	cfg := t.TempDir()
	return &client{t: t, bin: ociTool(t, name), dir: dir, args: args, env: append(os.Environ(), "DOCKER_CONFIG="+cfg, "HOME="+cfg)}
}

func (c *client) run(args ...string) string {
	c.t.Helper()
	out, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", filepath.Base(c.bin), strings.Join(args, " "), err, out)
	}
	return out
}

func (c *client) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append(args, c.args...)...)
	cmd.Dir, cmd.Env = c.dir, c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// digestOf returns the "Digest: sha256:…" an oras push printed.
func digestOf(t testing.TB, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "Digest: "); ok {
			return d
		}
	}
	t.Fatalf("no digest in %q", out)
	return ""
}

func writeFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInteropLayouts builds each layout other tools push with ORAS and
// crane against a real docker-registry and resolves a module from it.
func TestInteropLayouts(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	reg := registrytest.Start(t)
	host := reg.Host
	dir := t.TempDir()
	oras := newClient(t, "oras", dir, "--plain-http")
	crane := newClient(t, "crane", dir, "--insecure")
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	component := []byte("\x00asm\x0d\x00\x01\x00") // the component model's preamble: an empty component
	writeFiles(t, dir, map[string][]byte{
		"echo.wasm": echo, "counter.wasm": counter, "component.wasm": component,
		"p1.json":    []byte(`{"architecture":"wasm","os":"wasip1"}`),
		"p2.json":    []byte(`{"architecture":"wasm","os":"wasip2"}`),
		"amd64.json": []byte(`{"architecture":"amd64","os":"linux"}`),
		"empty.json": []byte(`{}`),
	})
	// Tags move in this test: re-resolve them on every call.
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithTagTTL(0) })
	resolve := func(image, path, version string) (*artifact.Module, error) {
		return o.Resolve(ctxT(t), ociRef(image, path, version))
	}
	mustResolve := func(t *testing.T, image, path, version string, want []byte) {
		t.Helper()
		m, err := resolve(image, path, version)
		if err != nil {
			t.Fatalf("%s#%s: %v", image, path, err)
		}
		if !bytes.Equal(m.Bytes, want) {
			t.Fatalf("%s#%s: wrong module", image, path)
		}
	}
	ver := "--annotation=" + artifact.AnnotationVersion + "=1"

	t.Run("oras v1.1 titled", func(t *testing.T) {
		// ORAS's default: image-spec 1.1, the empty config, artifactType.
		oras.run("push", host+"/oras/titled:1", "echo.wasm:application/wasm", "--artifact-type", artifact.MediaTypeWasmConfig, ver)
		mustResolve(t, host+"/oras/titled:1", "echo.wasm", "1", echo)
		_, err := resolve(host+"/oras/titled:1", "other.wasm", "1")
		wantCode(t, err, toolerr.ArtifactUnavailable)
	})

	t.Run("oras v1.0 CNCF config", func(t *testing.T) {
		oras.run("push", "--image-spec", "v1.0", "--config", "p1.json:"+artifact.MediaTypeWasmConfig, host+"/oras/cncf:1", "echo.wasm:application/wasm", "counter.wasm:application/wasm", ver)
		mustResolve(t, host+"/oras/cncf:1", "counter.wasm", "1", counter)
	})

	t.Run("untitled single wasm layer", func(t *testing.T) {
		// What oci-wasm, wkg and wash push: one application/wasm layer, no title.
		oras.run("blob", "push", host+"/oras/untitled", "echo.wasm")
		oras.run("blob", "push", host+"/oras/untitled", "p1.json")
		m := manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, []byte(`{"architecture":"wasm","os":"wasip1"}`), ""),
			[]desc{blobDesc(artifact.MediaTypeWasmLayer, echo, "")}, "1")
		writeFiles(t, dir, map[string][]byte{"untitled.json": m})
		oras.run("manifest", "push", host+"/oras/untitled:1", "untitled.json")
		for _, p := range []string{"handler.wasm", "whatever/module.wasm", "echo.wasm"} {
			mustResolve(t, host+"/oras/untitled:1", p, "1", echo)
		}
		// Two untitled layers: no module can be chosen.
		oras.run("blob", "push", host+"/oras/untitled", "counter.wasm")
		two := manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, []byte(`{"architecture":"wasm","os":"wasip1"}`), ""),
			[]desc{blobDesc(artifact.MediaTypeWasmLayer, echo, ""), blobDesc(artifact.MediaTypeWasmLayer, counter, "")}, "1")
		writeFiles(t, dir, map[string][]byte{"two.json": two})
		oras.run("manifest", "push", host+"/oras/untitled:2", "two.json")
		_, err := resolve(host+"/oras/untitled:2", "handler.wasm", "1")
		if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "none is titled") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("wasm-to-oci", func(t *testing.T) {
		oras.run("push", "--image-spec", "v1.0", "--config", "empty.json:"+artifact.MediaTypeWasmConfigV1, host+"/w2o/echo:1", "echo.wasm:"+artifact.MediaTypeWasmContentLayer, ver)
		mustResolve(t, host+"/w2o/echo:1", "echo.wasm", "1", echo)
	})

	t.Run("config checked", func(t *testing.T) {
		oras.run("push", "--image-spec", "v1.0", "--config", "amd64.json:"+artifact.MediaTypeWasmConfig, host+"/oras/amd64:1", "echo.wasm:application/wasm", ver)
		_, err := resolve(host+"/oras/amd64:1", "echo.wasm", "1")
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, `architecture "amd64"`) {
			t.Fatalf("message %q", te.Message)
		}
		oras.run("push", "--image-spec", "v1.0", "--config", "p2.json:"+artifact.MediaTypeWasmConfig, host+"/oras/p2:1", "echo.wasm:application/wasm", ver)
		_, err = resolve(host+"/oras/p2:1", "echo.wasm", "1")
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "component") {
			t.Fatalf("message %q", te.Message)
		}
		// A component binary under a wasip1 config is refused from its bytes.
		oras.run("push", "--image-spec", "v1.0", "--config", "p1.json:"+artifact.MediaTypeWasmConfig, host+"/oras/comp:1", "component.wasm:application/wasm", ver)
		_, err = resolve(host+"/oras/comp:1", "component.wasm", "1")
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "component") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("oras index", func(t *testing.T) {
		p1 := digestOf(t, oras.run("push", "--image-spec", "v1.0", "--config", "p1.json:"+artifact.MediaTypeWasmConfig, host+"/idx/m:p1", "echo.wasm:application/wasm"))
		oras.run("push", "--image-spec", "v1.0", "--config", "p2.json:"+artifact.MediaTypeWasmConfig, host+"/idx/m:p2", "counter.wasm:application/wasm")
		// wasip2 listed first; entries carry artifactType, no platform.
		out := oras.run("manifest", "index", "create", host+"/idx/m:both", "p2", "p1", ver)
		idx := oras.run("manifest", "fetch", host+"/idx/m:both")
		if strings.Contains(idx, `"platform"`) || !strings.Contains(idx, `"artifactType"`) {
			t.Fatalf("oras wrote another index than this test is about: %s", idx)
		}
		insp, err := o.Inspect(ctxT(t), host+"/idx/m:both")
		if err != nil || insp.Digest != p1 || insp.Index != digestOf(t, out) || insp.VersionFrom != artifact.VersionFromIndex {
			t.Fatalf("inspect: %+v %v (want the wasip1 entry %s)", insp, err, p1)
		}
		mustResolve(t, host+"/idx/m:both", "echo.wasm", "1", echo)
		oras.run("manifest", "index", "create", host+"/idx/m:p2only", "p2", ver)
		// A one-entry index is followed; the entry's config refuses it.
		_, err = resolve(host+"/idx/m:p2only", "counter.wasm", "1")
		wantCode(t, err, toolerr.ArtifactRefused)
		oras.run("push", "--image-spec", "v1.0", "--config", "p2.json:"+artifact.MediaTypeWasmConfig, host+"/idx/m:p2b", "echo.wasm:application/wasm")
		oras.run("manifest", "index", "create", host+"/idx/m:p2two", "p2", "p2b", ver)
		_, err = resolve(host+"/idx/m:p2two", "counter.wasm", "1")
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "only WebAssembly components") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("crane index", func(t *testing.T) {
		// crane index append copies each config's platform into the index:
		// wasm/wasip2 first, then wasm/wasip1.
		p1 := digestOf(t, oras.run("push", "--image-spec", "v1.0", "--config", "p1.json:"+artifact.MediaTypeWasmConfig, host+"/cidx/m:p1", "echo.wasm:application/wasm"))
		oras.run("push", "--image-spec", "v1.0", "--config", "p2.json:"+artifact.MediaTypeWasmConfig, host+"/cidx/m:p2", "counter.wasm:application/wasm")
		crane.run("index", "append", "-m", host+"/cidx/m:p2", "-m", host+"/cidx/m:p1", "-t", host+"/cidx/m:both")
		if idx := crane.run("manifest", host+"/cidx/m:both"); !strings.Contains(idx, `"os":"wasip2"`) {
			t.Fatalf("crane wrote another index than this test is about: %s", idx)
		}
		insp, err := o.Inspect(ctxT(t), host+"/cidx/m:both")
		if err != nil || insp.Digest != p1 || len(insp.IndexManifests) != 2 || !insp.IndexManifests[1].Chosen || insp.IndexManifests[0].Platform != "wasm/wasip2" {
			t.Fatalf("inspect: %+v %v (want the wasip1 entry %s)", insp, err, p1)
		}
		mustResolve(t, host+"/cidx/m:both", "echo.wasm", "", echo)
	})

	t.Run("zstd image layer", func(t *testing.T) {
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "app/echo.wasm", Mode: 0o644, Size: int64(len(echo)), Typeflag: tar.TypeReg})
		tw.Write(echo)
		tw.Close()
		var zb bytes.Buffer
		zw, _ := zstd.NewWriter(&zb)
		zw.Write(tb.Bytes())
		zw.Close()
		writeFiles(t, dir, map[string][]byte{"layer.tar.zst": zb.Bytes(), "img.json": []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)})
		oras.run("push", "--image-spec", "v1.0", "--config", "img.json:application/vnd.oci.image.config.v1+json", host+"/img/zstd:1", "layer.tar.zst:application/vnd.oci.image.layer.v1.tar+zstd", ver)
		mustResolve(t, host+"/img/zstd:1", "app/echo.wasm", "1", echo)
	})

	t.Run("crane image version rule", func(t *testing.T) {
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "app/echo.wasm", Mode: 0o644, Size: int64(len(echo)), Typeflag: tar.TypeReg})
		tw.Write(echo)
		tw.Close()
		writeFiles(t, dir, map[string][]byte{"layer.tar": tb.Bytes()})
		crane.run("append", "-f", "layer.tar", "-t", host+"/crane/img:1")
		// No version anywhere: refused as exactly that.
		_, err := resolve(host+"/crane/img:1", "app/echo.wasm", "3")
		if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, "carries no version") {
			t.Fatalf("message %q", te.Message)
		}
		// The config label is the fallback...
		crane.run("mutate", "--label", artifact.AnnotationVersion+"=3", "-t", host+"/crane/img:1", host+"/crane/img:1")
		mustResolve(t, host+"/crane/img:1", "app/echo.wasm", "3", echo)
		insp, err := o.Inspect(ctxT(t), host+"/crane/img:1")
		if err != nil || insp.VersionFrom != artifact.VersionFromLabel || insp.Layout != artifact.LayoutImage {
			t.Fatalf("inspect: %+v %v", insp, err)
		}
		// ...and the manifest annotation wins over it.
		crane.run("mutate", "--annotation", artifact.AnnotationVersion+"=4", "-t", host+"/crane/img:1", host+"/crane/img:1")
		mustResolve(t, host+"/crane/img:1", "app/echo.wasm", "4", echo)
		_, err = resolve(host+"/crane/img:1", "app/echo.wasm", "3")
		if te := wantCode(t, err, toolerr.ArtifactIntegrityFailed); !strings.Contains(te.Message, "manifest annotation") {
			t.Fatalf("message %q", te.Message)
		}
	})

	t.Run("sandboxd push read by oras and crane", func(t *testing.T) {
		a, err := o.Push(ctxT(t), host+"/sbx/echo:1", "1", []artifact.PushModule{{Title: "echo.wasm", Wasm: echo}})
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Created      string `json:"created"`
			Architecture string `json:"architecture"`
			OS           string `json:"os"`
		}
		if err := json.Unmarshal([]byte(crane.run("config", a.Ref)), &cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339, cfg.Created); err != nil || cfg.Architecture != "wasm" || cfg.OS != "wasip1" {
			t.Fatalf("config %+v (created: %v)", cfg, err)
		}
		out := t.TempDir()
		pull := newClient(t, "oras", out, "--plain-http")
		pull.run("pull", a.Ref)
		if b, err := os.ReadFile(filepath.Join(out, "echo.wasm")); err != nil || !bytes.Equal(b, echo) {
			t.Fatalf("oras pull: %v", err)
		}
	})
}

// TestPushRefusesUnsafeTitles: titles a puller would write outside its
// directory are refused before anything is pushed.
func TestPushRefusesUnsafeTitles(t *testing.T) {
	echo := fixture(t, "echo_reactor.wasm")
	for _, title := range []string{"../evil.wasm", "/etc/abs.wasm", "a/../../b.wasm", `a\b.wasm`, "a\x00.wasm", ""} {
		_, _, err := artifact.BuildArtifact("1", []artifact.PushModule{{Title: title, Wasm: echo}})
		wantCode(t, err, toolerr.ArtifactRefused)
	}
	for _, title := range []string{"echo.wasm", "tools/echo.wasm", "a..b.wasm"} {
		if _, _, err := artifact.BuildArtifact("1", []artifact.PushModule{{Title: title, Wasm: echo}}); err != nil {
			t.Fatalf("%q: %v", title, err)
		}
	}
}

// TestPushProgressDuringBlob: push reports bytes while a blob uploads,
// not only once it is done.
func TestPushProgressDuringBlob(t *testing.T) {
	host := registrytest.Host(registrytest.NewInMemory(t, nil))
	big := fixture(t, "go_echo_reactor.wasm")
	var partial, updates int
	_, err := newOCI(t, host, nil).Push(ctxT(t), host+"/a/big:1", "1", []artifact.PushModule{{Title: "m.wasm", Wasm: big}},
		artifact.WithProgress(func(p artifact.Progress) {
			updates++
			if p.Done > 0 && p.Done < p.Total {
				partial++
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d progress updates, %d mid-blob, for a %d-byte module", updates, partial, len(big))
	if partial == 0 {
		t.Fatal("no progress was reported while the module uploaded")
	}
}
