package wire

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// stream is a streamed exchange: request's last byte at sent ms, token
// events at the given ms (one token each), [DONE] at done ms (0: none),
// last byte at last ms.
func stream(resp, req string, sent int, events []int, done, last int) Exchange {
	x := Exchange{ReqDone: true, Complete: true, RequestID: req, Last: wt(last),
		Wire: record.Record{ResponseID: resp, Stream: true, Sent: wt(sent), Outcome: record.OK}}
	for _, e := range events {
		x.Wire.AddEvent(wt(e), 1)
	}
	if done != 0 {
		x.Wire.End = wt(done)
	}
	return x
}

func TestMatchReported(t *testing.T) {
	xs := []Exchange{
		stream("r1", "q1", 0, []int{40, 50}, 51, 52),
		stream("r2", "q2", 1, []int{41, 51}, 51, 60),
		stream("r3", "", 2, []int{42, 52}, 53, 53),                            // ends within 1 ms of r1's end
		{ReqDone: true, Complete: true, Wire: record.Record{ResponseID: "m"}}, // not a stream (GET /v1/models): never paired
		stream("r4", "q4", 3, []int{43}, 0, 0),                                // cut after its first token: never paired by end order
	}
	xs[4].Wire.Outcome = record.Cancelled
	cases := []struct {
		name                    string
		key                     Key
		reps                    []Reported
		pairs                   []string // the response ids paired, in the reports' order
		unmatched, left, closeN int
	}{
		{"by response id", ByResponseID, []Reported{{ResponseID: "r2"}, {ResponseID: "zz"}, {}, {ResponseID: "r1"}, {ResponseID: "r1"}},
			[]string{"r2", "r1"}, 3, 2, 0},
		{"by request id", ByRequestID, []Reported{{RequestID: "q1"}, {RequestID: "q2"}, {RequestID: ""}, {RequestID: "q4"}},
			[]string{"r1", "r2", "r4"}, 1, 1, 0},
		{"not a stream, by its id", ByResponseID, []Reported{{ResponseID: "m"}}, nil, 1, 4, 0},
		{"by end order", ByEndOrder, []Reported{{}, {}, {}}, []string{"r1", "r3", "r2"}, 0, 1, 2},
		{"by end order, more reports", ByEndOrder, []Reported{{}, {}, {}, {}}, []string{"r1", "r3", "r2"}, 1, 1, 2},
		{"by end order, fewer", ByEndOrder, []Reported{{}}, []string{"r1"}, 0, 3, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := MatchReported(c.reps, xs, c.key)
			var got []string
			for _, p := range m.Pairs {
				got = append(got, p.Wire.Wire.ResponseID)
			}
			if !slices.Equal(got, c.pairs) || m.Unmatched != c.unmatched || m.Left != c.left || m.Close != c.closeN {
				t.Errorf("pairs %v unmatched %d left %d close %d; want %v %d %d %d", got, m.Unmatched, m.Left, m.Close,
					c.pairs, c.unmatched, c.left, c.closeN)
			}
		})
	}
}

func TestWireITL(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	x := stream("a", "", 0, []int{40, 50, 60, 70}, 75, 80)
	noDone := stream("b", "", 0, []int{40, 50, 60}, 0, 66)
	one := stream("c", "", 0, []int{40}, 41, 42)
	cases := []struct {
		x    Exchange
		span Span
		want time.Duration
		ok   bool
	}{
		{x, FirstToLast, ms(10), true},
		{x, FirstToEnd, ms(35.0 / 3), true},
		{noDone, FirstToEnd, ms(13), true}, // no [DONE]: the last byte ends it
		{noDone, FirstToLast, ms(10), true},
		{one, FirstToLast, 0, false},
	}
	for i, c := range cases {
		got, ok := WireITL(&c.x, c.span)
		if got != c.want || ok != c.ok {
			t.Errorf("case %d: %v %v, want %v %v", i, got, ok, c.want, c.ok)
		}
	}
	// Events of several tokens: the divisor is the tokens, not the events.
	multi := stream("d", "", 0, nil, 0, 70)
	multi.Wire.AddEvent(wt(40), 2)
	multi.Wire.AddEvent(wt(70), 4)
	if got, _ := WireITL(&multi, FirstToLast); got != ms(6) {
		t.Errorf("two events of 6 tokens over 30 ms: %v, want 6ms", got)
	}
}

func TestCompareReported(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	xs := []Exchange{
		stream("a", "", 0, []int{40, 50, 60}, 61, 62),
		stream("b", "", 0, []int{40, 50, 60}, 61, 62),
		stream("c", "", 0, []int{40, 50}, 51, 52),
	}
	xs[2].ReqDone = false // the capture missed the request's end: nothing compared
	reps := []Reported{
		{ResponseID: "a", TTFT: ms(42), ITL: ms(10.5), Gaps: []time.Duration{ms(11), ms(9)}},
		{ResponseID: "b", TTFT: ms(40), Gaps: []time.Duration{ms(10)}}, // one gap short; no ITL given
		{ResponseID: "c", TTFT: ms(1)},
	}
	m := MatchReported(reps, xs, ByResponseID)
	e := CompareReported(m.Pairs, FirstToEnd)
	if !slices.Equal(e.TTFT, []time.Duration{ms(2), 0}) || fmt.Sprintf("%.3f %.3f", e.TTFTRel[0], e.TTFTRel[1]) != "0.050 0.000" {
		t.Errorf("TTFT errors %v %v", e.TTFT, e.TTFTRel)
	}
	if !slices.Equal(e.ITL, []time.Duration{0}) { // the wire's 21 ms to [DONE] over 2 tokens
		t.Errorf("ITL errors %v, want [0]", e.ITL)
	}
	if !slices.Equal(e.Gap, []time.Duration{ms(1), -ms(1), 0}) || e.GapsDiffer != 1 {
		t.Errorf("gap errors %v, %d differ", e.Gap, e.GapsDiffer)
	}
	tokens, from, to := PeerTokens(m.Pairs)
	if tokens != 8 || from != wt(0) || to != wt(60) {
		t.Errorf("tokens %d from %v to %v", tokens, from-wt(0), to-wt(0))
	}
}
