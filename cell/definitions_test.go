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
