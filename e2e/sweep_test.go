//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/result"
)

// TestSweepKnee runs the built binary as a user would: `tokentap
// fake-engine` with a performance model whose capacity is known (each
// running request adds 2 ms to every time between tokens, so requests of
// 16 tokens are served at under μ = 1/(15 × 2 ms) = 33.3 per second
// however many run), then `tokentap matrix --sweep` against it over
// loopback. The result's sweep row holds the TBT curve with its knee
// between μ/3 and μ, the text report draws it and says where it bends,
// and the HTML draws it in inline SVG.
func TestSweepKnee(t *testing.T) {
	t.Parallel()
	url, _ := startFake(t, "--max-running", "128", "--first-event-delay", "20ms", "--prefill-tok-per-sec", "1000000",
		"--prefill-slowdown", "0", "--tbt-base", "4ms", "--tbt-per-running", "2ms", "--tbt-per-ktokens", "0")
	const capacity = 1 / (15 * 0.002)
	dir := t.TempDir()
	out := filepath.Join(dir, "sweep.json")
	stdout, stderr, code := run(t, 3*time.Minute, "matrix", "--target", url, "--sweep", "--contexts", "0", "--concurrency", "1,32",
		"--window", "2s", "--max-output", "16", "--prefill", "none", "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("matrix --sweep: exit %d\n%s", code, stderr)
	}
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sweeps) != 1 || len(res.Sweeps[0].Points) < 8 {
		t.Fatalf("sweep rows %+v, want one of at least 8 points", res.Sweeps)
	}
	var tbt result.Knee
	for _, k := range res.Sweeps[0].Knees {
		if k.Metric == result.KneeTBT {
			tbt = k
		}
	}
	t.Logf("TBT knee: %+v", tbt)
	if !tbt.Found || tbt.AchievedRate < capacity/3 || tbt.AchievedRate > capacity {
		t.Errorf("TBT knee %+v, want one between μ/3 = %.1f and μ = %.1f requests/s", tbt, capacity/3, capacity)
	}
	if !strings.Contains(stdout, "TBT, ms, against achieved requests/s") || !strings.Contains(stdout, "TBT p50 bends at") {
		t.Errorf("the printed report does not draw the sweep's curve or say where it bends:\n%s", stdout)
	}
	page := filepath.Join(dir, "sweep.html")
	if _, stderr, code := run(t, time.Minute, "report", "--format", "html", "-o", page, out); code != 0 {
		t.Fatalf("report --format html: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `<svg class="sweep"`); n != 2 {
		t.Errorf("%d sweep charts in the page, want 2", n)
	}
}
