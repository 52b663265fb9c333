package replay

import (
	"math"
	"slices"
	"testing"
	"time"
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
