package cell

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

func msd(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// ttftRec is a request sent at sent ms with its first token ttft ms later
// and one more event 10 ms after.
func ttftRec(sent, ttft float64) record.Record {
	r := record.Record{Sent: msd(sent), End: msd(sent + ttft + 10), Outcome: record.OK}
	r.AddEvent(msd(sent+ttft), 1)
	r.AddEvent(msd(sent+ttft+10), 1)
	return r
}

func TestSplit(t *testing.T) {
	w := Window{Start: msd(1000), End: msd(2000)}
	four := []record.Record{ttftRec(1000, 60), ttftRec(1000, 60), ttftRec(1200, 50), ttftRec(1300, 70), ttftRec(500, 999), ttftRec(2500, 1)}
	vllm := []EnginePart{
		{Name: result.PartQueue, Total: msd(40), Requests: 4, Source: "q"},
		{Name: result.PartPrefill, Total: msd(120), Requests: 4, Source: "p"},
		{Name: result.PartEngineTTFT, Total: msd(200), Requests: 4, Source: "t"},
	}
	s := Split(four, w, vllm)
	if s == nil || s.ClientRequests != 4 || s.ClientMs != 60 || s.Queue.Ms != 10 || s.Prefill.Ms != 30 || s.EngineTTFT.Ms != 50 ||
		s.OutsideMs == nil || *s.OutsideMs != 10 || s.UnaccountedMs != nil || s.Note != "" || s.Queue.Source != "q" {
		t.Fatalf("vLLM split %+v", s)
	}

	// llama.cpp's counter: its seconds over the requests tokentap saw.
	s = Split(four, w, []EnginePart{{Name: result.PartPrefill, Total: msd(100), Counter: true, Source: "c"}})
	if s == nil || s.Prefill.Ms != 25 || s.Prefill.Requests != 4 || s.UnaccountedMs == nil || *s.UnaccountedMs != 35 || s.OutsideMs != nil {
		t.Fatalf("counter split %+v", s)
	}

	// Counts that differ are said.
	s = Split(four, w, []EnginePart{{Name: result.PartEngineTTFT, Total: msd(250), Requests: 5}})
	if s == nil || s.EngineTTFT.Ms != 50 || !strings.Contains(s.Note, "5 for its TTFT") || !strings.Contains(s.Note, "measured 4 requests") {
		t.Fatalf("differing counts %+v", s)
	}

	// Per-response timings, where the engine has no metrics: the client
	// mean is over the same requests.
	timed := []record.Record{ttftRec(1000, 25), ttftRec(1100, 35), ttftRec(1200, 90)}
	timed[0].EnginePrefill, timed[0].EnginePrefillSet = msd(20), true
	timed[1].EnginePrefill, timed[1].EnginePrefillSet = msd(28), true
	s = Split(timed, w, nil)
	if s == nil || s.ClientRequests != 2 || s.ClientMs != 30 || s.Prefill.Ms != 24 || *s.UnaccountedMs != 6 || !strings.Contains(s.Prefill.Source, "timings.prompt_ms") {
		t.Fatalf("timings split %+v", s)
	}

	// Nothing said, or nothing measured: no split.
	if s := Split(four, w, nil); s != nil {
		t.Errorf("no engine figures: %+v", s)
	}
	if s := Split([]record.Record{ttftRec(3000, 5)}, w, vllm); s != nil {
		t.Errorf("no request in the window: %+v", s)
	}
	if s := Split(four, w, []EnginePart{{Name: result.PartQueue, Requests: 0}}); s != nil {
		t.Errorf("a part over no requests: %+v", s)
	}
}

func TestMeanSeqTokens(t *testing.T) {
	w := Window{Start: msd(1000), End: msd(2000)}
	// Prompt 100: events at 900 (before), 1100, 1200 (3 tokens), 2100 (after).
	a := record.Record{PromptTokens: 100}
	a.AddEvent(msd(900), 1)
	a.AddEvent(msd(1100), 1)
	a.AddEvent(msd(1200), 3)
	a.AddEvent(msd(2100), 1)
	// No prompt count: the fallback of 1000 stands in; one event at 1500.
	b := record.Record{}
	b.AddEvent(msd(1500), 1)
	// In the window: a's tokens at positions 101, 102, 103, 104; b's at 1000.
	want := (101.0 + 102 + 103 + 104 + 1000) / 5
	if got := MeanSeqTokens([]record.Record{a, b}, w, 1000); math.Abs(got-want) > 1e-9 {
		t.Errorf("MeanSeqTokens = %v, want %v", got, want)
	}
	if got := MeanSeqTokens([]record.Record{a}, Window{Start: msd(3000), End: msd(4000)}, 0); got != 0 {
		t.Errorf("no token in the window: %v", got)
	}
}
