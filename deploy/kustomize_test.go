package deploy

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// render is kubectl kustomize of dir, as the docs have users render it.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not in PATH: make manifests needs it (kubectl kustomize renders the manifests)")
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, msg)
	}
	return out
}

// TestKustomizeRenders: the base renders with the pinned image in every
// container, and no object names a namespace (the user's is theirs).
func TestKustomizeRenders(t *testing.T) {
	var k struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	b := render(t, "kubernetes")
	objs := decode(t, "kubectl kustomize kubernetes", b)
	kb, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(kb, &k); err != nil || len(k.Images) != 1 {
		t.Fatalf("kustomization images: %v %+v", err, k.Images)
	}
	want := k.Images[0].Name + ":" + k.Images[0].NewTag
	pods := 0
	for _, o := range objs {
		if spec := podSpec(o.obj); spec != nil {
			pods++
			for _, c := range spec.Containers {
				if c.Image != want {
					t.Errorf("%s: image %q, want the pinned %q", objectName(o.obj), c.Image, want)
				}
			}
		}
	}
	if pods < 2 || len(objs) < len(load(t)) {
		t.Errorf("rendered %d objects (%d pod templates); the files hold %d", len(objs), pods, len(load(t)))
	}
	if strings.Contains(string(b), "namespace:") {
		t.Error("the rendered base names a namespace: leave it to kubectl -n or an overlay")
	}
}

// TestKustomizeComponents: the example overlay, with both optional
// components, renders into objects the API's types take strictly: the
// matrix Job's pods repel each other per node within one run, and the
// PodMonitor scrapes the proxy's metrics port.
func TestKustomizeComponents(t *testing.T) {
	objs := decode(t, "kubectl kustomize overlays/example", render(t, "overlays/example"))
	var job *batchv1.Job
	var dep *appsv1.Deployment
	var pm *monitoringv1.PodMonitor
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *batchv1.Job:
			job = v
		case *appsv1.Deployment:
			dep = v
		case *monitoringv1.PodMonitor:
			pm = v
		}
	}
	if job == nil || dep == nil || pm == nil {
		t.Fatalf("job %v, deployment %v, podmonitor %v", job != nil, dep != nil, pm != nil)
	}
	if job.Namespace != "tokentap" || pm.Namespace != "tokentap" {
		t.Errorf("the overlay's namespace did not reach the objects: %q, %q", job.Namespace, pm.Namespace)
	}
	aff := job.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("affinity %+v: want one required anti-affinity term", aff)
	}
	term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != corev1.LabelHostname {
		t.Errorf("topologyKey %q, want %s: one shard per node", term.TopologyKey, corev1.LabelHostname)
	}
	labels := job.Spec.Template.Labels
	for k, v := range term.LabelSelector.MatchLabels {
		if labels[k] != v {
			t.Errorf("anti-affinity selector %s=%s does not match the shards' pods", k, v)
		}
	}
	if !slices.Contains(term.MatchLabelKeys, "batch.kubernetes.io/controller-uid") {
		t.Errorf("matchLabelKeys %v: without the Job's uid, two runs at once repel each other", term.MatchLabelKeys)
	}

	for k, v := range pm.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selector %s=%s does not match the proxy's pods", k, v)
		}
	}
	names := map[string]bool{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		names[p.Name] = true
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d PodMonitor endpoints", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || !names[*ep.Port] || ep.Path != dep.Spec.Template.Annotations["prometheus.io/path"] {
		t.Errorf("PodMonitor scrapes port %v path %q; the proxy serves /metrics on its metrics port (%v)", ep.Port, ep.Path, names)
	}
}

func podSpec(obj any) *corev1.PodSpec {
	switch v := obj.(type) {
	case *batchv1.Job:
		return &v.Spec.Template.Spec
	case *appsv1.Deployment:
		return &v.Spec.Template.Spec
	}
	return nil
}
