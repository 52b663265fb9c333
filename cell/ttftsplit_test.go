package cell

import (
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

func cut(r record.Record) record.Record {
	r.Outcome = record.Cancelled
	return r
}

func TestSplit(t *testing.T) {
	w := Window{Start: msd(1000), End: msd(2000)}
	four := []record.Record{ttftRec(1000, 60), ttftRec(1000, 60), ttftRec(1200, 50), ttftRec(1300, 70), ttftRec(500, 999), ttftRec(2500, 1)}
	vllm := []EnginePart{
		{Name: result.PartQueue, Total: msd(40), Requests: 4, FinishedOnly: true, Source: "q"},
		{Name: result.PartPrefill, Total: msd(120), Requests: 4, FinishedOnly: true, Source: "p"},
		{Name: result.PartEngineTTFT, Total: msd(200), Requests: 4, Source: "t"},
	}
	// Every request of the window finished: all parts over them.
	s := Split(four, w, vllm)
	if s == nil || s.ClientRequests != 4 || s.ClientMs != 60 || s.Queue.Ms != 10 || s.Prefill.Ms != 30 || s.EngineTTFT.Ms != 50 || s.Over != result.OverFirstToken ||
		s.OutsideMs == nil || *s.OutsideMs != 10 || s.UnaccountedMs != nil || s.Note != "" || s.Queue.Source != "q" {
		t.Fatalf("vLLM split %+v", s)
	}

	// Two of the four cut: vLLM kept queue and prefill only of the two
	// that finished, its TTFT of all four. The sets differ, so only the
	// TTFT is shown, over the four, and the note says why.
	halfCut := []record.Record{ttftRec(1000, 60), ttftRec(1000, 60), cut(ttftRec(1200, 50)), cut(ttftRec(1300, 70))}
	s = Split(halfCut, w, []EnginePart{
		{Name: result.PartQueue, Total: msd(900), Requests: 2, FinishedOnly: true},
		{Name: result.PartPrefill, Total: msd(60), Requests: 2, FinishedOnly: true},
		{Name: result.PartEngineTTFT, Total: msd(200), Requests: 4},
	})
	if s == nil || s.ClientRequests != 4 || s.Queue != nil || s.Prefill != nil || s.EngineTTFT == nil || s.EngineTTFT.Requests != 4 ||
		!strings.Contains(s.Note, "No queue time and prefill time") || !strings.Contains(s.Note, "2 of the 4 requests of the window that got a first token were cut") {
		t.Fatalf("vLLM split with cut requests %+v", s)
	}

	// TGI keeps only finished requests' figures: shown over those, beside
	// their client TTFT (60 ms), unaccounted = 60 − 5 − 1.
	s = Split(halfCut, w, []EnginePart{
		{Name: result.PartQueue, Total: msd(10), Requests: 2, FinishedOnly: true},
		{Name: result.PartValidation, Total: msd(2), Requests: 2, FinishedOnly: true},
	})
	if s == nil || s.Over != result.OverFinished || s.ClientRequests != 2 || s.ClientMs != 60 || s.Queue.Ms != 5 || s.Validation.Ms != 1 ||
		s.UnaccountedMs == nil || *s.UnaccountedMs != 54 || !strings.Contains(s.Note, "Over the 2 requests that finished") {
		t.Fatalf("TGI split with cut requests %+v", s)
	}
	// None finished: nothing to show but why.
	s = Split([]record.Record{cut(ttftRec(1000, 60))}, w, []EnginePart{{Name: result.PartQueue, Total: 0, Requests: 0, FinishedOnly: true}})
	if s == nil || s.Queue != nil || s.EngineTTFT != nil || !strings.Contains(s.Note, "No queue time") {
		t.Fatalf("TGI split with nothing finished %+v", s)
	}

	// llama.cpp's counter (before b10406): its seconds over the requests
	// tokentap saw get a first token.
	s = Split(four, w, []EnginePart{{Name: result.PartPrefill, Total: msd(100), Counter: true, Source: "c"}})
	if s == nil || s.Prefill.Ms != 25 || s.Prefill.Requests != 4 || s.UnaccountedMs == nil || *s.UnaccountedMs != 35 || s.OutsideMs != nil {
		t.Fatalf("counter split %+v", s)
	}

	// Counts that differ: not the same requests, not shown.
	s = Split(four, w, []EnginePart{{Name: result.PartEngineTTFT, Total: msd(250), Requests: 5}})
	if s == nil || s.EngineTTFT != nil || !strings.Contains(s.Note, "No TTFT: the engine counted 5 requests, tokentap 4") {
		t.Fatalf("differing counts %+v", s)
	}
	// An engine TTFT above tokentap's (60 ms) beyond 5% + 1 ms, or a part
	// above the engine's TTFT: not shown.
	s = Split(four, w, []EnginePart{{Name: result.PartEngineTTFT, Total: msd(4 * 65), Requests: 4}})
	if s == nil || s.EngineTTFT != nil || !strings.Contains(s.Note, "above tokentap's") {
		t.Fatalf("engine TTFT above the client's %+v", s)
	}
	if s := Split(four, w, []EnginePart{{Name: result.PartEngineTTFT, Total: msd(4 * 63), Requests: 4}}); s == nil || s.EngineTTFT == nil {
		t.Fatalf("engine TTFT within the tolerance %+v", s)
	}
	s = Split(four, w, []EnginePart{{Name: result.PartEngineTTFT, Total: msd(160), Requests: 4}, {Name: result.PartQueue, Total: msd(200), Requests: 4}})
	if s == nil || s.Queue != nil || s.EngineTTFT == nil || !strings.Contains(s.Note, "above the engine's TTFT") {
		t.Fatalf("queue above the engine TTFT %+v", s)
	}

	// Per-response timings are preferred: the client mean is over the
	// same requests.
	timed := []record.Record{ttftRec(1000, 25), ttftRec(1100, 35), cut(ttftRec(1200, 90))}
	timed[0].EnginePrefill, timed[0].EnginePrefillSet = msd(20), true
	timed[1].EnginePrefill, timed[1].EnginePrefillSet = msd(28), true
	for _, parts := range [][]EnginePart{nil, {{Name: result.PartPrefill, Total: msd(999), Counter: true}}} {
		s = Split(timed, w, parts)
		if s == nil || s.Over != result.OverTimed || s.ClientRequests != 2 || s.ClientMs != 30 || s.Prefill.Ms != 24 || *s.UnaccountedMs != 6 ||
			!strings.Contains(s.Prefill.Source, "timings.prompt_ms") || !strings.Contains(s.Note, "1 more of the window") {
			t.Fatalf("timings split (parts %v) %+v", parts, s)
		}
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
