//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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

// TestDemoMatrix runs the README's first command as a user does (`tokentap
// matrix`, no target): the demo against the built-in fake engine must finish
// in well under the acceptance limit, print the report, and show every
// status in the places the demo's fake 12 GB GPU puts them.
func TestDemoMatrix(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.json")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), "matrix", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("tokentap matrix (demo): %v after %s\nstderr:\n%s", err, time.Since(start).Round(time.Second), stderr.String())
	}
	took := time.Since(start)
	t.Logf("demo matrix took %s", took.Round(100*time.Millisecond))
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.Len() == 0 {
		t.Error("the demo printed no report on stdout")
	}
	if !strings.Contains(stderr.String(), "demo") {
		t.Errorf("stderr does not say this is the demo:\n%s", stderr.String())
	}
	// Its Failed row is on purpose, and it says so (a first-time user
	// would think tokentap broken); it exits 0 all the same (above).
	if !strings.Contains(stderr.String(), "fails on purpose") || !strings.Contains(strings.Join(res.Notes, " "), "injected fault") {
		t.Errorf("the demo does not say its failure is injected:\n%s\nnotes: %q", stderr.String(), res.Notes)
	}
	want := map[[2]int]result.Status{
		{0, 1}:     result.Valid,
		{0, 16}:    result.RequestsQueued, // 16 streams, the fake runs 8 at once
		{1024, 8}:  result.Valid,
		{1024, 16}: result.OverCapacity, // 16 × (1K + 512) > 13,312
		{4096, 2}:  result.Valid,
		{4096, 4}:  result.OverCapacity,
		{8192, 1}:  result.Failed, // the fake fails every prompt of 6,000+ tokens
	}
	for cn, st := range want {
		c := res.Cell(cn[0], cn[1])
		if c == nil {
			t.Errorf("no cell C=%d N=%d", cn[0], cn[1])
			continue
		}
		if c.Status != st {
			t.Errorf("cell C=%d N=%d is %s (%s), want %s", cn[0], cn[1], c.Status, c.Reason, st)
		}
		if st == result.Valid && (!c.Measured || c.TotalTokPerSec <= 0 || c.TTFTms <= 0 || c.Histograms == nil) {
			t.Errorf("valid cell C=%d N=%d lacks figures: %+v", cn[0], cn[1], c)
		}
	}
	if len(res.Settings.Dropped) != 1 || res.Settings.Dropped[0] != 16384 {
		t.Errorf("dropped contexts %v, want [16384] (16K + 512 > max model length 16K)", res.Settings.Dropped)
	}
	seen := map[result.Status]bool{}
	for _, c := range res.Decode {
		seen[c.Status] = true
	}
	for _, st := range []result.Status{result.Valid, result.OverCapacity, result.Failed, result.RequestsQueued} {
		if !seen[st] {
			t.Errorf("no %s cell in the demo", st.Label())
		}
	}
	if seen[result.NotRun] {
		t.Error("a demo cell was not run")
	}
	for _, p := range res.Prefill {
		if p.Status != result.Valid || p.TokPerSec <= 0 {
			t.Errorf("prefill %d: %s %v tok/s (%s)", p.Context, p.Status, p.TokPerSec, p.Error)
		}
	}
	if took > 100*time.Second {
		t.Errorf("the demo took %s; the README promises under a minute", took)
	}
}

// TestMatrixInterrupted sends Ctrl-C (SIGINT) in the middle of the demo: the
// run must stop soon, exit non-zero and still write the result with the
// cells done so far and the rest Not run.
func TestMatrixInterrupted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.json")
	cmd := exec.Command(bin(t), "matrix", "--quiet", "--out", out, "--format", "none")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an interrupted matrix exited 0")
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the matrix did not stop within 15 s of Ctrl-C")
	}
	t.Logf("stopped %s after SIGINT", time.Since(sent).Round(time.Millisecond))
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatalf("no result after Ctrl-C: %v\nstderr:\n%s", err, stderr.String())
	}
	if !res.Interrupted {
		t.Error("result not marked interrupted")
	}
	var done0, notRun int
	for _, c := range res.Decode {
		switch c.Status {
		case result.NotRun:
			notRun++
		case result.Valid, result.RequestsQueued, result.Failed:
			done0++
		}
	}
	if done0 == 0 || notRun == 0 {
		t.Errorf("after Ctrl-C: %d cells run and %d not run; want some of each", done0, notRun)
	}
}

// TestMatrixUnreachable: a target nothing listens on fails with a clear
// message before any load, and a non-zero exit.
func TestMatrixUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := freeAddr(t)
	out, err := exec.CommandContext(ctx, bin(t), "matrix", "--target", "http://"+addr, "--quiet").CombinedOutput()
	if err == nil {
		t.Fatalf("matrix against a dead target exited 0:\n%s", out)
	}
	s := strings.ToLower(string(out))
	if !strings.Contains(s, addr) || !(strings.Contains(s, "reach") || strings.Contains(s, "refused") || strings.Contains(s, "connect")) {
		t.Errorf("unclear message for an unreachable target:\n%s", out)
	}
}

// TestReplayCapture replays a small capture against the fake engine at 2×
// speed and checks the summary: every request replayed, with the captured
// output length, spread over half the captured time.
func TestReplayCapture(t *testing.T) {
	dir := t.TempDir()
	fake, _ := startFake(t)

	// A capture of 6 requests over 3 s: different prompt and output lengths,
	// streaming and not, chat and completions.
	capPath := filepath.Join(dir, "capture.jsonl")
	f, err := os.Create(capPath)
	if err != nil {
		t.Fatal(err)
	}
	w := record.NewWriter(f)
	shapes := []struct {
		at     time.Duration
		prompt int
		out    int
		stream bool
		api    record.API
	}{
		{0, 200, 40, true, record.Chat},
		{500 * time.Millisecond, 1000, 20, true, record.Chat},
		{1 * time.Second, 50, 30, false, record.Chat},
		{1500 * time.Millisecond, 3000, 10, true, record.Completions},
		{2 * time.Second, 300, 25, true, record.Chat},
		{3 * time.Second, 100, 15, true, record.Chat},
	}
	for i, s := range shapes {
		rec := record.Record{ID: fmt.Sprintf("cap-%d", i), Model: "whatever-was-captured", API: s.api, Stream: s.stream,
			MaxTokens: s.out, Sent: s.at, End: s.at + time.Second, Outcome: record.OK, PromptTokens: s.prompt, CompletionTokens: s.out}
		if err := w.Write(&rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	recsPath := filepath.Join(dir, "replayed.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), "replay", "--target", fake, "--speed", "2", "--format", "json", "--records", recsPath, capPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tokentap replay: %v\n%s", err, stderr.String())
	}
	var sum struct {
		Requests     int     `json:"requests"`
		OK           int     `json:"ok"`
		Failed       int     `json:"failed"`
		OutputTokens int     `json:"output_tokens"`
		SpanSeconds  float64 `json:"span_s"`
		TTFTms       struct {
			P50 float64 `json:"p50"`
		} `json:"ttft_ms"`
		TokPerSec float64 `json:"output_tok_s"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("replay --format json: %v\n%s", err, stdout.String())
	}
	if sum.Requests != len(shapes) || sum.OK != len(shapes) || sum.Failed != 0 {
		t.Fatalf("replayed %d requests, %d ok, %d failed; want %d ok\n%s", sum.Requests, sum.OK, sum.Failed, len(shapes), stdout.String())
	}
	wantTokens := 0
	for _, s := range shapes {
		wantTokens += s.out
	}
	if sum.OutputTokens != wantTokens {
		t.Errorf("output tokens %d, want %d (the captured max_tokens)", sum.OutputTokens, wantTokens)
	}
	if sum.TTFTms.P50 <= 0 || sum.TokPerSec <= 0 {
		t.Errorf("summary lacks TTFT or throughput: %s", stdout.String())
	}
	rf, err := os.Open(recsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	recs, err := record.ReadAll(rf)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(shapes) {
		t.Fatalf("%d replayed records, want %d", len(recs), len(shapes))
	}
	// Original arrivals span 3 s; at 2× the sends span 1.5 s.
	first, last := recs[0].Sent, recs[0].Sent
	for _, r := range recs {
		first, last = min(first, r.Sent), max(last, r.Sent)
		if r.PromptTokens == 0 {
			t.Errorf("record %s: no prompt token count", r.ID)
		}
	}
	if span := last - first; span < 1400*time.Millisecond || span > 2500*time.Millisecond {
		t.Errorf("sends spanned %s; want about 1.5 s (3 s of capture at 2×)", span)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer within 15 s", url)
}
