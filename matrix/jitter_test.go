package matrix

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// TestTBTWithinJitter: a tbt objective between a cell's median gap and its
// p99 judges the engine's jitter (a user of vLLM's --goodput tpot:25 who
// wrote tbt=25ms against a 20 ms engine got 0% good): the run says so and
// names tpot; one clear of the gaps, or no tbt at all, says nothing.
func TestTBTWithinJitter(t *testing.T) {
	h := histo.New()
	for i := range 100 {
		gap := 20 * time.Millisecond
		if i >= 95 {
			gap = 40 * time.Millisecond // a few slow gaps: p99 40 ms
		}
		h.RecordTBT(gap, 1)
	}
	cells := []result.Cell{{Context: 0, Concurrency: 4, Status: result.Valid, Measured: true, OutputTokens: 100, TotalTokPerSec: 50, Histograms: h}}
	for _, tc := range []struct {
		spec string
		warn bool
	}{
		{"tbt=25ms", true},
		{"ttft=1s,tbt=30ms", true},
		{"tbt=15ms", false},  // below every gap: a plain miss, not jitter
		{"tbt=100ms", false}, // above every gap
		{"tpot=25ms", false},
		{"ttft=1s", false},
	} {
		spec, err := slo.Parse(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		got := tbtWithinJitter(spec, cells)
		if (got != "") != tc.warn || (tc.warn && (!strings.Contains(got, "within the engine's own jitter") || !strings.Contains(got, "0 × 4") || !strings.Contains(got, "tpot="))) {
			t.Errorf("%s: note %q; want one: %v", tc.spec, got, tc.warn)
		}
	}
}
