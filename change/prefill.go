package change

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/tokentap/tokentap/result"
)

// MinRepeats is the fewest measured repeats a prefill row's interval is
// read from on each side: the default (METHOD §3). With fewer, a
// resample's median is one or two values and says nothing of the spread.
const MinRepeats = 3

// Prefill is the verdicts on one prefill row's figures.
type Prefill struct {
	TokS, TTFT Verdict
}

// OfPrefill compares prefill row a (run A) with row b (run B), each
// figure against the rows' repeats (METHOD §9): each replicate resamples
// each run's measured repeats with replacement and takes the ratio of
// their medians, as the rows' figures are medians. With three repeats a
// side the interval comes to about the ratio of the repeats' ranges (a
// resample's median is its run's lowest or highest repeat a quarter of the
// time each), so a change is found where the two runs' repeats do not
// overlap. Either may be nil or show no figures: no verdict is Known.
func OfPrefill(a, b *result.Prefill) Prefill {
	if a == nil || b == nil || !a.Status.ShowsFigures() || !b.Status.ShowsFigures() {
		none := Verdict{Ratio: math.NaN(), Why: "a prefill row shows no figures"}
		return Prefill{none, none}
	}
	tokS := Verdict{Ratio: ratio(a.TokPerSec, b.TokPerSec)}
	ttft := Verdict{Ratio: ratio(a.TTFTms, b.TTFTms)}
	return Prefill{
		TokS: repeats(tokS, a.RepeatTokS(), b.RepeatTokS(), 4),
		TTFT: repeats(ttft, repeatTTFT(a), repeatTTFT(b), 5),
	}
}

// repeatTTFT are a row's measured repeats' TTFTs.
func repeatTTFT(p *result.Prefill) []float64 {
	var out []float64
	for _, e := range p.Each {
		if e.Measured() {
			out = append(out, e.TTFTms)
		}
	}
	return out
}

// repeats fills v's interval from A's and B's repeats' figures.
func repeats(v Verdict, a, b []float64, stream uint64) Verdict {
	switch {
	case math.IsNaN(v.Ratio):
		v.Why = "no figure"
		return v
	case len(a) < MinRepeats || len(b) < MinRepeats:
		v.Why = "too few measured repeats (a row from a run with --prefill-repeats below 3, or from before repeats)"
		return v
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	da, db := make([]float64, len(a)), make([]float64, len(b))
	reps := make([]float64, 0, Replicates)
	for range Replicates {
		if r := ratio(resampledMedian(rng, a, da), resampledMedian(rng, b, db)); !math.IsNaN(r) {
			reps = append(reps, r)
		}
	}
	return interval(v, reps)
}

// resampledMedian draws len(v) values of v with replacement into draw and
// returns their median (the mean of the middle two for an even count).
func resampledMedian(rng *rand.Rand, v, draw []float64) float64 {
	for i := range draw {
		draw[i] = v[rng.IntN(len(v))]
	}
	slices.Sort(draw)
	m := len(draw) / 2
	if len(draw)%2 == 1 {
		return draw[m]
	}
	return (draw[m-1] + draw[m]) / 2
}
