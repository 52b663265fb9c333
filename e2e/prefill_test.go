//go:build e2e

package e2e

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/result"
)

// TestPrefillRepeats runs `tokentap matrix --prefill-repeats 3` as a user
// does, against `tokentap fake-engine --prefill-tok-per-sec 8000`: the 4K
// prefill row sends 3 cold requests, its median reads the fake's prompt
// tok/s within 5% (the TTFT also holds the fake's 10 ms first-event delay
// and the loopback), and the report shows the spread and the count; a bad
// count is refused before any load.
func TestPrefillRepeats(t *testing.T) {
	fake, _ := startFake(t, "--prefill-tok-per-sec", "8000", "--prefill-slowdown", "0", "--first-event-delay", "10ms")
	out := filepath.Join(t.TempDir(), "run.json")
	_, stderr, code := run(t, 90*time.Second, "matrix", "--target", fake, "--contexts", "0", "--concurrency", "1",
		"--prefill", "4k", "--prefill-repeats", "3", "--window", "300ms", "--max-output", "16", "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("matrix exit %d:\n%s", code, stderr)
	}
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Prefill[0]
	if p.Status != result.Valid || p.Repeats != 3 || p.Requests != 3 || p.Measured != 3 || len(p.Each) != 3 {
		t.Fatalf("prefill row %+v; want 3 of 3 repeats measured", p)
	}
	want := float64(p.PromptTokens) / (float64(p.PromptTokens)/8000 + 0.010)
	if math.Abs(p.TokPerSec-want)/want > 0.05 {
		t.Errorf("median %.1f tok/s, the fake's %.1f (±5%%); repeats %+v", p.TokPerSec, want, p.Each)
	}
	t.Logf("median %.1f tok/s (%.1f–%.1f), fake %.1f", p.TokPerSec, p.TokPerSecMin, p.TokPerSecMax, want)
	text, _, code := run(t, 30*time.Second, "report", out)
	if code != 0 || !strings.Contains(text, "3 of 3") || !strings.Contains(text, "spread") {
		t.Errorf("report (exit %d) lacks the repeats:\n%s", code, text)
	}
	_, stderr, code = run(t, 30*time.Second, "matrix", "--target", fake, "--prefill-repeats", "0")
	if code == 0 || !strings.Contains(stderr, "--prefill-repeats") || !strings.Contains(stderr, "cold requests per prefill row") {
		t.Errorf("--prefill-repeats 0: exit %d, stderr %q; want a refusal naming the flag", code, stderr)
	}
}
