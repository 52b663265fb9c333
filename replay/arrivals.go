package replay

import (
	"math"
	"math/rand/v2"
	"time"
)

// ArrivalTimes returns the arrival offsets of round(rate × w) requests over
// window w whose gaps are gamma-distributed with shape burstiness and mean
// 1/rate, as vllm bench serve --burstiness draws them (vllm/benchmarks/
// serve.py get_request: gamma with shape B and scale 1/(rate × B)): B = 1
// is Poisson (exponential gaps), B < 1 burstier (gaps' coefficient of
// variation 1/√B), B > 1 steadier. 0 means 1.
//
// As PoissonArrivals (which B = 1 returns, unchanged), the count is the one
// asked for and the arrivals fill the window: n + 1 gamma variates g₁…gₙ₊₁
// are drawn, the gaps to the first arrival, between arrivals, and from the
// last to the window's end, and arrival i is at w·(g₁+…+gᵢ)/(g₁+…+gₙ₊₁).
// The window's ends are thus placed as arrivals would be, and the last
// arrival is as far from the window's end as any two arrivals are apart
// (for B = 1 these are exactly uniform order statistics: a Poisson process
// given its count). vLLM rescales n gaps to sum to n/rate instead, so its
// last request is always at the span's end: with a window that closes
// there, that request would fall at its edge. For B ≠ 1 the gaps are a
// gamma process's scaled by one common factor, which for the counts of a
// measurement window (tens and more) keeps their distribution's shape
// (METHOD §3). Small shapes draw many near-zero gaps, so an arrival in the
// window's last instant is common (B = 0.25: about one window in five
// within a millisecond of its end); the open loop sends it even when its
// timer wakes just after the end (Open). seed makes the schedule
// reproducible.
func ArrivalTimes(rate, burstiness float64, w time.Duration, seed uint64) []time.Duration {
	if burstiness <= 0 || burstiness == 1 {
		return PoissonArrivals(rate, w, seed)
	}
	n := int(math.Round(rate * w.Seconds()))
	if n < 1 || w <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	gaps := make([]float64, n+1)
	total := 0.0
	for i := range gaps {
		gaps[i] = gamma(rng, burstiness)
		total += gaps[i]
	}
	at := make([]time.Duration, n)
	sum := 0.0
	for i := range at {
		sum += gaps[i]
		at[i] = time.Duration(sum / total * float64(w))
		if at[i] >= w {
			at[i] = w - 1
		}
	}
	return at
}

// gamma draws a Gamma(shape, 1) variate: Marsaglia and Tsang's method
// ("A simple method for generating gamma variables", ACM TOMS 26(3),
// 2000), with their boost U^(1/shape) for shapes below 1.
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || (u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v))) {
			return d * v
		}
	}
}
