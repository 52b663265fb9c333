//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// README's exit codes, the same for every command.
const (
	codeOK          = 0
	codeError       = 1
	codeUsage       = 2
	codeFailed      = 3
	codeEngine      = 4
	codeInterrupted = 130
)

// TestExitCodes runs every command's failure classes through the built
// binary and holds each exit code to the README's table: 0 done, 1 an
// error while running, 2 usage or a bad input file (nothing sent), 3
// cells or replayed requests failed, 4 the engine could not be reached,
// refused access or is not OpenAI, 130 interrupted.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	fake, _ := startFake(t)
	failing, _ := startFake(t, "--fault", "cut=3") // decode requests break; warm-ups do not
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"invalid api key"}`, http.StatusUnauthorized)
	}))
	defer unauthorized.Close()
	notOpenAI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>It works!</body></html>"))
	}))
	defer notOpenAI.Close()
	dead := "http://" + freeAddr(t)

	// Files the rows read.
	path := func(name string) string { return filepath.Join(dir, name) }
	write := func(name, s string) string {
		if err := os.WriteFile(path(name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path(name)
	}
	corrupt := write("corrupt.json", `{"schema": 1, "decode": [`)
	existing := write("existing.json", "KEEP")
	// An output that cannot be written: a link to /dev/full (writing
	// through it fails with ENOSPC). Through a link in the test's own
	// directory, so a binary that renames over its output (as main's
	// merge did) replaces the link, never the device.
	full := path("full.json")
	if err := os.Symlink("/dev/full", full); err != nil {
		t.Fatal(err)
	}
	quick := []string{"--prefill", "none", "--contexts", "0", "--concurrency", "1", "--max-output", "16", "--window", "1s", "--quiet", "--format", "none"}
	matrix := func(target string, extra ...string) []string {
		return append(append([]string{"matrix", "--target", target}, quick...), extra...)
	}
	// A real result, for report and as a wrong input elsewhere.
	res := path("run.json")
	if _, stderr, code := run(t, 60*time.Second, matrix(fake, "--out", res)...); code != 0 {
		t.Fatalf("matrix: exit %d\n%s", code, stderr)
	}
	shardA, shardB, otherRun := shardDoc(t, dir, 0, "r1"), shardDoc(t, dir, 1, "r1"), shardDoc(t, dir, 1, "r2")
	capture := captureFile(t, path("capture.jsonl"), 3, 300*time.Millisecond)
	longCapture := captureFile(t, path("long.jsonl"), 20, time.Second)

	for _, tt := range []struct {
		name      string
		args      []string
		code      int
		says      string
		interrupt time.Duration // send SIGINT this long after the start
	}{
		// matrix
		{"matrix done", matrix(fake), codeOK, "", 0},
		{"matrix bad flag", matrix(fake, "--windw", "1s"), codeUsage, "did you mean --window", 0},
		{"matrix unknown format", matrix(fake, "--format", "pdf"), codeUsage, "unknown report format", 0},
		{"matrix unwritable out", matrix(fake, "--out", "/nonexistent-tokentap/x.json"), codeUsage, "does not exist", 0},
		{"matrix existing out", matrix(fake, "--out", existing), codeUsage, "give --overwrite", 0},
		{"matrix out is its scenario", matrix(fake, "--scenario", write("s.yaml", "window: 1s\n"), "--out", path("s.yaml"), "--overwrite"), codeUsage, "is the input", 0},
		{"matrix nothing to measure", matrix(fake, "--contexts", "100000k"), codeUsage, "nothing to measure", 0},
		{"matrix wrong model", matrix(fake, "--model", "nope"), codeUsage, `does not serve model "nope"`, 0},
		{"matrix bad scenario file", matrix(fake, "--scenario", write("bad.yaml", "windw: 1s\n")), codeUsage, "windw", 0},
		{"matrix failed cells", matrix(failing), codeFailed, "--allow-failed", 0},
		{"matrix failed cells allowed", matrix(failing, "--allow-failed"), codeOK, "", 0},
		{"matrix unreachable", matrix(dead), codeEngine, "refused", 0},
		{"matrix refused access", matrix(unauthorized.URL), codeEngine, "401", 0},
		{"matrix not OpenAI", matrix(notOpenAI.URL), codeEngine, "OpenAI", 0},
		{"matrix result cannot be written", matrix(fake, "--out", full), codeError, "no space left on device", 0},
		{"matrix interrupted", matrix(fake, "--window", "20s"), codeInterrupted, "", 2 * time.Second},

		// report
		{"report done", []string{"report", res}, codeOK, "", 0},
		{"report no file", []string{"report"}, codeUsage, "give one result file", 0},
		{"report missing file", []string{"report", path("nope.json")}, codeUsage, "does not exist", 0},
		{"report corrupt file", []string{"report", corrupt}, codeUsage, "cannot use", 0},
		{"report unknown format", []string{"report", res, "--format", "pdf"}, codeUsage, "unknown report format", 0},
		{"report over its input", []string{"report", res, "--format", "md", "-o", res, "--overwrite"}, codeUsage, "is the input", 0},
		{"report over a file", []string{"report", res, "-o", existing}, codeUsage, "give --overwrite", 0},
		{"report cannot be written", []string{"report", res, "-o", full}, codeError, "no space left on device", 0},

		// merge
		{"merge done", []string{"merge", shardA, shardB, "-o", path("merged.json")}, codeOK, "", 0},
		{"merge no files", []string{"merge"}, codeUsage, "give the shards' result files", 0},
		{"merge missing shard", []string{"merge", shardA, path("nope.json")}, codeUsage, "does not exist", 0},
		{"merge corrupt shard", []string{"merge", shardA, corrupt}, codeUsage, "cannot use", 0},
		{"merge shards of two runs", []string{"merge", shardA, otherRun}, codeUsage, "different runs", 0},
		{"merge a shard missing", []string{"merge", shardA}, codeUsage, "missing", 0},
		{"merge over a shard", []string{"merge", shardA, shardB, "-o", shardA, "--overwrite"}, codeUsage, "is the input", 0},
		{"merge over a file", []string{"merge", shardA, shardB, "-o", existing}, codeUsage, "give --overwrite", 0},
		{"merge records without record files", []string{"merge", shardA, shardB, "--records", path("r.jsonl")}, codeUsage, "no record files", 0},
		{"merge cannot be written", []string{"merge", shardA, shardB, "-o", full}, codeError, "no space left on device", 0},

		// replay
		{"replay done", []string{"replay", "--target", fake, capture}, codeOK, "", 0},
		{"replay no target", []string{"replay", capture}, codeUsage, "--target is required", 0},
		{"replay missing capture", []string{"replay", "--target", fake, path("nope.jsonl")}, codeUsage, "no such file", 0},
		{"replay a result as capture", []string{"replay", "--target", fake, res}, codeUsage, "is a result document", 0},
		{"replay over its capture", []string{"replay", "--target", fake, capture, "--records", capture, "--overwrite"}, codeUsage, "is the input", 0},
		{"replay wrong model", []string{"replay", "--target", fake, "--model", "nope", capture}, codeUsage, `does not serve model "nope"`, 0},
		{"replay unreachable", []string{"replay", "--target", dead, capture}, codeEngine, "refused", 0},
		{"replay refused access", []string{"replay", "--target", unauthorized.URL, capture}, codeEngine, "401", 0},
		{"replay more failures than captured", []string{"replay", "--target", failing, capture}, codeFailed, "--allow-failed", 0},
		{"replay out cannot be written", []string{"replay", "--target", fake, capture, "--out", full}, codeError, "no space left on device", 0},
		{"replay interrupted", []string{"replay", "--target", fake, longCapture}, codeInterrupted, "", 2 * time.Second},

		// proxy
		{"proxy bad flag", []string{"proxy", "--upstreem", fake}, codeUsage, "did you mean --upstream", 0},
		{"proxy no upstream", []string{"proxy"}, codeUsage, "--upstream", 0},
		{"proxy capture in no directory", []string{"proxy", "--upstream", fake, "--listen", "127.0.0.1:0", "--admin", "", "--capture", "/nonexistent/c.jsonl"}, codeUsage, "--capture", 0},
		{"proxy negative idle timeout", []string{"proxy", "--upstream", fake, "--idle-timeout", "-1s"}, codeUsage, "--idle-timeout", 0},
		{"proxy interrupted", []string{"proxy", "--upstream", fake, "--listen", "127.0.0.1:0", "--admin", ""}, codeInterrupted, "", time.Second},

		// fake-engine, version, the command itself
		{"fake-engine bad setting", []string{"fake-engine", "--flavor", "ollama", "--slots", "0"}, codeUsage, "--slots 0", 0},
		{"fake-engine unknown flavour", []string{"fake-engine", "--flavor", "trtllm"}, codeUsage, "--flavor", 0},
		{"version", []string{"version"}, codeOK, "", 0},
		{"version bad flag", []string{"version", "--short"}, codeUsage, "unknown flag", 0},
		{"unknown command", []string{"frobnicate"}, codeUsage, "unknown command", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runFor(t, dir, tt.interrupt, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.says) {
				t.Errorf("tokentap %s: exit %d, want %d saying %q:\n%s", strings.Join(tt.args, " "), code, tt.code, tt.says, out)
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "KEEP" {
		t.Error("a file was written over without --overwrite")
	}
	if _, err := result.ReadFile(res); err != nil {
		t.Errorf("an input was written over: %v", err)
	}
	if st, err := os.Lstat(full); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to /dev/full was replaced: %v", err)
	}
}

// runFor runs the binary in dir (where a matrix without --out writes),
// interrupting it after interrupt when that is not 0, and returns its exit
// code and output.
func runFor(t *testing.T, dir string, interrupt time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if interrupt > 0 {
		timer := time.AfterFunc(interrupt, func() { _ = cmd.Process.Signal(syscall.SIGINT) })
		defer timer.Stop()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case asExit(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("tokentap %v: %v", args, err)
	return 0, ""
}

// shardDoc writes shard i of 2 of a one-cell run whose cell was Over
// capacity: enough for merge's checks.
func shardDoc(t *testing.T, dir string, i int, run string) string {
	t.Helper()
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	r := &result.Result{Schema: result.SchemaVersion, Model: result.Model{Served: "m"}, Started: start, Ended: start.Add(time.Minute),
		Settings: result.Settings{WindowSeconds: 10, MaxOutput: 64, Contexts: []int{0}, Concurrency: []int{4}},
		Decode:   []result.Cell{{Context: 0, Concurrency: 4, Status: result.OverCapacity, Reason: "4 × 64 > 100", MaxWaiting: -1}},
		Sharding: &result.Sharding{Run: run, Count: 2, StartAt: start, GapSeconds: 5, Shards: []result.ShardInfo{{Index: i}}}}
	p := filepath.Join(dir, fmt.Sprintf("shard-%s-%d.json", run, i))
	if err := writeResult(r, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// captureFile writes a capture of n short chat requests, every apart.
func captureFile(t *testing.T, p string, n int, every time.Duration) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := record.NewWriter(f)
	for i := range n {
		at := time.Duration(i) * every
		rec := record.Record{ID: fmt.Sprintf("cap-%d", i), Model: "fake-4b", API: record.Chat, Stream: true,
			MaxTokens: 8, Sent: at, End: at + 200*time.Millisecond, Outcome: record.OK, PromptTokens: 50, CompletionTokens: 8}
		if err := w.Write(&rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeResult writes r as a document at path.
func writeResult(r *result.Result, path string) error {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
