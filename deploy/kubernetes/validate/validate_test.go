// Package validate checks the Kubernetes manifests in ../base and
// ../overlays/example as kubectl apply -k would apply them: each directory
// is rendered with kustomize (sigs.k8s.io/kustomize/api, the library
// kubectl embeds), every rendered object decodes strictly (unknown or
// repeated fields fail) into the k8s.io/api type of its kind, and the pieces
// agree with each other and with sandboxd (selectors, ports, probes on
// /readyz and /healthz, the grace period covering preStop plus the drain,
// the locked-down securityContext, the token from a Secret, caches on an
// emptyDir, GOMEMLIMIT under the limit, the pack one digest-pinned oci://
// ref, serve flags sandboxd has). The overlay must change what it says it
// changes: an images: entry that names no image, a ConfigMap that is not
// replaced or a patch that lands nowhere fails.
// It is its own module so sandboxd gains no Kubernetes dependency.
package validate

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	base    = "../base"
	overlay = "../overlays/example"
)

// dirs are the kustomizations every check runs on.
var dirs = []string{base, overlay}

type objects struct {
	yaml   []byte // the whole render, as kubectl kustomize prints it
	deploy *appsv1.Deployment
	svc    *corev1.Service
	hpa    *autoscalingv2.HorizontalPodAutoscaler
	pdb    *policyv1.PodDisruptionBudget
	netpol *networkingv1.NetworkPolicy
	cms    []*corev1.ConfigMap
}

// render builds dir with kustomize and decodes each object strictly.
func render(t *testing.T, dir string) objects {
	t.Helper()
	o, err := renderDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return o
}

func renderDir(dir string) (objects, error) {
	var o objects
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return o, fmt.Errorf("kustomize build: %v", err)
	}
	if o.yaml, err = m.AsYaml(); err != nil {
		return o, err
	}
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			return o, err
		}
		id := r.GetApiVersion() + " " + r.GetKind()
		strict := func(v any) error {
			if err := yaml.UnmarshalStrict(b, v); err != nil {
				return fmt.Errorf("%s %s does not decode strictly: %v", id, r.GetName(), err)
			}
			return nil
		}
		switch id {
		case "apps/v1 Deployment":
			o.deploy = &appsv1.Deployment{}
			err = strict(o.deploy)
		case "v1 Service":
			o.svc = &corev1.Service{}
			err = strict(o.svc)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			err = strict(o.hpa)
		case "policy/v1 PodDisruptionBudget":
			o.pdb = &policyv1.PodDisruptionBudget{}
			err = strict(o.pdb)
		case "networking.k8s.io/v1 NetworkPolicy":
			o.netpol = &networkingv1.NetworkPolicy{}
			err = strict(o.netpol)
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			err = strict(cm)
			o.cms = append(o.cms, cm)
		default:
			err = fmt.Errorf("unexpected %s %s", id, r.GetName())
		}
		if err != nil {
			return o, err
		}
	}
	if o.deploy == nil || o.svc == nil || o.hpa == nil || o.pdb == nil || o.netpol == nil {
		return o, fmt.Errorf("the render lacks a Deployment, Service, HPA, PDB or NetworkPolicy")
	}
	return o, nil
}

func (o objects) container() corev1.Container { return o.deploy.Spec.Template.Spec.Containers[0] }

func (o objects) configMap(name string) *corev1.ConfigMap {
	for _, cm := range o.cms {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// args returns the container's args with $(VAR) expanded as the kubelet
// does, from literal env values and ConfigMap keys of the render.
func (o objects) args() ([]string, error) {
	c := o.container()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := o.configMap(ref.Name)
			if cm == nil {
				return nil, fmt.Errorf("env %s: no ConfigMap %q in the render", e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("env %s: ConfigMap %s has no key %q", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		}
	}
	var errs []string
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				errs = append(errs, fmt.Sprintf("argument %q: %s is not a value or ConfigMap key in env", a, m))
				return m
			}
			return v
		})
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

func mustArgs(t *testing.T, o objects) []string {
	t.Helper()
	a, err := o.args()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// Every file of the base is one of its resources, and the base has no
// images: of its own (it would rename the image before an overlay's images:
// looked for it, so the overlay's entry would match nothing).
func TestBaseFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
		Images    []any    `json:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(base, "*.yaml"))
	for _, f := range files {
		if n := filepath.Base(f); n != "kustomization.yaml" && !slices.Contains(k.Resources, n) {
			t.Errorf("%s is not in kustomization.yaml's resources", n)
		}
	}
	if len(k.Images) > 0 {
		t.Error("the base's kustomization.yaml has images:; put the placeholder in deployment.yaml")
	}
	raw, err := os.ReadFile(filepath.Join(base, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		t.Fatal(err)
	}
	if got, want := render(t, base).container().Image, d.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("the base renders image %q, deployment.yaml says %q", got, want)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	for _, dir := range dirs {
		render(t, dir)
	}
}

func TestManifestsAgree(t *testing.T) {
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { checkAgree(t, render(t, dir)) })
	}
}

func checkAgree(t *testing.T, o objects) {
	d := o.deploy
	pod := d.Spec.Template
	if !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	if !selects(o.svc.Spec.Selector, pod.Labels) || !selects(o.pdb.Spec.Selector.MatchLabels, pod.Labels) ||
		!selects(o.netpol.Spec.PodSelector.MatchLabels, pod.Labels) {
		t.Error("the Service, PDB or NetworkPolicy does not select the pods")
	}
	if o.hpa.Spec.ScaleTargetRef.Kind != "Deployment" || o.hpa.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("the HPA targets %+v", o.hpa.Spec.ScaleTargetRef)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	args := mustArgs(t, o)
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || o.svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("ports: container %v, service %v", c.Ports, o.svc.Spec.Ports)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
	}
	if env["PORT"].Value != "8787" || c.Ports[0].ContainerPort != 8787 {
		t.Errorf("PORT %q, containerPort %d", env["PORT"].Value, c.Ports[0].ContainerPort)
	}
	if tok := env["KINDGI_PACK_SERVICE_TOKEN"]; tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil {
		t.Error("the token does not come from a Secret")
	}

	// Probes: readiness on /readyz (503 while booting or draining), liveness
	// on /healthz.
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v", p)
	}

	// The grace period covers the preStop sleep plus the drain.
	drain := 8 * time.Second // serve's default
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--drain-timeout="); ok {
			var err error
			if drain, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("no preStop sleep (the image has no shell, so exec hooks cannot sleep)")
	} else {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < preStop+drain+2*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s < preStop %s + drain %s + 2s", grace, preStop, drain)
	}

	// Locked down.
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v", sc)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the pod does not run as a non-root uid")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}

	// Caches live on an emptyDir (the root filesystem is read-only).
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for name := range mounts {
		if _, ok := vols[name]; !ok {
			t.Errorf("volumeMount %s has no volume", name)
		}
	}
	for _, a := range args {
		for _, f := range []string{"--cache-dir=", "--artifact-cache-dir="} {
			if dir, ok := strings.CutPrefix(a, f); ok {
				found := false
				for name, mp := range mounts {
					if strings.HasPrefix(dir, mp+"/") && vols[name].EmptyDir != nil {
						found = true
					}
				}
				if !found {
					t.Errorf("%s%s is not under an emptyDir mount", f, dir)
				}
			}
		}
	}
	// A --tools directory must be a mounted ConfigMap of the render.
	for _, a := range args {
		if dir, ok := strings.CutPrefix(a, "--tools="); ok {
			v := vols[nameOfMount(c, dir)]
			if v.ConfigMap == nil || o.configMap(v.ConfigMap.Name) == nil {
				t.Errorf("--tools=%s is not a ConfigMap of the render", dir)
			}
		}
	}
	// DOCKER_CONFIG, when set, is a read-only Secret mount holding
	// config.json.
	if dc, ok := env["DOCKER_CONFIG"]; ok {
		v := vols[nameOfMount(c, dc.Value)]
		if v.Secret == nil || !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool {
			return k.Key == corev1.DockerConfigJsonKey && k.Path == "config.json"
		}) || !mountReadOnly(c, dc.Value) {
			t.Errorf("DOCKER_CONFIG=%s is not a read-only mount of a Secret's %s as config.json", dc.Value, corev1.DockerConfigJsonKey)
		}
	}
	if o.hpa.Spec.MinReplicas == nil || *o.hpa.Spec.MinReplicas < 2 || o.pdb.Spec.MaxUnavailable == nil {
		t.Error("HPA minReplicas < 2 or PDB without maxUnavailable: a drain could take the service down")
	}
}

func nameOfMount(c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

func mountReadOnly(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.ReadOnly
		}
	}
	return false
}

// GOMEMLIMIT is about 90 % of the memory the Go heap may have: the
// container's memory limit less its memory-backed emptyDirs, whose pages
// are charged to the same cgroup.
func TestGOMEMLIMIT(t *testing.T) {
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			o := render(t, dir)
			c := o.container()
			var limit string
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					if e.ValueFrom != nil {
						t.Fatal("GOMEMLIMIT from a field ref is the whole limit; set 90 % of it")
					}
					limit = e.Value
				}
			}
			got, err := parseGOMEMLIMIT(limit)
			if err != nil {
				t.Fatalf("GOMEMLIMIT=%q: %v", limit, err)
			}
			avail := c.Resources.Limits.Memory().Value()
			for _, v := range o.deploy.Spec.Template.Spec.Volumes {
				if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
					if v.EmptyDir.SizeLimit == nil {
						t.Fatalf("memory emptyDir %s has no sizeLimit", v.Name)
					}
					avail -= v.EmptyDir.SizeLimit.Value()
				}
			}
			ratio := float64(got) / float64(avail)
			if ratio < 0.85 || ratio > 0.92 {
				t.Errorf("GOMEMLIMIT=%s is %.1f %% of the %s the heap may use (limit %s less memory emptyDirs); want about 90 %%",
					limit, 100*ratio, resource.NewQuantity(avail, resource.BinarySI), c.Resources.Limits.Memory())
			}
			t.Logf("GOMEMLIMIT=%s: %.1f %% of %d MiB", limit, 100*ratio, avail>>20)
		})
	}
}

// parseGOMEMLIMIT parses the runtime's syntax: a byte count with an
// optional B, KiB, MiB, GiB or TiB suffix.
func parseGOMEMLIMIT(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = n, u.shift
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n <= 0 {
		return 0, fmt.Errorf("not a byte count")
	}
	return n << shift, nil
}

// The pack comes from the registry: exactly one --index, an oci:// ref
// pinned by digest (a tag would let replicas of one Deployment serve
// different packs), and no --tools. A ConfigMap volume, if an overlay
// mounts one, must hold tool manifests with digest-pinned OCI refs.
func TestPackFromRegistry(t *testing.T) {
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			o := render(t, dir)
			ref := packRef(t, o)
			for _, v := range o.deploy.Spec.Template.Spec.Volumes {
				if v.ConfigMap == nil {
					continue
				}
				cm := o.configMap(v.ConfigMap.Name)
				if cm == nil {
					t.Errorf("volume %s: no ConfigMap %s in the render", v.Name, v.ConfigMap.Name)
					continue
				}
				for name, v := range cm.Data {
					var m struct {
						ID              string
						CodeArtifactRef struct{ Kind, ImageRef, ModulePath, ArtifactVersion string }
					}
					if err := json.Unmarshal([]byte(v), &m); err != nil {
						t.Errorf("%s/%s: %v", cm.Name, name, err)
						continue
					}
					r := m.CodeArtifactRef
					if r.Kind != "oci" || !strings.Contains(r.ImageRef, "@sha256:") || r.ModulePath == "" || r.ArtifactVersion == "" {
						t.Errorf("%s/%s: codeArtifactRef %+v is not a digest-pinned OCI ref", cm.Name, name, r)
					}
				}
			}
			t.Logf("--index=%s", ref)
		})
	}
}

// packRef returns the one --index value, after $(VAR) expansion, and
// fails unless it is an oci:// ref pinned by a sha256 digest.
func packRef(t *testing.T, o objects) string {
	t.Helper()
	var index []string
	for _, a := range mustArgs(t, o) {
		if v, ok := strings.CutPrefix(a, "--index="); ok {
			index = append(index, v)
		}
		if strings.HasPrefix(a, "--tools") || strings.HasPrefix(a, "--index ") || a == "--index" {
			t.Errorf("argument %q: the pack comes from --index=oci://…", a)
		}
	}
	if len(index) != 1 {
		t.Fatalf("--index= given %d times, want once", len(index))
	}
	ref, ok := strings.CutPrefix(index[0], "oci://")
	if !ok || !pinned(ref) {
		t.Errorf("--index=%s is not an oci:// ref pinned by a sha256 digest", index[0])
	}
	return index[0]
}

func pinned(ref string) bool {
	_, digest, ok := strings.Cut(ref, "@sha256:")
	return ok && len(digest) == 64 && strings.Trim(digest, "0123456789abcdef") == ""
}

// overlayKustomization is what checkOverlay reads of an overlay's
// kustomization.yaml: the values it claims to set.
type overlayKustomization struct {
	Namespace string `json:"namespace"`
	Images    []struct {
		Name, NewName, NewTag, Digest string
	} `json:"images"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Behavior string   `json:"behavior"`
		Literals []string `json:"literals"`
	} `json:"configMapGenerator"`
}

// checkOverlay lists what the overlay in dir says it sets but the render
// does not show, compared with the base's render.
func checkOverlay(dir string, b objects) []string {
	var bad []string
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return []string{err.Error()}
	}
	var k overlayKustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return []string{err.Error()}
	}
	o, err := renderDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	c := o.container()

	// The namespace, on every object.
	if k.Namespace == "" {
		bad = append(bad, "the overlay sets no namespace")
	}
	for _, m := range []string{o.deploy.Namespace, o.svc.Namespace, o.hpa.Namespace, o.pdb.Namespace, o.netpol.Namespace} {
		if m != k.Namespace {
			bad = append(bad, fmt.Sprintf("an object is in namespace %q, not %q", m, k.Namespace))
			break
		}
	}

	// The image: each images: entry rewrote the container's image.
	if len(k.Images) == 0 {
		bad = append(bad, "the overlay sets no image")
	}
	for _, im := range k.Images {
		want := im.NewName
		if want == "" {
			want = im.Name
		}
		if im.NewTag != "" {
			want += ":" + im.NewTag
		}
		if im.Digest != "" {
			want += "@" + im.Digest
		}
		if c.Image != want {
			bad = append(bad, fmt.Sprintf("images: %s -> %s: the container's image is %q (the entry's name matches no image of the base, %q)",
				im.Name, want, c.Image, b.container().Image))
		}
	}
	if c.Image == b.container().Image {
		bad = append(bad, fmt.Sprintf("the image is still the base's placeholder %q", c.Image))
	}
	if !strings.Contains(c.Image, "@sha256:") {
		bad = append(bad, fmt.Sprintf("the image %q is not pinned by digest", c.Image))
	}

	// The pack: every generated literal is in the render, under a new name,
	// and the --index the container gets is the overlay's, not the base's.
	for _, g := range k.ConfigMapGenerator {
		var cm *corev1.ConfigMap
		for _, x := range o.cms {
			if strings.HasPrefix(x.Name, g.Name+"-") {
				cm = x
			}
		}
		if cm == nil {
			bad = append(bad, fmt.Sprintf("configMapGenerator %s: no ConfigMap %s-<hash> in the render", g.Name, g.Name))
			continue
		}
		for _, l := range g.Literals {
			key, val, _ := strings.Cut(l, "=")
			if cm.Data[key] != val {
				bad = append(bad, fmt.Sprintf("configMapGenerator %s: %s is %q in the render, want %q", g.Name, key, cm.Data[key], val))
			}
		}
	}
	oa, oerr := o.args()
	ba, berr := b.args()
	if oerr != nil || berr != nil {
		bad = append(bad, fmt.Sprintf("args: %v %v", oerr, berr))
	} else if idx := index(oa); idx == "" || idx == index(ba) {
		bad = append(bad, fmt.Sprintf("the pack is still the base's: --index=%s", idx))
	}

	// The registry credentials: one docker-config Secret, pulled with and
	// mounted as $DOCKER_CONFIG/config.json.
	pod := o.deploy.Spec.Template.Spec
	var docker string
	for _, e := range c.Env {
		if e.Name == "DOCKER_CONFIG" {
			docker = e.Value
		}
	}
	var mounted string
	for _, v := range pod.Volumes {
		if v.Name == nameOfMount(c, docker) && v.Secret != nil {
			mounted = v.Secret.SecretName
		}
	}
	switch {
	case docker == "":
		bad = append(bad, "no DOCKER_CONFIG: sandboxd has no credentials for a private registry")
	case mounted == "":
		bad = append(bad, fmt.Sprintf("DOCKER_CONFIG=%s is not a Secret mount", docker))
	case !slices.ContainsFunc(pod.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == mounted }):
		bad = append(bad, fmt.Sprintf("imagePullSecrets %v do not name the docker-config Secret %s", pod.ImagePullSecrets, mounted))
	}
	return bad
}

func index(args []string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--index="); ok {
			return v
		}
	}
	return ""
}

// The example overlay sets the namespace, the image, the pack and the
// registry credentials, each visible in the render; its render is logged
// (go test -v -run TestOverlayTakesEffect) as kubectl kustomize prints it.
func TestOverlayTakesEffect(t *testing.T) {
	b := render(t, base)
	for _, p := range checkOverlay(overlay, b) {
		t.Error(p)
	}
	t.Logf("kustomize build %s:\n%s", overlay, render(t, overlay).yaml)
}

// An overlay that silently does nothing fails checkOverlay: the images:
// entry names the image as it was before the placeholder moved into
// deployment.yaml, the ConfigMap is merged under another name, and the
// credentials patch is left out.
func TestOverlayThatDoesNothingFails(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, base, filepath.Join(dir, "base"))
	ov := filepath.Join(dir, "overlays", "broken")
	if err := os.MkdirAll(ov, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(k string) {
		if err := os.WriteFile(filepath.Join(ov, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: sandboxd
resources: [../../base]
images:
  - name: sandboxd
    newName: ghcr.io/acme/sandboxd
    digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
configMapGenerator:
  - name: sandboxd-packs
    literals: ["index=oci://ghcr.io/acme/pack@sha256:2222222222222222222222222222222222222222222222222222222222222222"]
`)
	b := render(t, base)
	got := strings.Join(checkOverlay(ov, b), "\n")
	for _, want := range []string{
		"images: sandboxd -> ghcr.io/acme/sandboxd@sha256:1111",
		"the image is still the base's placeholder",
		"the pack is still the base's",
		"no DOCKER_CONFIG",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("checkOverlay missed %q; it said:\n%s", want, got)
		}
	}

	// The example overlay, copied, passes; without its behavior: replace
	// kustomize refuses the second sandboxd-pack.
	ex := filepath.Join(dir, "overlays", "example")
	copyDir(t, overlay, ex)
	if p := checkOverlay(ex, b); len(p) > 0 {
		t.Errorf("the copied example overlay: %v", p)
	}
	k, err := os.ReadFile(filepath.Join(ex, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ex, "kustomization.yaml"), []byte(strings.Replace(string(k), "behavior: replace", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := renderDir(ex); err == nil {
		t.Error("two sandboxd-pack ConfigMaps rendered without an error")
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(from, "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Every flag the Deployment passes is one sandboxd serve has (its help,
// from the main module's source).
func TestServeFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds sandboxd")
	}
	cmd := exec.Command("go", "run", "./cmd/sandboxd", "help", "serve")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	help, err := cmd.Output()
	if err != nil {
		t.Fatalf("sandboxd help serve: %v", err)
	}
	for _, dir := range dirs {
		args := mustArgs(t, render(t, dir))
		if len(args) == 0 || args[0] != "serve" {
			t.Fatalf("%s: args %v do not start with serve", dir, args)
		}
		for _, a := range args[1:] {
			flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.Contains(string(help), "\n  -"+flag+" ") && !strings.Contains(string(help), "\n  -"+flag+"\n") {
				t.Errorf("%s: sandboxd serve has no flag --%s", dir, flag)
			}
		}
	}
}
