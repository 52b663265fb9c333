package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/slo"
)

// TestSummarySLO: a replay's requests are judged as the matrix's are (the
// cancelled one is not, the failed one is never good) and goodput is over
// the replay's span.
func TestSummarySLO(t *testing.T) {
	ms := time.Millisecond
	recs := []record.Record{
		{ID: "fast", Sent: 0, End: 400 * ms, Outcome: record.OK, Arrivals: []time.Duration{100 * ms, 200 * ms}, First: 100 * ms, CompletionTokens: 2},
		{ID: "slow", Sent: 0, End: 1000 * ms, Outcome: record.OK, Arrivals: []time.Duration{900 * ms, 950 * ms}, First: 900 * ms, CompletionTokens: 2},
		{ID: "failed", Sent: 10, End: 20, Outcome: record.HTTPError, Status: 500},
		{ID: "left", Sent: 10, End: 20, Outcome: record.Cancelled},
	}
	spec, err := slo.Parse("ttft=500ms")
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(recs)
	s.AddSLO(recs, spec)
	if s.SLO == nil || s.SLO.Judged != 3 || s.SLO.Good != 1 || s.SLO.Failed != 1 || s.SLO.Undecided != 1 ||
		s.SLO.GoodputReqPerSec != 1/s.SpanSeconds || s.SLO.GoodputTokPerSec != 2/s.SpanSeconds || s.SLOSpec.TTFTms != 500 {
		t.Fatalf("SLO %+v over %.3f s", s.SLO, s.SpanSeconds)
	}
	var text strings.Builder
	s.WriteText(&text)
	for _, want := range []string{"TTFT ≤ 500 ms", "33.3% of 3 requests judged (1 good, 1 failed; 1 cut and undecided, not judged)", "good requests/s", "Most missed   TTFT (by 1 of 3 judged)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}
