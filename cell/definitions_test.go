package cell

import (
	"math"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// TestTBTDefinitions (METHOD §3): with k tokens an event (speculative
// decoding, a stream interval), tokentap's time between tokens (per
// token), vLLM's ITL (per chunk) and GuideLLM's and AIPerf's per-request
// ITL, (e2e − TTFT)/(n − 1), differ: ITL per chunk is k times the others.
func TestTBTDefinitions(t *testing.T) {
	const gap = 40 * time.Millisecond
	for _, k := range []int{1, 2, 4} {
		recs := make([]record.Record, 3)
		for i := range recs {
			recs[i] = record.Record{Stream: true, Sent: 0, Outcome: record.Cancelled}
			recs[i].AddEvent(30*time.Millisecond, 1) // the first event: one token
			for at := 30*time.Millisecond + gap; at < 3*time.Second; at += gap {
				recs[i].AddEvent(at, k)
			}
			recs[i].SetEnd(3 * time.Second)
		}
		f := Decode(recs, Window{Start: 0, End: 3 * time.Second})
		var c result.Cell
		f.Fill(&c, Judge{N: 3, MaxWaiting: -1, AvgRunning: -1})
		perToken := float64(gap/time.Duration(k)) / 1e6
		if math.Abs(c.TBTms-perToken) > perToken*1e-3 || math.Abs(c.ITLChunkMs-40) > 40e-3 || math.Abs(c.TPOTRequestMs-perToken) > perToken*1e-3 {
			t.Errorf("k = %d: TBT %.3f ms (want %.3f), ITL per chunk %.3f (want 40), TPOT per request %.3f (want %.3f)",
				k, c.TBTms, perToken, c.ITLChunkMs, c.TPOTRequestMs, perToken)
		}
		if r := c.ITLChunkMs / c.TBTms; math.Abs(r-float64(k)) > 0.01 {
			t.Errorf("k = %d: ITL per chunk is %.3f × TBT", k, r)
		}
	}
}

// TestTPOTPerRequestMedian: TPOT per request is the median over the
// requests' own times per token (METHOD §2), by nearest rank: of four
// requests at 10, 12, 14 and 16 ms a token, the 2nd, 12 ms; 1000 / the
// median rate picks the 3rd request's 14 ms instead (the times in
// ascending order are the rates in descending order). With an odd count
// both pick the middle request.
func TestTPOTPerRequestMedian(t *testing.T) {
	for _, tc := range []struct {
		gaps []time.Duration
		want float64
	}{
		{[]time.Duration{10 * time.Millisecond, 12 * time.Millisecond, 14 * time.Millisecond, 16 * time.Millisecond}, 12},
		{[]time.Duration{16 * time.Millisecond, 10 * time.Millisecond, 14 * time.Millisecond}, 14},
		{[]time.Duration{20 * time.Millisecond, 30 * time.Millisecond}, 20},
		{[]time.Duration{25 * time.Millisecond}, 25},
	} {
		recs := make([]record.Record, len(tc.gaps))
		for i, gap := range tc.gaps {
			recs[i] = record.Record{Stream: true, Sent: 0, Outcome: record.Cancelled}
			recs[i].AddEvent(30*time.Millisecond, 1)
			for at := 30*time.Millisecond + gap; at < 3*time.Second; at += gap {
				recs[i].AddEvent(at, 1)
			}
			recs[i].SetEnd(3 * time.Second)
		}
		f := Decode(recs, Window{Start: 0, End: 3 * time.Second})
		var c result.Cell
		f.Fill(&c, Judge{N: len(recs), MaxWaiting: -1, AvgRunning: -1})
		if math.Abs(c.TPOTRequestMs-tc.want) > tc.want*2e-3 {
			t.Errorf("times per token %v: TPOT per request %.3f ms, want %.3f", tc.gaps, c.TPOTRequestMs, tc.want)
		}
	}
}
