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
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
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
		if filepath.Base(f) == "kustomization.yaml" {
			continue // not an API object; TestImagePinnedOnce reads it
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decode(t, filepath.Base(f), b)...)
	}
	return out
}

// decode decodes every document of one file (or rendering) strictly into
// its Kubernetes API type, each object named by f.
func decode(t *testing.T, f string, b []byte) []object {
	t.Helper()
	var out []object
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
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "monitoring.coreos.com/v1 PodMonitor":
			obj = &monitoringv1.PodMonitor{}
		default:
			t.Fatalf("%s document %d: %s %s: this test does not know the kind; add it", f, i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", f, i, meta.Kind, err)
		}
		out = append(out, object{file: f, kind: meta.Kind, obj: obj})
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
	case *policyv1.PodDisruptionBudget:
		return o.Name
	case *monitoringv1.PodMonitor:
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
	job := find[batchv1.Job](t, objs, "matrix-job.yaml", "tokentap-matrix-${RUN}")
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
	if at, ok := flag(c.Args, "--start-at"); ok {
		t.Errorf("--start-at %q: a pod that starts after it fails the Job; want --rendezvous", at)
	}
	checkRendezvous(t, objs, job)
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
	// A Failed cell is a result: the shard exits 0 and the Job completes.
	if !slices.Contains(c.Args, "--allow-failed") {
		t.Error("no --allow-failed: one Failed cell fails the Job, and the merge never runs")
	}
	// Results: one file per index and per run (the Job's name, from the
	// downward API), and the result on stdout, the pod's log, which is how
	// it leaves the pod: no volume shared between pods.
	jn := envVar(c, "JOB_NAME")
	if jn == nil || jn.ValueFrom == nil || jn.ValueFrom.FieldRef == nil ||
		jn.ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/job-name']" {
		t.Errorf("JOB_NAME %+v: want it from the pod's job-name label", jn)
	}
	for _, f := range []string{"--out", "--records"} {
		v, ok := flag(c.Args, f)
		if !ok || !strings.Contains(v, "$(JOB_COMPLETION_INDEX)") || !strings.Contains(v, "$(JOB_NAME)") {
			t.Errorf("%s %q: want a file per run and index", f, v)
		}
	}
	if v, _ := flag(c.Args, "--format"); v != "json" || !slices.Contains(c.Args, "--quiet") {
		t.Errorf("--format %q: want the result alone on stdout (--format=json --quiet): the log is how it leaves", v)
	}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil || v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir: a claim shared by pods on several nodes needs ReadWriteMany, which few clusters have", v.Name)
		}
	}
	if !strings.Contains(job.Name, "${RUN}") || job.Labels["app.kubernetes.io/instance"] != job.Name {
		t.Errorf("Job %q, instance label %q: want a Job per run, named and labelled by ${RUN}", job.Name, job.Labels["app.kubernetes.io/instance"])
	}
}

// checkRendezvous: the shards reach shard 0 by its stable DNS name,
// <job>-0.<subdomain>, which the pods' subdomain and a headless Service of
// that name selecting them give; on the port shard 0 serves.
func checkRendezvous(t *testing.T, objs []object, job *batchv1.Job) {
	t.Helper()
	pod := job.Spec.Template
	c := pod.Spec.Containers[0]
	rv, ok := flag(c.Args, "--rendezvous")
	if !ok {
		t.Error("no --rendezvous: the shards' start is the wall clock's, and a pod that starts late fails the Job")
		return
	}
	host, port, ok := strings.Cut(rv, ":")
	sub := pod.Spec.Subdomain
	if !ok || sub == "" || host != "$(JOB_NAME)-0."+sub {
		t.Errorf("--rendezvous %q, subdomain %q: want $(JOB_NAME)-0.<subdomain>:PORT, index 0's stable name", rv, sub)
	}
	served := false
	for _, p := range c.Ports {
		served = served || strconv.Itoa(int(p.ContainerPort)) == port
	}
	if !served {
		t.Errorf("--rendezvous port %s is not among the container's ports %+v", port, c.Ports)
	}
	svc := find[corev1.Service](t, objs, "matrix-job.yaml", sub)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q; want None (headless: the pods' own DNS names)", sub, svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses false; shard 0's name must resolve as soon as it runs", sub)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("Service %s: selector %s=%s does not match the shards' pods", sub, k, v)
		}
	}
	pol := find[networkingv1.NetworkPolicy](t, objs, "matrix-job.yaml", "tokentap-matrix")
	for k, v := range pol.Spec.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("NetworkPolicy: selector %s=%s does not match the shards' pods", k, v)
		}
	}
	open := false
	for _, rule := range pol.Spec.Ingress {
		for _, p := range rule.Ports {
			open = open || (p.Port != nil && strconv.Itoa(int(p.Port.IntVal)) == port && len(rule.From) > 0)
		}
	}
	if !open {
		t.Errorf("NetworkPolicy tokentap-matrix does not let the shards reach port %s", port)
	}
}

// TestMatrixDeadline: the Job ends by a deadline that covers its
// schedule (docs/METHOD.md §10: start + gap + cells × (window + gap)),
// with the rendezvous's timeout and margin before the start and the
// prefill rows beside.
func TestMatrixDeadline(t *testing.T) {
	job := find[batchv1.Job](t, load(t), "matrix-job.yaml", "tokentap-matrix-${RUN}")
	c := job.Spec.Template.Spec.Containers[0]
	wait := 10 * time.Minute // the default --rendezvous-timeout
	if v, ok := flag(c.Args, "--rendezvous-timeout"); ok {
		var err error
		if wait, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	wait += 10 * time.Second // the default margin
	get := func(name string) string {
		e := envVar(c, name)
		if e == nil {
			t.Fatalf("no %s: the deadline cannot be checked against the schedule", name)
		}
		return e.Value
	}
	cells := len(strings.Split(get("TOKENTAP_CONTEXTS"), ",")) * len(strings.Split(get("TOKENTAP_CONCURRENCY"), ","))
	window, err1 := time.ParseDuration(get("TOKENTAP_WINDOW"))
	gap, err2 := time.ParseDuration(get("TOKENTAP_GAP"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	schedule := wait + gap + time.Duration(cells)*(window+gap)
	d := job.Spec.ActiveDeadlineSeconds
	if d == nil || time.Duration(*d)*time.Second < schedule*5/4 {
		t.Errorf("activeDeadlineSeconds %v: the schedule takes %v; want at least a quarter more", d, schedule)
	}
}

// TestRestrictedPods: every pod template passes Pod Security "restricted"
// (and more: a read-only root, no service-account token), and runs a
// pinned image.
func TestRestrictedPods(t *testing.T) {
	n := 0
	for _, o := range load(t) {
		var pod *corev1.PodSpec
		switch v := o.obj.(type) {
		case *batchv1.Job:
			pod = &v.Spec.Template.Spec
		case *appsv1.Deployment:
			pod = &v.Spec.Template.Spec
		default:
			continue
		}
		n++
		name := o.file + " " + objectName(o.obj)
		checkRestricted(t, name, pod)
	}
	if n < 2 {
		t.Errorf("%d pod templates", n)
	}
}

func checkRestricted(t *testing.T, name string, pod *corev1.PodSpec) {
	t.Helper()
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the service-account token is mounted; tokentap never calls the API server", name)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: want seccompProfile RuntimeDefault", name)
	}
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: want runAsNonRoot", name)
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		cn := name + " " + c.Name
		if sc == nil {
			t.Errorf("%s: no securityContext", cn)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: want allowPrivilegeEscalation false", cn)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: want capabilities drop ALL, add none", cn)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: want readOnlyRootFilesystem", cn)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", cn)
		}
		repo, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
		if strings.Contains(c.Image, "@") {
			ok, tag = true, "digest"
		}
		if !ok || tag == "" || tag == "latest" || repo == "" {
			t.Errorf("%s: image %q: pin a version (kustomization.yaml images:)", cn, c.Image)
		}
	}
}

// TestImagePinnedOnce: kustomization.yaml pins the one image every
// manifest names, at the tag the manifests carry.
func TestImagePinnedOnce(t *testing.T) {
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
			Digest string `json:"digest"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || (k.Images[0].NewTag == "" && k.Images[0].Digest == "") {
		t.Fatalf("images %+v: want one entry with a tag or digest", k.Images)
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" && !slices.Contains(k.Resources, filepath.Base(f)) {
			t.Errorf("%s is not among the kustomization's resources", f)
		}
	}
	for _, o := range load(t) {
		var cs []corev1.Container
		switch v := o.obj.(type) {
		case *batchv1.Job:
			cs = v.Spec.Template.Spec.Containers
		case *appsv1.Deployment:
			cs = v.Spec.Template.Spec.Containers
		}
		for _, c := range cs {
			if want := k.Images[0].Name + ":" + k.Images[0].NewTag; c.Image != want {
				t.Errorf("%s: image %q, the kustomization pins %q", o.file, c.Image, want)
			}
		}
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
	// The admin port is reachable only from Prometheus pods, named by
	// label, in no namespace named here.
	for _, rule := range pol.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.IntVal != ports["metrics"] {
				continue
			}
			if len(rule.From) == 0 {
				t.Error("the NetworkPolicy opens the admin port to every pod")
			}
			for _, peer := range rule.From {
				if peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 {
					t.Errorf("the NetworkPolicy opens the admin port to every pod of %+v", peer.NamespaceSelector)
				}
				if ns := peer.NamespaceSelector; ns != nil && ns.MatchLabels["kubernetes.io/metadata.name"] != "" {
					t.Errorf("the NetworkPolicy names the namespace %q: a cluster's monitoring namespace is its own", ns.MatchLabels["kubernetes.io/metadata.name"])
				}
			}
		}
	}
	for k, v := range pol.Spec.PodSelector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the NetworkPolicy's selector %s=%s does not match the proxy's pods", k, v)
		}
	}
	// Rollouts drain: a preStop pause while endpoints still route here,
	// then --shutdown-timeout, then the cut and the records' flush, all
	// within the grace period; and a disruption budget.
	pre := c.Lifecycle
	if pre == nil || pre.PreStop == nil || pre.PreStop.Sleep == nil || pre.PreStop.Sleep.Seconds < 3 {
		t.Fatalf("preStop %+v: want a sleep of a few seconds before the proxy stops accepting", pre)
	}
	st := 25 * time.Second
	if v, ok := flag(c.Args, "--shutdown-timeout"); ok {
		var err error
		if st, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	need := time.Duration(pre.PreStop.Sleep.Seconds)*time.Second + st + 10*time.Second
	g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil || time.Duration(*g)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %v: preStop + --shutdown-timeout + 10 s for the cut is %v", g, need)
	}
	pdb := find[policyv1.PodDisruptionBudget](t, objs, "proxy.yaml", "tokentap-proxy")
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the PodDisruptionBudget's selector %s=%s does not match the proxy's pods", k, v)
		}
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget sets no bound")
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
	if len(seen) < 5 {
		t.Errorf("decoded %d objects: %v", len(seen), seen)
	}
}
