package artifact_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/sandboxd/sandboxd/artifact"
	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/toolerr"
)

// TestExportTagCopy: pull -o (Export), tag and copy against docker-registry,
// checked with crane.
func TestExportTagCopy(t *testing.T) {
	t.Parallel() // its own registries, caches and clients; no env
	reg := registrytest.Start(t)
	host := reg.Host
	crane := newClient(t, "crane", t.TempDir(), "--insecure")
	echo, counter := fixture(t, "echo_reactor.wasm"), fixture(t, "counter_reactor.wasm")
	o := newOCI(t, host, nil)
	a := pushWasm(t, o, host+"/ux/pack:1", "1", artifact.PushModule{Title: "echo.wasm", Wasm: echo}, artifact.PushModule{Title: "tools/counter.wasm", Wasm: counter})

	dir := t.TempDir()
	_, mods, err := newOCI(t, host, nil).Export(ctxT(t), a.Ref, dir)
	if err != nil || len(mods) != 2 {
		t.Fatalf("export: %v %v", mods, err)
	}
	for p, want := range map[string][]byte{"echo.wasm": echo, "tools/counter.wasm": counter} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// A hostile title is refused on export, not written outside dir.
	cfg := []byte(`{"architecture":"wasm","os":"wasip1"}`)
	putBlob(t, host, "ux/evil", cfg)
	putBlob(t, host, "ux/evil", echo)
	putManifest(t, host, "ux/evil", "1", "application/vnd.oci.image.manifest.v1+json",
		manifestJSON(blobDesc(artifact.MediaTypeWasmConfig, cfg, ""), []desc{blobDesc(artifact.MediaTypeWasmLayer, echo, "../evil.wasm")}, "1"))
	_, _, err = newOCI(t, host, nil).Export(ctxT(t), host+"/ux/evil:1", filepath.Join(dir, "sub"))
	wantCode(t, err, toolerr.ArtifactRefused)
	if _, err := os.Stat(filepath.Join(dir, "evil.wasm")); err == nil {
		t.Fatal("a ../ title was written outside the directory")
	}

	if d, err := o.Tag(ctxT(t), host+"/ux/pack:1", "stable", "2026.12"); err != nil || d != a.Ref {
		t.Fatalf("tag: %s %v", d, err)
	}
	for _, tag := range []string{"stable", "2026.12"} {
		if got := strings.TrimSpace(crane.run("digest", host+"/ux/pack:"+tag)); got != a.Digest {
			t.Fatalf("crane digest %s: %s, want %s", tag, got, a.Digest)
		}
	}
	cp, err := newOCI(t, host, nil).Copy(ctxT(t), host+"/ux/pack:1", host+"/ux/copy:1")
	if err != nil || cp.Ref != host+"/ux/copy@"+a.Digest {
		t.Fatalf("copy: %+v %v", cp, err)
	}
	if got := strings.TrimSpace(crane.run("digest", host+"/ux/copy:1")); got != a.Digest {
		t.Fatalf("crane digest of the copy: %s", got)
	}
	if _, err := newOCI(t, host, nil).Resolve(ctxT(t), ociRef(host+"/ux/copy:1", "tools/counter.wasm", "1")); err != nil {
		t.Fatal(err)
	}
}

// TestLoginLogout: login checks the credentials against docker-registry
// (htpasswd) and writes the docker config (mode 0600) that sandboxd and
// crane then use; logout removes the entry.
func TestLoginLogout(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Options{Htpasswd: registrytest.WriteHtpasswd(t)})
	host := reg.Host
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"auths":{"other.example":{"auth":"eDp5"}},"psFormat":"table"}`), 0o600)
	o := newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithKeychain(authn.DefaultKeychain) })
	if _, err := o.Login(ctxT(t), host, registrytest.HtpasswdUser, "wrong"); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("wrong password: %v", err)
	}
	p, err := o.Login(ctxT(t), host, registrytest.HtpasswdUser, registrytest.HtpasswdPassword)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v %v", p, st.Mode(), err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "other.example") || !strings.Contains(string(b), "psFormat") {
		t.Fatalf("login dropped other entries: %s", b)
	}
	a := pushWasm(t, o, host+"/ux/auth:1", "1", artifact.PushModule{Title: "m.wasm", Wasm: fixture(t, "echo_reactor.wasm")})
	cmd := exec.Command(ociTool(t, "crane"), "digest", "--insecure", host+"/ux/auth:1")
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+cfgDir)
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != a.Digest {
		t.Fatalf("crane with the config login wrote: %v %s", err, out)
	}
	if _, had, err := artifact.Logout(host); err != nil || !had {
		t.Fatalf("logout: %v %v", had, err)
	}
	_, err = newOCI(t, host, func(c artifact.OCIConfig) artifact.OCIConfig { return c.WithKeychain(authn.DefaultKeychain) }).Resolve(ctxT(t), ociRef(a.Ref, "m.wasm", "1"))
	if te := wantCode(t, err, toolerr.ArtifactUnavailable); !strings.Contains(te.Message, "none were found") {
		t.Fatalf("after logout: %q", te.Message)
	}
}

// TestPushWithTags: WithTags points more tags at the pushed manifest
// (read back with crane); a bad tag is refused before anything is sent,
// and a layout target refuses more tags.
func TestPushWithTags(t *testing.T) {
	t.Parallel() // its own registry, caches and clients; no env
	reg := registrytest.Start(t)
	host := reg.Host
	crane := newClient(t, "crane", t.TempDir(), "--insecure")
	mod := artifact.PushModule{Title: "echo.wasm", Wasm: fixture(t, "echo_reactor.wasm")}
	o := newOCI(t, host, nil)
	a, err := o.Push(ctxT(t), host+"/ux/tags:1", "1", []artifact.PushModule{mod}, artifact.WithTags("2", "stable"))
	if err != nil || a.Ref != host+"/ux/tags@"+a.Digest {
		t.Fatalf("push: %+v %v", a, err)
	}
	for _, tag := range []string{"1", "2", "stable"} {
		if got := strings.TrimSpace(crane.run("digest", host+"/ux/tags:"+tag)); got != a.Digest {
			t.Fatalf("crane digest %s: %s, want %s", tag, got, a.Digest)
		}
	}
	_, err = o.Push(ctxT(t), host+"/ux/bad:1", "1", []artifact.PushModule{mod}, artifact.WithTags("ok", "no/slash"))
	if te := wantCode(t, err, toolerr.ArtifactRefused); !strings.Contains(te.Message, `invalid tag "no/slash"`) {
		t.Fatalf("bad tag: %q", te.Message)
	}
	if out, err := crane.try("digest", host+"/ux/bad:1"); err == nil || !strings.Contains(out, "UNKNOWN") {
		t.Fatalf("a push with a bad tag sent its manifest: %v %s", err, out)
	}
	_, err = o.Push(ctxT(t), artifact.LayoutPrefix+t.TempDir()+":1", "1", []artifact.PushModule{mod}, artifact.WithTags("2"))
	wantCode(t, err, toolerr.ArtifactRefused)
}
