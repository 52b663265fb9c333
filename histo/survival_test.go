package histo

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

func ms(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// latencies builds an events and a censored histogram from values in ms;
// a negative value is censored at its absolute value.
func latencies(vs ...int) (ev, cens *hdr.Histogram) {
	ev, cens = newLatency(), newLatency()
	for _, v := range vs {
		if v < 0 {
			_ = cens.RecordValue(ms(-v).Microseconds())
		} else {
			_ = ev.RecordValue(ms(v).Microseconds())
		}
	}
	return ev, cens
}

// TestQuantileByHand holds the estimator to Kaplan–Meier worked by hand.
//
// The main case: 10 requests, TTFTs seen 100, 200, 300, 500, 800 ms and
// censored (cut before a first token) at 250, 400, 600, 700, 900 ms.
//
//	t     at risk  seen  S(t)                         1 − S(t)
//	100   10       1     9/10          = 0.9          0.1
//	200    9       1     0.9 × 8/9     = 0.8          0.2
//	250    8       0c
//	300    7       1     0.8 × 6/7     = 0.685714     0.314286
//	400    6       0c
//	500    5       1     0.685714×4/5  = 0.548571     0.451429
//	600    4       0c
//	700    3       0c
//	800    2       1     0.548571×1/2  = 0.274286     0.725714
//	900    1       0c
//
// Nearest ranks of n = 10: p10 → 1 (level 0.1): 100 ms; p30 → 3 (0.3):
// 300 ms; p50 → 5 (0.5): 0.451 < 0.5 at 500, 0.726 at 800: 800 ms (the
// plain median of the seen TTFTs alone would be 300 ms); p40 → 4 (0.4):
// 500 ms; p80 → 8 (0.8):
// never reached, so at least the largest wait, 900 ms.
func TestQuantileByHand(t *testing.T) {
	main := []int{100, 200, 300, 500, 800, -250, -400, -600, -700, -900}
	for _, tc := range []struct {
		name    string
		vals    []int
		q       float64
		want    int
		atLeast bool
	}{
		{"p10", main, 0.10, 100, false},
		{"p30", main, 0.30, 300, false},
		{"p40: 0.451 at 500", main, 0.40, 500, false},
		{"p50 among the seen, above their plain median", main, 0.50, 800, false},
		{"p70", main, 0.70, 800, false},
		{"p80 among the censored", main, 0.80, 900, true},
		{"p99 among the censored", main, 0.99, 900, true},
		// A censored wait in the bucket of a seen one is at risk at it:
		// 4 requests, 100 seen, 100 censored, 200 seen, 300 seen:
		// S(100) = 3/4, S(200) = 3/4 × 1/2 = 3/8, S(300) = 0.
		{"ties: censored at risk at a seen value", []int{100, -100, 200, 300}, 0.50, 200, false},
		{"ties p25", []int{100, -100, 200, 300}, 0.25, 100, false},
		{"ties p99", []int{100, -100, 200, 300}, 0.99, 300, false},
		{"nothing seen", []int{-50, -70}, 0.5, 70, true},
		{"nothing censored", []int{10, 20, 30, 40}, 0.5, 20, false},
		// The overloaded cell's shape: the few seen all early, most cut.
		{"most cut", []int{100, 120, -1000, -1100, -1200}, 0.5, 1200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, cens := latencies(tc.vals...)
			d, atLeast, ok := Quantile(ev, cens, tc.q)
			if !ok {
				t.Fatal("not ok")
			}
			// Bucket values are the highest equivalent value: within 0.1%.
			if got, want := d, ms(tc.want); got < want || got > want+want/1000 || atLeast != tc.atLeast {
				t.Errorf("Quantile = %v at least %v, want %v at least %v", got, atLeast, want, tc.atLeast)
			}
		})
	}
	if _, _, ok := Quantile(nil, newLatency(), 0.5); ok {
		t.Error("empty histograms: ok")
	}
}

// TestQuantileUncensoredIsEmpirical: with nothing censored the estimator is
// the plain empirical quantile (nearest rank), as HdrHistogram reads it,
// and so is it with an empty censored histogram passed in any form.
func TestQuantileUncensoredIsEmpirical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(200)
		ev := newLatency()
		var vals []int64
		for range n {
			v := 1 + rng.Int64N(5_000_000)
			_ = ev.RecordValue(v)
			vals = append(vals, v)
		}
		slices.Sort(vals)
		for _, q := range []float64{0.01, 0.25, 0.5, 0.9, 0.99, 0.999, rng.Float64()} {
			rank := int(float64(n)*q + 0.5)
			rank = min(max(rank, 1), n)
			// The sample at the nearest rank, read as its bucket's highest
			// value (3 significant digits: at most 0.1% above it).
			want := time.Duration(vals[rank-1]) * time.Microsecond
			hdrWant, _ := Latency(ev, q)
			for _, cens := range []*hdr.Histogram{nil, newLatency()} {
				got, atLeast, ok := Quantile(ev, cens, q)
				if !ok || atLeast || got != hdrWant || got < want || got > want+want/1000+time.Microsecond {
					t.Fatalf("trial %d, n %d, q %v: %v (at least %v), want the empirical %v (HDR %v)", trial, n, q, got, atLeast, want, hdrWant)
				}
			}
		}
	}
}

// TestQuantileAtLeastNaive: the estimator is never below the quantile of
// every request with the censored counted at their wait (censoring only
// moves mass to later times), and never above the quantile of the seen ones
// with the censored counted as never seen.
func TestQuantileBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := 2 + rng.IntN(100)
		ev, cens, all := newLatency(), newLatency(), newLatency()
		for range n {
			v := 1 + rng.Int64N(1_000_000)
			_ = all.RecordValue(v)
			if rng.IntN(3) == 0 {
				_ = cens.RecordValue(v)
			} else {
				_ = ev.RecordValue(v)
			}
		}
		for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
			got, _, ok := Quantile(ev, cens, q)
			naive, _ := Latency(all, q)
			if !ok || got < naive {
				t.Fatalf("trial %d q %v: %v below the naive %v", trial, q, got, naive)
			}
		}
	}
}

func TestSetCensoredRoundTrip(t *testing.T) {
	s := New()
	s.RecordTTFT(ms(5))
	s.RecordTTFTCensored(ms(50))
	s.RecordTTFTCensored(ms(40))
	s.RecordTTFTCensored(ms(30))
	s.RecordE2ECensored(ms(70))
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var r Set
	if err := r.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if r.TTFTCensored.TotalCount() != 3 || r.E2ECensored.TotalCount() != 1 {
		t.Fatalf("censored lost: %s", b)
	}
	m := New()
	m.Merge(&r)
	if _, err := m.MergeExact(&r); err != nil {
		t.Fatal(err)
	}
	if d, atLeast, _ := m.TTFTAt(0.5); !atLeast || d < ms(50) {
		t.Errorf("merged median %v at least %v, want at least 50ms", d, atLeast)
	}
	// A set without censored requests writes no censored keys.
	b, _ = New().MarshalJSON()
	if strings.Contains(string(b), "censored") {
		t.Fatalf("%s", b)
	}
}
