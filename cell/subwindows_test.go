package cell

import (
	"math"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// TestSubWindows: four streams whose tokens of one engine step arrive
// together every 30 ms, in a 1 s window: a sub-window (100 ms) holds 3 or
// 4 such steps by arrival, but every sub-window makes the same tokens, so
// each one's tok/s is the cell's, and its median gap the gap. A second
// part (a shard) adds its tok/s and leaves no medians.
func TestSubWindows(t *testing.T) {
	const gap = 30 * time.Millisecond
	w := Window{Start: 0, End: time.Second}
	recs := make([]record.Record, 4)
	for i := range recs {
		recs[i] = record.Record{Stream: true, Outcome: record.Cancelled}
		for at := 10 * time.Millisecond; at < 2*time.Second; at += gap {
			recs[i].AddEvent(at, 1)
		}
		recs[i].SetEnd(2 * time.Second)
	}
	f := Decode(recs, w)
	if len(f.Sub.TokS) != SubWindowCount || len(f.Sub.TBT) != SubWindowCount {
		t.Fatalf("sub-windows %+v", f.Sub)
	}
	want := 4 / gap.Seconds()
	for i, v := range f.Sub.TokS {
		// Inside, exact. The window's edges: the first sub-window holds
		// gaps begun before the window, the last misses the gaps its
		// streams' next events (after the window) end: one step each, as
		// the whole window's count moves by one step at its edges.
		tol := want * 1e-3
		if i == 0 || i == SubWindowCount-1 {
			tol = 4/(w.Len().Seconds()/SubWindowCount) + 1e-6
		}
		if math.Abs(v-want) > tol {
			t.Errorf("sub-window %d: %.1f tok/s, want %.1f", i, v, want)
		}
		if i > 0 && f.Sub.TBT[i] != gap {
			t.Errorf("sub-window %d: median gap %v, want %v", i, f.Sub.TBT[i], gap)
		}
	}
	var sum float64
	for _, v := range f.Sub.TokS {
		sum += v / SubWindowCount
	}
	if math.Abs(sum-f.TotalTokPerSec) > 4/w.Len().Seconds() {
		t.Errorf("sub-windows' mean %.2f tok/s, the cell's %.2f", sum, f.TotalTokPerSec)
	}
	two := DecodeAll([]Part{{Records: recs, Window: w}, {Records: recs, Window: w}})
	if two.Sub.TBT != nil || math.Abs(two.Sub.TokS[5]-2*f.Sub.TokS[5]) > 1e-9 {
		t.Errorf("two parts: %+v, one part's tok/s %.1f", two.Sub, f.Sub.TokS[5])
	}
	if r := f.Sub.Result(); r == nil || len(r.TBTms) != SubWindowCount || r.TBTms[5] != 30 {
		t.Errorf("result %+v", r)
	}
}
