// Package validate checks the Kubernetes manifests in ../base: every file
// decodes strictly (unknown or repeated fields fail) into the k8s.io/api
// type of its kind, and the pieces agree with each other and with sandboxd
// (selectors, ports, probes on /readyz and /healthz, the grace period
// covering preStop plus the drain, the locked-down securityContext, the
// token from a Secret, caches on an emptyDir, serve flags sandboxd has).
// It is its own module so sandboxd gains no Kubernetes dependency.
package validate

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const base = "../base"

// kustomization is the subset of kustomize's Kustomization the base uses;
// decoded strictly, so a field this test does not know fails.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels"`
	Images []struct {
		Name, NewName, NewTag string
	} `json:"images"`
}

type objects struct {
	deploy *appsv1.Deployment
	svc    *corev1.Service
	hpa    *autoscalingv2.HorizontalPodAutoscaler
	pdb    *policyv1.PodDisruptionBudget
	netpol *networkingv1.NetworkPolicy
	cms    []*corev1.ConfigMap
}

func load(t *testing.T) (*kustomization, objects) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.Kind != "Kustomization" || k.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		t.Fatalf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(base, "*.yaml"))
	for _, f := range files {
		if n := filepath.Base(f); n != "kustomization.yaml" && !slices.Contains(k.Resources, n) {
			t.Errorf("%s is not in kustomization.yaml's resources", n)
		}
	}
	var o objects
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(base, r))
		if err != nil {
			t.Fatalf("resource %s: %v", r, err)
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict(b, v); err != nil {
				t.Fatalf("%s does not decode strictly as %s %s: %v", r, meta.APIVersion, meta.Kind, err)
			}
		}
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			o.deploy = &appsv1.Deployment{}
			strict(o.deploy)
		case "v1 Service":
			o.svc = &corev1.Service{}
			strict(o.svc)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			strict(o.hpa)
		case "policy/v1 PodDisruptionBudget":
			o.pdb = &policyv1.PodDisruptionBudget{}
			strict(o.pdb)
		case "networking.k8s.io/v1 NetworkPolicy":
			o.netpol = &networkingv1.NetworkPolicy{}
			strict(o.netpol)
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			strict(cm)
			o.cms = append(o.cms, cm)
		default:
			t.Fatalf("%s: unexpected %s %s", r, meta.APIVersion, meta.Kind)
		}
	}
	if o.deploy == nil || o.svc == nil || o.hpa == nil || o.pdb == nil || o.netpol == nil {
		t.Fatalf("the base lacks a Deployment, Service, HPA, PDB or NetworkPolicy: %+v", o)
	}
	return &k, o
}

func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func TestManifestsDecodeStrictly(t *testing.T) {
	load(t)
}

func TestManifestsAgree(t *testing.T) {
	_, o := load(t)
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
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || o.svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("ports: container %v, service %v", c.Ports, o.svc.Spec.Ports)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
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
	for _, a := range c.Args {
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
	t.Logf("preStop %s + drain %s, grace %s", preStop, drain, grace)

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
	for _, a := range c.Args {
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
	// A --tools directory must be a mounted ConfigMap of the base.
	for _, a := range c.Args {
		if dir, ok := strings.CutPrefix(a, "--tools="); ok {
			v := vols[nameOfMount(c, dir)]
			if v.ConfigMap == nil || !slices.ContainsFunc(o.cms, func(cm *corev1.ConfigMap) bool { return cm.Name == v.ConfigMap.Name }) {
				t.Errorf("--tools=%s is not a ConfigMap of the base", dir)
			}
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

// The pack comes from the registry: exactly one --index, an oci:// ref
// pinned by digest (a tag would let replicas of one Deployment serve
// different packs), and no --tools. A ConfigMap pack, if an overlay adds one,
// must hold tool manifests with digest-pinned OCI refs.
func TestPackFromRegistry(t *testing.T) {
	_, o := load(t)
	args := o.deploy.Spec.Template.Spec.Containers[0].Args
	var index []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--index="); ok {
			index = append(index, v)
		}
		if strings.HasPrefix(a, "--tools") || strings.HasPrefix(a, "--index ") || a == "--index" {
			t.Errorf("argument %q: the base takes its pack from --index=oci://…", a)
		}
	}
	if len(index) != 1 {
		t.Fatalf("--index= given %d times in %v, want once", len(index), args)
	}
	ref, ok := strings.CutPrefix(index[0], "oci://")
	_, digest, pinned := strings.Cut(ref, "@sha256:")
	if !ok || !pinned || len(digest) != 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		t.Errorf("--index=%s is not an oci:// ref pinned by a sha256 digest", index[0])
	}
	for _, cm := range o.cms {
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
}

// Every flag the Deployment passes is one sandboxd serve has (its help,
// from the main module's source).
func TestServeFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds sandboxd")
	}
	_, o := load(t)
	cmd := exec.Command("go", "run", "./cmd/sandboxd", "help", "serve")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	help, err := cmd.Output()
	if err != nil {
		t.Fatalf("sandboxd help serve: %v", err)
	}
	args := o.deploy.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %v do not start with serve", args)
	}
	for _, a := range args[1:] {
		flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.Contains(string(help), "\n  -"+flag+" ") && !strings.Contains(string(help), "\n  -"+flag+"\n") {
			t.Errorf("sandboxd serve has no flag --%s", flag)
		}
	}
}
