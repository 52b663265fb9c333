package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestSimulateIndexedJob runs the matrix Job as the Job controller would,
// without a cluster: each pod is a local process running the container's
// own arguments, with the environment the controller and the downward API
// give (the index, the Job's name), its volume a directory, its log its
// stdout and stderr together (as kubectl logs shows them). The engine is
// tokentap's fake; the windows are short. Two runs go back to back into
// the same storage: the second has a Failed cell and a shard that starts
// late. Each must complete (every pod exits 0) and the documented merge of
// the pods' logs must give one correct run, equal to the merge of the
// files the shards wrote. The shards start by rendezvous: the Job's own
// coordinator name, mapped to loopback (--rendezvous-resolve, as DNS would
// map it to shard 0's pod), and the late shard starts after the start a
// wall clock would have given, so only the rendezvous keeps it in.
func TestSimulateIndexedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tokentap and runs two short matrices")
	}
	bin := tokentapBinary(t)
	job := find[batchv1.Job](t, load(t), "matrix-job.yaml", "tokentap-matrix-${RUN}")
	storage := t.TempDir() // the results volume, kept across both runs

	ok := fakeEngine(t, bin)
	// Prompts of 1k tokens and more fail: the 1k row's cells are Failed.
	failing := fakeEngine(t, bin, "--fault", "status=500,min-prompt=500")

	first := simulateRun(t, bin, job, storage, "run1", ok, 0)
	if first.failed != 0 {
		t.Errorf("run1: %d Failed cells against a sound engine", first.failed)
	}
	second := simulateRun(t, bin, job, storage, "run2", failing, 6*time.Second)
	if second.failed == 0 {
		t.Error("run2: no Failed cell against an engine failing the 1k row")
	}
	if second.valid == 0 {
		t.Error("run2: no Valid cell: the failing row took the others with it")
	}
	if first.runID == second.runID {
		t.Errorf("two runs share the run id %s", first.runID)
	}
}

type simulated struct {
	runID         string
	failed, valid int
}

// simulateRun runs job's pods for one run (RUN=run) with the engine at
// target, the last index late by late, and merges their logs.
func simulateRun(t *testing.T, bin string, job *batchv1.Job, storage, run, target string, late time.Duration) simulated {
	t.Helper()
	n := int(*job.Spec.Completions)
	c := job.Spec.Template.Spec.Containers[0]
	mount := c.VolumeMounts[0]
	jobName := strings.ReplaceAll(job.Name, "${RUN}", run)
	logs := t.TempDir()
	// Where the coordinator's name points: DNS would give shard 0's pod.
	resolve := freeLoopback(t)
	// A broken rendezvous would hold the pods for its timeout: bound it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var lateLaunch time.Time

	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		env := podEnv(t, c, map[string]string{
			"metadata.annotations['batch.kubernetes.io/job-completion-index']": strconv.Itoa(i),
			"metadata.labels['batch.kubernetes.io/job-name']":                  jobName,
		})
		// The run's own settings, as a user sets them in the manifest:
		// the engine, and a small, fast matrix.
		env["TOKENTAP_TARGET"] = target
		env["TOKENTAP_CONTEXTS"] = "0,1k"
		env["TOKENTAP_CONCURRENCY"] = "2"
		env["TOKENTAP_WINDOW"] = "1s"
		env["TOKENTAP_GAP"] = "1s"
		env["TOKENTAP_PREFILL"] = "none"
		env["TOKENTAP_MAX_OUTPUT"] = "32"
		env["TOKENTAP_RENDEZVOUS_MARGIN"] = "3s"
		// What a cluster's DNS does, here: the coordinator's name is
		// shard 0's address, on loopback.
		env["TOKENTAP_RENDEZVOUS_RESOLVE"] = resolve
		args := expand(t, c.Args, env)
		for j, a := range args {
			// The volume's mount path is this directory.
			args[j] = strings.ReplaceAll(a, "="+mount.MountPath+"/", "="+storage+"/")
		}
		logf, err := os.Create(filepath.Join(logs, fmt.Sprintf("shard-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = envList(env)
		cmd.Stdout, cmd.Stderr = logf, logf // one log, as kubectl logs shows it
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer logf.Close()
			if i == n-1 && late > 0 {
				time.Sleep(late) // a slow image pull or scheduling
				lateLaunch = time.Now()
			}
			if err := cmd.Run(); err != nil {
				codes[i] = -1
				if ee, ok := err.(*exec.ExitError); ok {
					codes[i] = ee.ExitCode()
				}
			}
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if code != 0 {
			b, _ := os.ReadFile(filepath.Join(logs, fmt.Sprintf("shard-%d.log", i)))
			t.Fatalf("%s: pod %d exited %d: the Job fails\n%s", run, i, code, tail(b))
		}
	}

	// The documented merge: the pods' logs.
	var logFiles, resFiles []string
	for i := range n {
		logFiles = append(logFiles, filepath.Join(logs, fmt.Sprintf("shard-%d.log", i)))
		resFiles = append(resFiles, filepath.Join(storage, fmt.Sprintf("%s-shard-%d.json", jobName, i)))
	}
	fromLogs := mustRun(t, bin, append([]string{"merge", "--quiet"}, logFiles...)...)
	fromFiles := mustRun(t, bin, append([]string{"merge", "--quiet"}, resFiles...)...)
	if !bytes.Equal(fromLogs, fromFiles) {
		t.Errorf("%s: the merge of the pods' logs differs from the merge of their files", run)
	}
	var merged struct {
		Sharding struct {
			Run     string    `json:"run"`
			Count   int       `json:"count"`
			StartAt time.Time `json:"start_at"`
		} `json:"sharding"`
		Decode []struct {
			Context   int    `json:"context"`
			Status    string `json:"status"`
			Completed int    `json:"completed"`
		} `json:"decode"`
	}
	if err := json.Unmarshal(fromLogs, &merged); err != nil {
		t.Fatalf("%s: merged run: %v", run, err)
	}
	if merged.Sharding.Count != n || len(merged.Decode) != 2 {
		t.Fatalf("%s: merged %d shards into %d cells, want %d and 2", run, merged.Sharding.Count, len(merged.Decode), n)
	}
	if late > 0 && !merged.Sharding.StartAt.After(lateLaunch) {
		t.Errorf("%s: the common start %v is before the late shard was launched (%v): the rendezvous did not wait for it",
			run, merged.Sharding.StartAt, lateLaunch)
	}
	s := simulated{runID: merged.Sharding.Run}
	for _, cell := range merged.Decode {
		switch cell.Status {
		case "failed":
			s.failed++
		case "valid":
			s.valid++
			if cell.Completed == 0 {
				t.Errorf("%s: a Valid cell completed no request", run)
			}
		default:
			t.Errorf("%s: cell at context %d is %s", run, cell.Context, cell.Status)
		}
	}
	return s
}

// podEnv is the container's environment as the kubelet gives it: values
// as written, downward-API fields from the pod's metadata (fields, the
// ones the Job controller sets), an optional Secret absent.
func podEnv(t *testing.T, c corev1.Container, fields map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("%s from %s: the Job controller sets no such field", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional:
		default:
			t.Fatalf("%s: a value this simulation cannot give", e.Name)
		}
	}
	return env
}

// expand does what the kubelet does to args: $(VAR) replaced by the
// container's variable. The manifest's ${RUN} is in the Job's name only.
func expand(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	ref := regexp.MustCompile(`\$\((\w+)\)`)
	var out []string
	for _, a := range args {
		a = ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				t.Fatalf("arg %q: no variable %s in the container", a, m)
			}
			return v
		})
		if strings.Contains(a, "${") {
			t.Fatalf("arg %q: left unfilled", a)
		}
		out = append(out, a)
	}
	return out
}

func envList(env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// freeLoopback is a loopback address with a port nothing listens on now,
// below the ephemeral range (32768 and up on Linux), so no process's
// outgoing connection takes it before the test's server listens there.
func freeLoopback(t *testing.T) string {
	t.Helper()
	for range 200 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000))))
		if err != nil {
			continue
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

// tokentapBinary builds tokentap from the module above (or takes
// TOKENTAP_BIN).
func tokentapBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("TOKENTAP_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "tokentap")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tokentap")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tokentap: %v\n%s", err, out)
	}
	return bin
}

// fakeEngine starts tokentap fake-engine and returns its URL.
func fakeEngine(t *testing.T, bin string, args ...string) string {
	t.Helper()
	return startURL(t, "fake engine", bin, append([]string{"fake-engine", "--listen", "127.0.0.1:0"}, args...)...)
}

// startURL starts bin with args, stopped when the test ends, and returns
// the URL it prints first on stdout.
func startURL(t *testing.T, what, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return strings.TrimSpace(line)
}

func mustRun(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	var so, se bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("tokentap %s: %v\n%s", strings.Join(args, " "), err, se.String())
	}
	return so.Bytes()
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
