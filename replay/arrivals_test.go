package replay

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokentap/tokentap/scenarios"
)

// TestArrivalTimesGaps is a statistical test with fixed seeds: the gaps of
// ArrivalTimes have the mean the rate asks for and the coefficient of
// variation of a gamma distribution of shape B (1/√B), the count is the
// rate's, and the times lie in the window in order. With 20,000 arrivals
// the sample CV's error is a few hundredths; the tolerance is 0.1.
func TestArrivalTimesGaps(t *testing.T) {
	const rate, w = 100.0, 200 * time.Second // 20,000 arrivals
	tests := []struct {
		burstiness float64
		wantCV     float64
	}{
		{0, 1}, // 0: Poisson
		{1, 1},
		{0.25, 2},
		{0.5, math.Sqrt2},
		{4, 0.5},
	}
	for _, tt := range tests {
		for _, seed := range []uint64{1, 2, 3} {
			at := ArrivalTimes(rate, tt.burstiness, w, seed)
			if len(at) != 20000 {
				t.Fatalf("B=%v: %d arrivals, want 20000", tt.burstiness, len(at))
			}
			if !slices.IsSorted(at) || at[0] < 0 || at[len(at)-1] >= w {
				t.Fatalf("B=%v: arrivals not sorted within the window", tt.burstiness)
			}
			mean, cv := gapStats(at)
			if math.Abs(mean-1/rate) > 0.02/rate {
				t.Errorf("B=%v seed %d: mean gap %.5f s, want %.5f", tt.burstiness, seed, mean, 1/rate)
			}
			if math.Abs(cv-tt.wantCV) > 0.1 {
				t.Errorf("B=%v seed %d: gaps' coefficient of variation %.3f, want %.3f", tt.burstiness, seed, cv, tt.wantCV)
			}
		}
	}
}

// TestArrivalTimesDeterministic: one seed, one schedule; B = 1 is
// PoissonArrivals's schedule, unchanged.
func TestArrivalTimesDeterministic(t *testing.T) {
	w := 10 * time.Second
	if !slices.Equal(ArrivalTimes(5, 0.3, w, 9), ArrivalTimes(5, 0.3, w, 9)) {
		t.Error("one seed gave two schedules")
	}
	if slices.Equal(ArrivalTimes(5, 0.3, w, 9), ArrivalTimes(5, 0.3, w, 10)) {
		t.Error("two seeds gave one schedule")
	}
	if !slices.Equal(ArrivalTimes(5, 1, w, 9), PoissonArrivals(5, w, 9)) {
		t.Error("B = 1 is not the Poisson schedule")
	}
	if ArrivalTimes(0.01, 0.5, w, 1) != nil {
		t.Error("a rate that rounds to no request gave arrivals")
	}
}

func gapStats(at []time.Duration) (mean, cv float64) {
	g := make([]float64, len(at)-1)
	for i := range g {
		g[i] = (at[i+1] - at[i]).Seconds()
		mean += g[i]
	}
	mean /= float64(len(g))
	var ss float64
	for _, x := range g {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(g))) / mean
}

// TestArrivalTimesEnds is a statistical test with fixed seeds that the
// window's ends are placed as arrivals are: over 4,000 schedules of 23
// arrivals (a 6 s window at 4 requests/s less one), the gap from the last
// arrival to the window's end and from its start to the first arrival
// have the mean of every other gap, w/(n+1), and as often as an inner gap
// are shorter than a hundredth of it: no bunching against either end (n
// gaps scaled to fill the window would put the last arrival on its end
// every time). With 4,000 draws the standard error of the mean is about
// 0.03 of it at B = 0.25; the tolerance is 0.1; of the fraction about
// 0.006; the tolerance 0.03.
func TestArrivalTimesEnds(t *testing.T) {
	const n, seeds = 23, 4000
	w := 6 * time.Second
	for _, b := range []float64{0.25, 1, 4} {
		mean := w.Seconds() / (n + 1)
		var first, last, inner float64
		var firstShort, lastShort, innerShort, inners int
		for seed := uint64(0); seed < seeds; seed++ {
			at := ArrivalTimes(n/w.Seconds(), b, w, seed)
			if len(at) != n {
				t.Fatalf("B=%v seed %d: %d arrivals, want %d", b, seed, len(at), n)
			}
			f, l := at[0].Seconds(), (w - at[n-1]).Seconds()
			first += f
			last += l
			firstShort += btoi(f < mean/100)
			lastShort += btoi(l < mean/100)
			for i := 1; i < n; i++ {
				g := (at[i] - at[i-1]).Seconds()
				inner += g
				innerShort += btoi(g < mean/100)
				inners++
			}
		}
		first, last, inner = first/seeds/mean, last/seeds/mean, inner/float64(inners)/mean
		fs, ls, is := float64(firstShort)/seeds, float64(lastShort)/seeds, float64(innerShort)/float64(inners)
		t.Logf("B=%v: mean first %.3f, inner %.3f, last %.3f of w/(n+1); shorter than 1%%: first %.3f, inner %.3f, last %.3f", b, first, inner, last, fs, is, ls)
		for _, m := range []float64{first, last, inner} {
			if math.Abs(m-1) > 0.1 {
				t.Errorf("B=%v: mean gaps first %.3f, inner %.3f, last %.3f of w/(n+1), want each 1", b, first, inner, last)
				break
			}
		}
		if math.Abs(ls-is) > 0.03 || math.Abs(fs-is) > 0.03 {
			t.Errorf("B=%v: gaps shorter than 1%% of w/(n+1): first %.3f, last %.3f of schedules, inner %.3f of gaps: an end bunches", b, fs, ls, is)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestGammaDistribution holds gamma's draws to the gamma distribution's
// own CDF (the regularized lower incomplete gamma, by its series), not to
// moments alone: a one-sample Kolmogorov–Smirnov distance over 50,000
// draws with fixed seeds, below its 0.1% critical value 1.95/√n. Small
// shapes matter most: their mass near 0 is what makes arrivals bursty.
func TestGammaDistribution(t *testing.T) {
	const n = 50000
	for _, shape := range []float64{0.25, 0.5, 1, 2.5} {
		rng := rand.New(rand.NewPCG(uint64(shape*1000), 5))
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = gamma(rng, shape)
		}
		slices.Sort(xs)
		d := 0.0
		for i, x := range xs {
			f := gammaCDF(shape, x)
			d = max(d, math.Abs(f-float64(i)/n), math.Abs(float64(i+1)/n-f))
		}
		t.Logf("shape %v: Kolmogorov–Smirnov distance %.4f", shape, d)
		if crit := 1.95 / math.Sqrt(n); d > crit {
			t.Errorf("shape %v: Kolmogorov–Smirnov distance %.4f from Gamma(%v, 1), want below %.4f", shape, d, shape, crit)
		}
	}
}

// gammaCDF is P(a, x), the regularized lower incomplete gamma function:
// e^−x x^a Σₖ xᵏ / Γ(a+k+1).
func gammaCDF(a, x float64) float64 {
	if x <= 0 {
		return 0
	}
	lg, _ := math.Lgamma(a + 1)
	term := math.Exp(a*math.Log(x) - x - lg)
	sum := term
	for k := 1; k < 1000 && term > sum*1e-16; k++ {
		term *= x / (a + float64(k))
		sum += term
	}
	return min(sum, 1)
}

// TestArrivalTimesSampleCV: scaling the n + 1 gamma variates to fill the
// window does not shrink the gaps' sample coefficient of variation. The
// CV is scale-free, so the inner gaps of a schedule have the CV of n − 1
// independent gamma variates; over 20,000 schedules of 24 arrivals at
// B = 0.25 (the workloads acceptance check's 4 requests/s for 6 s) the
// two distributions of the sample CV agree (two-sample Kolmogorov–Smirnov
// distance below its 0.1% critical value). Both lie well below 1/√B = 2
// (median about 1.70, one schedule in about 12 below 1.3): the sample CV
// of a few heavy-tailed gaps is biased low, which is the estimator's, not
// the schedule's. The log prints the quantiles.
func TestArrivalTimesSampleCV(t *testing.T) {
	const schedules, n, b = 20000, 24, 0.25
	w := 6 * time.Second
	got := make([]float64, schedules)
	iid := make([]float64, schedules)
	rng := rand.New(rand.NewPCG(31, 41))
	for s := range got {
		at := ArrivalTimes(n/w.Seconds(), b, w, uint64(s))
		if len(at) != n {
			t.Fatalf("seed %d: %d arrivals, want %d", s, len(at), n)
		}
		_, got[s] = gapStats(at)
		ref := make([]time.Duration, n)
		sum := 0.0
		for i := range ref {
			sum += gamma(rng, b)
			ref[i] = time.Duration(sum * float64(time.Second))
		}
		_, iid[s] = gapStats(ref)
	}
	slices.Sort(got)
	slices.Sort(iid)
	d, i, j := 0.0, 0, 0
	for i < schedules && j < schedules {
		if got[i] <= iid[j] {
			i++
		} else {
			j++
		}
		d = max(d, math.Abs(float64(i-j))/schedules)
	}
	below := func(x []float64, v float64) float64 {
		k, _ := slices.BinarySearch(x, v)
		return float64(k) / float64(len(x))
	}
	t.Logf("sample CV of %d gaps at B=%v: schedules q05 %.3f q50 %.3f q95 %.3f, P(≤1.3) %.3f; independent gammas q05 %.3f q50 %.3f q95 %.3f, P(≤1.3) %.3f",
		n-1, b, got[schedules/20], got[schedules/2], got[schedules*19/20], below(got, 1.3), iid[schedules/20], iid[schedules/2], iid[schedules*19/20], below(iid, 1.3))
	if crit := 1.95 * math.Sqrt(2.0/schedules); d > crit {
		t.Errorf("sample CVs of schedules and of independent gammas differ: Kolmogorov–Smirnov distance %.4f, want below %.4f", d, crit)
	}
}

// TestArrivalTimesAtTheLeastBurstiness: the smallest shape taken
// (scenarios.MinBurstiness) still gives a schedule of finite, ordered
// times inside the window, for many seeds.
func TestArrivalTimesAtTheLeastBurstiness(t *testing.T) {
	const w = 6 * time.Second
	for seed := uint64(0); seed < 200; seed++ {
		at := ArrivalTimes(4, scenarios.MinBurstiness, w, seed)
		if len(at) != 24 {
			t.Fatalf("seed %d: %d times, want 24", seed, len(at))
		}
		for i, a := range at {
			if a < 0 || a > w || (i > 0 && a < at[i-1]) {
				t.Fatalf("seed %d: time %d is %v (%v before it)", seed, i, a, at[max(i-1, 0)])
			}
		}
	}
}
