package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// object is one decoded manifest document.
type object struct {
	file string
	kind string
	obj  any
}

// load decodes every document of every manifest under kubernetes/ into its
// Kubernetes API type, strictly: an unknown or misspelt field, a value of
// the wrong type or a duplicate key fails, as the API server would refuse
// it. No cluster needed.
func load(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under kubernetes/: %v", err)
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "batch/v1 Job":
				obj = &batchv1.Job{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "v1 PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			case "networking.k8s.io/v1 NetworkPolicy":
				obj = &networkingv1.NetworkPolicy{}
			default:
				t.Fatalf("%s document %d: %s %s: this test does not know the kind; add it", f, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i, meta.Kind, err)
			}
			out = append(out, object{file: filepath.Base(f), kind: meta.Kind, obj: obj})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestStrictDecodingRefuses: the decoding above is strict, or the test
// would pass manifests the API server refuses.
func TestStrictDecodingRefuses(t *testing.T) {
	for _, bad := range []string{
		"apiVersion: batch/v1\nkind: Job\nspec:\n  completionMod: Indexed\n",
		"apiVersion: batch/v1\nkind: Job\nspec:\n  completions: three\n",
		"apiVersion: batch/v1\nkind: Job\nspec:\n  completions: 3\n  completions: 4\n",
	} {
		if err := yaml.UnmarshalStrict([]byte(bad), &batchv1.Job{}); err == nil {
			t.Errorf("strict decoding accepted %q", bad)
		}
	}
}

func find[T any](t *testing.T, objs []object, file, name string) *T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok && o.file == file && objectName(v) == name {
			return v
		}
	}
	var zero T
	t.Fatalf("%s: no %T named %q", file, zero, name)
	return nil
}

func objectName(v any) string {
	switch o := v.(type) {
	case *batchv1.Job:
		return o.Name
	case *appsv1.Deployment:
		return o.Name
	case *corev1.Service:
		return o.Name
	case *corev1.PersistentVolumeClaim:
		return o.Name
	case *networkingv1.NetworkPolicy:
		return o.Name
	}
	return ""
}

// flag returns the value of --name=value (or --name value) in args.
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestMatrixJob checks the sharded matrix's wiring: an Indexed Job whose
// pods all run, each taking its shard from its completion index, with one
// shard count everywhere, one start time, and result files per index on a
// volume every pod mounts.
func TestMatrixJob(t *testing.T) {
	objs := load(t)
	job := find[batchv1.Job](t, objs, "matrix-job.yaml", "tokentap-matrix")
	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode %v, want Indexed: the pods take their shard from their index", s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism || *s.Completions < 1 {
		t.Fatalf("completions %v, parallelism %v: every shard must run at once", s.Completions, s.Parallelism)
	}
	n := int(*s.Completions)
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v: a shard started again misses its windows; want 0", s.BackoffLimit)
	}
	pod := s.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "matrix" {
		t.Fatalf("args %q: want tokentap matrix", c.Args)
	}
	if shards, ok := flag(c.Args, "--shards"); !ok || shards != strconv.Itoa(n) {
		t.Errorf("--shards %q, completions %d: they must agree", shards, n)
	}
	if _, ok := flag(c.Args, "--shard"); ok {
		t.Error("--shard in an Indexed Job: every pod would run the same shard; use --shards")
	}
	if at, ok := flag(c.Args, "--start-at"); !ok || at != "${START_AT}" {
		t.Errorf("--start-at %q: want the ${START_AT} the README's one-liner fills in", at)
	}
	idx := envVar(c, "JOB_COMPLETION_INDEX")
	if idx == nil || idx.ValueFrom == nil || idx.ValueFrom.FieldRef == nil ||
		idx.ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("JOB_COMPLETION_INDEX %+v: want it from the pod's completion-index annotation", idx)
	}
	if envVar(c, "TOKENTAP_TARGET") == nil {
		t.Error("no TOKENTAP_TARGET: the shards need an engine")
	}
	if k := envVar(c, "TOKENTAP_API_KEY"); k != nil && (k.Value != "" || k.ValueFrom == nil || k.ValueFrom.SecretKeyRef == nil) {
		t.Error("TOKENTAP_API_KEY must come from a Secret, never the manifest")
	}
	// Results: one file per index, on a volume every pod mounts.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var claim string
	for _, v := range pod.Volumes {
		if _, ok := mounts[v.Name]; ok && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	pvc := find[corev1.PersistentVolumeClaim](t, objs, "matrix-job.yaml", claim)
	if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("claim %s access modes %v: pods on several nodes write to it; want ReadWriteMany", claim, pvc.Spec.AccessModes)
	}
	for _, f := range []string{"--out", "--records"} {
		v, ok := flag(c.Args, f)
		if !ok || !strings.Contains(v, "$(JOB_COMPLETION_INDEX)") || !strings.HasPrefix(v, mounts["results"]+"/") {
			t.Errorf("%s %q: want a file per index under the results volume (%s)", f, v, mounts["results"])
		}
	}

	// The merge reads every shard's files from the same claim.
	merge := find[batchv1.Job](t, objs, "merge-job.yaml", "tokentap-merge")
	mc := merge.Spec.Template.Spec.Containers[0]
	if mc.Args[0] != "merge" {
		t.Fatalf("merge args %q", mc.Args)
	}
	var wantFiles []string
	for _, ext := range []string{".json", ".jsonl"} {
		for i := range n {
			out, _ := flag(c.Args, map[string]string{".json": "--out", ".jsonl": "--records"}[ext])
			wantFiles = append(wantFiles, strings.ReplaceAll(out, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(i)))
		}
	}
	var files []string
	for _, a := range mc.Args[1:] {
		if !strings.HasPrefix(a, "-") {
			files = append(files, a)
		}
	}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("merge reads %q; the %d shards write %q", files, n, wantFiles)
	}
	if o, _ := flag(mc.Args, "-o"); o != "-" || !slices.Contains(mc.Args, "--quiet") {
		t.Errorf("merge args %q: want the merged run alone on stdout (-o=- --quiet) for kubectl logs", mc.Args)
	}
	var mclaim string
	for _, v := range merge.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mclaim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if mclaim != claim {
		t.Errorf("merge mounts claim %q, the shards write to %q", mclaim, claim)
	}
}

// TestProxyDeployment: the Service reaches the Deployment's pods on ports
// they serve, and the admin port is not open to all.
func TestProxyDeployment(t *testing.T) {
	objs := load(t)
	dep := find[appsv1.Deployment](t, objs, "proxy.yaml", "tokentap-proxy")
	svc := find[corev1.Service](t, objs, "proxy.yaml", "tokentap-proxy")
	pol := find[networkingv1.NetworkPolicy](t, objs, "proxy.yaml", "tokentap-proxy-admin")
	labels := dep.Spec.Template.Labels
	for k, v := range dep.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not match its pods", k, v)
		}
	}
	for k, v := range svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("the Service's selector %s=%s does not match the proxy's pods", k, v)
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.Type != intstr.String || ports[p.TargetPort.StrVal] == 0 {
			t.Errorf("Service port %s targets %v, which the container does not name", p.Name, p.TargetPort)
		}
	}
	if c.Args[0] != "proxy" {
		t.Fatalf("args %q", c.Args)
	}
	for flagName, port := range map[string]string{"--listen": "http", "--admin": "metrics"} {
		v, _ := flag(c.Args, flagName)
		if !strings.HasSuffix(v, ":"+strconv.Itoa(int(ports[port]))) {
			t.Errorf("%s %q does not listen on the %s port %d", flagName, v, port, ports[port])
		}
	}
	if a := dep.Spec.Template.Annotations; a["prometheus.io/port"] != strconv.Itoa(int(ports["metrics"])) {
		t.Errorf("scrape port %q, metrics on %d", a["prometheus.io/port"], ports["metrics"])
	}
	// The admin port is reachable only from the monitoring namespace.
	for _, rule := range pol.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.IntVal == ports["metrics"] && len(rule.From) == 0 {
				t.Error("the NetworkPolicy opens the admin port to every pod")
			}
		}
	}
	for k, v := range pol.Spec.PodSelector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the NetworkPolicy's selector %s=%s does not match the proxy's pods", k, v)
		}
	}
}

// TestEveryManifestIsKnown: every document decoded, none twice.
func TestEveryManifestIsKnown(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range load(t) {
		key := fmt.Sprintf("%s/%s", o.kind, objectName(o.obj))
		if seen[key] {
			t.Errorf("%s: %s twice", o.file, key)
		}
		seen[key] = true
	}
	if len(seen) < 6 {
		t.Errorf("decoded %d objects: %v", len(seen), seen)
	}
}
