package change

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// steady is a closed-loop cell of an engine that keeps its schedule as a
// busy machine lets it: streams requests, each gap the engine's gap plus
// timer jitter (normal, sd jitter; a timer never fires early), and now and
// then (stallEvery events on average) a stall of up to 50 ms that holds
// every stream, as a machine that gives the engine no CPU does. seed is
// the run: two seeds are two runs of the same engine.
func steady(gap time.Duration, streams int, seed uint64) result.Cell {
	const (
		jitter     = 300 * time.Microsecond
		stallEvery = 400
		window     = 30 * time.Second
	)
	rng := rand.New(rand.NewPCG(seed, 7))
	recs := make([]record.Record, streams)
	// One engine step makes every stream's next token.
	t := 40 * time.Millisecond
	for i := range recs {
		recs[i] = record.Record{Stream: true, Outcome: record.Cancelled, Blame: record.BlameClient}
	}
	for t < window+time.Second {
		for i := range recs {
			recs[i].AddEvent(t+time.Duration(rng.IntN(50))*time.Microsecond, 1)
		}
		step := gap + time.Duration(math.Abs(rng.NormFloat64())*float64(jitter))
		if rng.IntN(stallEvery) == 0 {
			step += time.Duration(rng.IntN(50)) * time.Millisecond
		}
		t += step
	}
	for i := range recs {
		recs[i].SetEnd(window)
	}
	f := cell.Decode(recs, cell.Window{Start: 0, End: window})
	c := result.Cell{Concurrency: streams, Status: result.Valid}
	f.Fill(&c, cell.Judge{N: streams, MaxWaiting: -1, AvgRunning: -1})
	return c
}

// TestSteadyEngine: on a steady engine's cells, a 6% slower engine is a
// change of tok/s and of time between tokens, either way round; another
// run of the same engine, and the same run, are not.
func TestSteadyEngine(t *testing.T) {
	const gap = 10 * time.Millisecond
	slower := gap * 106 / 100
	for _, tc := range []struct {
		name    string
		a, b    result.Cell
		changed bool
	}{
		{"the same run", steady(gap, 4, 1), steady(gap, 4, 1), false},
		{"a rerun", steady(gap, 4, 1), steady(gap, 4, 2), false},
		{"another rerun, 16 streams", steady(gap, 16, 3), steady(gap, 16, 4), false},
		{"6% slower", steady(gap, 4, 1), steady(slower, 4, 2), true},
		{"6% faster", steady(slower, 4, 5), steady(gap, 4, 6), true},
		{"6% slower, 16 streams", steady(gap, 16, 7), steady(slower, 16, 8), true},
	} {
		v := Of(&tc.a, &tc.b)
		for name, fig := range map[string]Verdict{"tok/s": v.TokS, "TBT": v.TBT} {
			t.Logf("%s: %s ×%.4f, interval ×%.4f to ×%.4f", tc.name, name, fig.Ratio, fig.Lo, fig.Hi)
			if !fig.Known || fig.Changed() != tc.changed {
				t.Errorf("%s: %s ×%.4f, interval ×%.4f to ×%.4f (known %v %s): changed %v, want %v",
					tc.name, name, fig.Ratio, fig.Lo, fig.Hi, fig.Known, fig.Why, fig.Changed(), tc.changed)
			}
			if fig.Ratio < fig.Lo || fig.Ratio > fig.Hi {
				t.Errorf("%s: %s ratio ×%.4f outside its interval ×%.4f to ×%.4f", tc.name, name, fig.Ratio, fig.Lo, fig.Hi)
			}
		}
	}
	// A verdict is a function of the two cells: the same twice.
	a, b := steady(gap, 4, 1), steady(slower, 4, 2)
	if Of(&a, &b) != Of(&a, &b) {
		t.Error("two verdicts on the same cells differ")
	}
}

// ttftCell is a cell whose n requests had TTFTs around median (lognormal,
// sd 0.3 of the log), the censored ones (a share of them, the longest
// waits cut early) without a first token.
func ttftCell(median time.Duration, n int, censored float64, seed uint64) result.Cell {
	rng := rand.New(rand.NewPCG(seed, 11))
	s := histo.New()
	for range n {
		d := time.Duration(float64(median) * math.Exp(0.3*rng.NormFloat64()))
		if rng.Float64() < censored && d > median {
			s.RecordTTFTCensored(median + (d-median)/2) // cut before its first token came
			continue
		}
		s.RecordTTFT(d)
	}
	ttft, atLeast, _ := s.TTFTAt(0.5)
	return result.Cell{Concurrency: 1, Status: result.Valid, Measured: true, TotalTokPerSec: 100, TBTms: 10,
		TTFTms: float64(ttft) / 1e6, TTFTAtLeast: atLeast, Histograms: s}
}

// TestTTFT: TTFT's interval resamples requests, the censored ones with
// them (Kaplan–Meier): a 10% change over 1,000 requests is found, another
// sample of the same TTFTs is not; a median that is only a lower bound,
// or too few requests, give no verdict.
func TestTTFT(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name           string
		a, b           result.Cell
		known, changed bool
	}{
		{"same TTFTs, another sample", ttftCell(200*ms, 1000, 0, 1), ttftCell(200*ms, 1000, 0, 2), true, false},
		{"10% slower", ttftCell(200*ms, 1000, 0, 1), ttftCell(220*ms, 1000, 0, 2), true, true},
		{"10% slower, some censored", ttftCell(200*ms, 1000, 0.3, 3), ttftCell(220*ms, 1000, 0.3, 4), true, true},
		{"same, some censored", ttftCell(200*ms, 1000, 0.3, 3), ttftCell(200*ms, 1000, 0.3, 5), true, false},
		{"too few requests", ttftCell(200*ms, MinRequests-1, 0, 1), ttftCell(220*ms, 400, 0, 2), false, false},
		{"a lower bound", ttftCell(200*ms, 1000, 0.99, 1), ttftCell(200*ms, 1000, 0, 2), false, false},
	} {
		v := Of(&tc.a, &tc.b).TTFT
		t.Logf("%s: ×%.4f, interval ×%.4f to ×%.4f (%s)", tc.name, v.Ratio, v.Lo, v.Hi, v.Why)
		if v.Known != tc.known || v.Changed() != tc.changed || !tc.known && v.Why == "" {
			t.Errorf("%s: known %v (%s) changed %v, want %v %v", tc.name, v.Known, v.Why, v.Changed(), tc.known, tc.changed)
		}
	}
}

// TestNoVerdict: what gives no interval says why.
func TestNoVerdict(t *testing.T) {
	good := steady(10*time.Millisecond, 4, 1)
	old := good
	old.SubWindows = nil // a document from before sub-windows
	merged := good
	merged.SubWindows = &result.SubWindows{TokS: good.SubWindows.TokS} // medians do not merge
	failed := result.Cell{Status: result.Failed}
	for _, tc := range []struct {
		name      string
		a, b      *result.Cell
		tok, tbt  bool
		ttftKnown bool
	}{
		{"an older document", &good, &old, false, false, false},
		{"a merged cell", &good, &merged, true, false, false},
		{"a failed cell", &good, &failed, false, false, false},
		{"a cell one run lacks", &good, nil, false, false, false},
	} {
		v := Of(tc.a, tc.b)
		if v.TokS.Known != tc.tok || v.TBT.Known != tc.tbt || v.TTFT.Known != tc.ttftKnown {
			t.Errorf("%s: known tok/s %v TBT %v TTFT %v, want %v %v %v", tc.name, v.TokS.Known, v.TBT.Known, v.TTFT.Known, tc.tok, tc.tbt, tc.ttftKnown)
		}
		for _, fig := range []Verdict{v.TokS, v.TBT, v.TTFT} {
			if !fig.Known && (fig.Why == "" || fig.Noise() || fig.Changed()) {
				t.Errorf("%s: an unknown verdict %+v says no reason, or a verdict", tc.name, fig)
			}
		}
	}
}

// BenchmarkOf: a comparison works out every cell's verdicts once; a
// 48-cell grid of 1,000-request cells should take well under a second.
func BenchmarkOf(b *testing.B) {
	x, y := ttftCell(200*time.Millisecond, 1000, 0.1, 1), ttftCell(210*time.Millisecond, 1000, 0.1, 2)
	x.SubWindows, y.SubWindows = steady(10*time.Millisecond, 4, 1).SubWindows, steady(10*time.Millisecond, 4, 2).SubWindows
	for b.Loop() {
		Of(&x, &y)
	}
}
