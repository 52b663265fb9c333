package traffic

import (
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/slo"
)

// TestReplayFailures: the replayed requests counted by how they ended,
// with nothing to count from.
func TestReplayFailures(t *testing.T) {
	recs := []record.Record{
		{ID: "a", Sent: 0, End: time.Second, Outcome: record.OK, Arrivals: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, First: 100 * time.Millisecond},
		{ID: "b", Sent: 10, End: 20, Outcome: record.HTTPError, Status: 500},
		{ID: "c", Sent: 10, End: 20, Outcome: record.Cancelled},
	}
	s := SummarizeReplay(recs, nil, nil)
	if s.OK != 1 || s.Failed != 1 || s.Cancelled != 1 || s.Errors["http_error"] != 1 || s.OutputTokens != 2 || s.Captured != nil {
		t.Fatalf("%+v", s)
	}
	if tbt, _ := s.TBTms.Value(50); tbt < 99 || tbt > 101 {
		t.Errorf("TBT p50 %.2f ms, want 100", tbt)
	}
	var text strings.Builder
	s.WriteText(&text)
	if !strings.Contains(text.String(), "Replayed failures: ") || !strings.Contains(text.String(), "http_error 500 ×1") {
		t.Errorf("text names not the failure:\n%s", text.String())
	}
	if empty := SummarizeReplay(nil, nil, nil); empty.Requests != 0 || empty.OutputTokPerS != 0 {
		t.Errorf("empty summary %+v", empty)
	}
}

// TestReplaySLO: a replay's requests are judged as the matrix's are (the
// cancelled one is not, the failed one is never good) and goodput is over
// the replay's span.
func TestReplaySLO(t *testing.T) {
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
	s := SummarizeReplay(recs, nil, nil)
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
