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
