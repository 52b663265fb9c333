// Package change says whether a figure's change between two runs' cells
// is more than the cells' own noise (METHOD.md §9). It is the arithmetic a
// comparison's "~" mark and a CI gate share: result cells in, a ratio and
// its confidence interval out, no rendering.
//
// Each figure's interval is a bootstrap percentile interval (B. Efron and
// R. Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall 1993,
// ch. 13), over what in a cell varies independently enough to resample:
//
//   - Total tok/s and time between tokens: the cell's window cut into
//     equal consecutive sub-windows (result.SubWindows), each a batch
//     estimate of the figure, resampled as a whole. Consecutive tokens and
//     gaps are not independent (one request's gaps move together; a stall
//     holds every stream), so the tokens themselves are not resampled:
//     the sub-windows are, whole (non-overlapping blocks, E. Carlstein,
//     "The use of subseries values for estimating the variance of a general
//     statistic from a stationary sequence", Ann. Statist. 14, 1986; its
//     bootstrap, H. R. Künsch, "The jackknife and the bootstrap for general
//     stationary observations", Ann. Statist. 17, 1989). A replicate's
//     figure is the mean of the resampled sub-windows' tok/s, or of their
//     median gaps.
//   - TTFT: the requests sent in the window, each one TTFT or, for one
//     without a first token, a censored wait, resampled with replacement,
//     and each replicate's median read by Kaplan–Meier as the cell's is
//     (Efron, "Censored data and the bootstrap", J. Amer. Statist. Assoc.
//     76, 1981).
//
// Each run is resampled on its own (the runs are independent), a
// replicate's ratio is B's figure over A's, and the interval holds the
// middle Level of Replicates ratios. Resampling is seeded: the same two
// cells always give the same verdict.
package change

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
)

// The bootstrap's settings (METHOD §9).
const (
	// Replicates is how many resamples each interval is read from.
	Replicates = 2000
	// Level is the interval's coverage: the middle 95% of the replicates.
	Level = 0.95
	// MinRequests is the fewest requests a TTFT interval is read from:
	// below it a resample's median is little more than one value.
	MinRequests = 8
	// MinSubWindows is the fewest sub-windows with a figure (a median gap
	// needs a gap in the sub-window) an interval is read from.
	MinSubWindows = 5
	// MinEffect is the smallest change flagged: a ratio whose interval
	// reaches within 1% of 1 is noise. A run's sub-windows see the noise
	// within it; a rerun also meets the machine in another state (its
	// timers, its other load), which one run cannot see, and reruns of the
	// same cell on tokentap's fake engine moved by up to this much
	// (METHOD §9). A gate that wants another margin reads Lo and Hi.
	MinEffect = 0.01
)

// Verdict is one figure's change from cell A to cell B.
type Verdict struct {
	// Ratio is B's figure over A's, as the cells show them; NaN when
	// either has none.
	Ratio float64
	// Lo and Hi bound the ratio's bootstrap interval at Level.
	Lo, Hi float64
	// Known is false when there is no interval (Why says why): no ratio,
	// too few requests or sub-windows, a cell from a document without
	// sub-windows, a median that is only a lower bound.
	Known bool
	Why   string
}

// Noise reports whether the change is within the noise: the interval
// reaches within MinEffect of no change. False when not Known.
func (v Verdict) Noise() bool {
	return v.Known && v.Lo <= 1+MinEffect && v.Hi >= 1-MinEffect
}

// Changed reports whether the change is more than the noise: Known, and
// the whole interval more than MinEffect from no change.
func (v Verdict) Changed() bool { return v.Known && !v.Noise() }

// Cell is the verdicts on one cell's figures.
type Cell struct {
	TokS, TTFT, TBT Verdict
}

// Of compares cell a (run A) with cell b (run B). Either may be nil or show
// no figures (Over capacity, Failed): every verdict is then not Known.
func Of(a, b *result.Cell) Cell {
	if a == nil || b == nil || !a.ShowsFigures() || !b.ShowsFigures() {
		none := Verdict{Ratio: math.NaN(), Why: "a cell shows no figures"}
		return Cell{none, none, none}
	}
	return Cell{
		TokS: tokS(a, b),
		TTFT: ttft(a, b),
		TBT:  tbt(a, b),
	}
}

// ratio is b/a, NaN when either is not a positive figure.
func ratio(a, b float64) float64 {
	if !(a > 0) || !(b > 0) {
		return math.NaN()
	}
	return b / a
}

func tokS(a, b *result.Cell) Verdict {
	v := Verdict{Ratio: ratio(a.TotalTokPerSec, b.TotalTokPerSec)}
	if math.IsNaN(v.Ratio) {
		v.Why = "no tok/s"
		return v
	}
	if a.SubWindows == nil || b.SubWindows == nil {
		v.Why = "a run's document has no sub-windows"
		return v
	}
	return batches(v, a.SubWindows.TokS, b.SubWindows.TokS, false, 1)
}

func tbt(a, b *result.Cell) Verdict {
	v := Verdict{Ratio: ratio(a.TBTms, b.TBTms)}
	if math.IsNaN(v.Ratio) {
		v.Why = "no time between tokens"
		return v
	}
	if a.SubWindows == nil || b.SubWindows == nil || a.SubWindows.TBTms == nil || b.SubWindows.TBTms == nil {
		v.Why = "a run has no sub-window medians of time between tokens (an older document, or a merged cell)"
		return v
	}
	return batches(v, a.SubWindows.TBTms, b.SubWindows.TBTms, true, 2)
}

// batches fills v's interval from A's and B's sub-window figures: each
// replicate resamples each run's sub-windows with replacement and takes
// the ratio of their means. positive: only sub-windows with a figure
// (above 0) count (a median gap); otherwise every one does (a sub-window
// without a token is 0 tok/s).
func batches(v Verdict, a, b []float64, positive bool, stream uint64) Verdict {
	if positive {
		a, b = above0(a), above0(b)
	}
	if len(a) < MinSubWindows || len(b) < MinSubWindows {
		v.Why = "too few sub-windows with a figure"
		return v
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	reps := make([]float64, 0, Replicates)
	for range Replicates {
		ma, mb := resampledMean(rng, a), resampledMean(rng, b)
		if r := ratio(ma, mb); !math.IsNaN(r) {
			reps = append(reps, r)
		}
	}
	// The replicates scatter about the ratio of the sub-windows' means,
	// which can differ a little from the cells' figures' (a gap that
	// straddles the window's start; a median of medians): the interval is
	// moved by the figures' ratio over it, so it is about the figure shown.
	if hat := ratio(mean(a), mean(b)); !math.IsNaN(hat) {
		for i := range reps {
			reps[i] *= v.Ratio / hat
		}
	}
	return interval(v, reps)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// seed makes every resampling the same: a verdict is a function of the
// two cells alone.
const seed = 0x746f6b656e746170 // "tokentap"

func above0(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

func resampledMean(rng *rand.Rand, v []float64) float64 {
	s := 0.0
	for range v {
		s += v[rng.IntN(len(v))]
	}
	return s / float64(len(v))
}

// interval sets v's Lo and Hi to the middle Level of the replicates'
// ratios; not Known when too few replicates had one (a resample of a
// cell's sub-windows that were nearly all empty).
func interval(v Verdict, reps []float64) Verdict {
	if len(reps) < Replicates/2 {
		v.Why = "too few resamples had a figure"
		return v
	}
	slices.Sort(reps)
	tail := (1 - Level) / 2
	lo := int(math.Floor(tail * float64(len(reps))))
	hi := int(math.Ceil((1-tail)*float64(len(reps)))) - 1
	v.Lo, v.Hi, v.Known = reps[lo], reps[min(hi, len(reps)-1)], true
	return v
}

func ttft(a, b *result.Cell) Verdict {
	v := Verdict{Ratio: ratio(a.TTFTms, b.TTFTms)}
	switch {
	case math.IsNaN(v.Ratio):
		v.Why = "no TTFT"
		return v
	case a.TTFTAtLeast || b.TTFTAtLeast:
		v.Why = "a median TTFT is only a lower bound (most requests had no first token)"
		return v
	case a.Histograms == nil || b.Histograms == nil:
		v.Why = "a run's document has no histograms"
		return v
	}
	sa := newRequests(histo.Steps(a.Histograms.TTFT, a.Histograms.TTFTCensored))
	sb := newRequests(histo.Steps(b.Histograms.TTFT, b.Histograms.TTFTCensored))
	if sa.n < MinRequests || sb.n < MinRequests {
		v.Why = "too few requests"
		return v
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	reps := make([]float64, 0, Replicates)
	for range Replicates {
		ma, mb := sa.resampledMedian(rng), sb.resampledMedian(rng)
		if r := ratio(ma, mb); !math.IsNaN(r) {
			reps = append(reps, r)
		}
	}
	return interval(v, reps)
}

// requests are a cell's requests as Kaplan–Meier steps, ready to resample.
type requests struct {
	steps []histo.Step
	// of holds one entry per request: 2i for one seen at step i, 2i+1 for
	// one censored there, so a draw is one index.
	of   []int32
	n    int64
	draw []histo.Step
}

func newRequests(steps []histo.Step) *requests {
	r := &requests{steps: steps, draw: make([]histo.Step, len(steps))}
	for i, st := range steps {
		r.n += st.Seen + st.Censored
		for range st.Seen {
			r.of = append(r.of, int32(2*i))
		}
		for range st.Censored {
			r.of = append(r.of, int32(2*i+1))
		}
	}
	return r
}

// resampledMedian draws n requests with replacement and reads their
// median by Kaplan–Meier; a median that falls among the censored counts at
// its bound, as the cell's own would show it.
func (r *requests) resampledMedian(rng *rand.Rand) float64 {
	for i, st := range r.steps {
		r.draw[i] = histo.Step{Value: st.Value}
	}
	for range r.n {
		k := r.of[rng.IntN(len(r.of))]
		if k%2 == 0 {
			r.draw[k/2].Seen++
		} else {
			r.draw[k/2].Censored++
		}
	}
	v, _ := histo.KaplanMeier(r.draw, 0.5)
	return float64(v)
}
