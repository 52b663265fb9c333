package traffic

import (
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// TestSummarize: counts by model, outcome, whose fault and HTTP status;
// tokens from events (a non-streaming response's from its usage); rates
// over the span from the first request sent to the last end; percentiles
// with their sample counts.
func TestSummarize(t *testing.T) {
	wall := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	stream := func(model string, sent time.Duration, n int) record.Record {
		r := record.Record{Model: model, Sent: sent, Wall: wall.Add(sent), Stream: true, Outcome: record.OK, PromptTokens: 10}
		for i := range n {
			r.AddEvent(sent+40*time.Millisecond+time.Duration(i)*10*time.Millisecond, 1)
		}
		r.End = sent + 40*time.Millisecond + time.Duration(n)*10*time.Millisecond
		return r
	}
	recs := []record.Record{
		stream("a", 0, 10),
		stream("a", 500*time.Millisecond, 10),
		{Model: "a", Sent: 600 * time.Millisecond, End: 900 * time.Millisecond, Outcome: record.OK, CompletionTokens: 7, PromptTokens: 5},
		{Model: "b", Sent: 700 * time.Millisecond, End: 701 * time.Millisecond, Outcome: record.HTTPError, Status: 404, Blame: record.BlameClient},
		{Model: "b", Sent: 800 * time.Millisecond, End: 810 * time.Millisecond, Outcome: record.HTTPError, Status: 404, Blame: record.BlameClient},
		{Model: "b", Sent: 900 * time.Millisecond, End: time.Second, Outcome: record.HTTPError, Status: 503, Blame: record.BlameEngine},
	}
	s := Summarize(recs, []float64{50, 99})
	if s.Requests != 6 || s.OK != 3 || s.Failed != 3 || s.Errors["http_error"] != 3 {
		t.Fatalf("counts %+v", s.Figures)
	}
	if s.OutputTokens != 27 || s.PromptTokens != 25 {
		t.Errorf("output %d prompt %d; want 27 (20 streamed + 7 from a non-streaming usage) and 25", s.OutputTokens, s.PromptTokens)
	}
	if s.SpanSeconds < 0.999 || s.SpanSeconds > 1.001 || s.RequestsPerS < 5.9 || s.RequestsPerS > 6.1 || !s.First.Equal(wall) {
		t.Errorf("span %v s, %v requests/s, first %v", s.SpanSeconds, s.RequestsPerS, s.First)
	}
	if len(s.Outcomes) != 3 || s.Outcomes[1] != (Outcome{Model: "b", Outcome: record.HTTPError, Blame: record.BlameClient, Status: 404, Count: 2}) {
		t.Errorf("outcomes %+v", s.Outcomes)
	}
	if len(s.Models) != 2 || s.Models[0].Name != "a" || s.Models[0].Requests != 3 || s.Models[1].Failed != 3 {
		t.Errorf("models %+v", s.Models)
	}
	if v, _ := s.TTFTms.Value(50); s.TTFTms.N != 2 || v < 39.9 || v > 40.1 || !s.TTFTms.Low(99) {
		t.Errorf("TTFT %+v", s.TTFTms)
	}
	if s.TBTms.N != 18 || s.E2Ems.N != 3 {
		t.Errorf("TBT n %d, end-to-end n %d; want 18 gaps and 3 completed requests", s.TBTms.N, s.E2Ems.N)
	}
	if e := Summarize(nil, nil); e.Requests != 0 || e.OutputTokPerS != 0 || len(e.Percentiles) != 3 {
		t.Errorf("empty summary %+v", e)
	}
}
