package report

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// dominates is the frontier's definition written out, the oracle the
// sorted sweep is held to: p is at least as good on both axes and better
// on one.
func dominates(p, q paretoPoint) bool {
	return p.PerRequest >= q.PerRequest && p.Total >= q.Total && (p.PerRequest > q.PerRequest || p.Total > q.Total)
}

func pts(xy ...float64) []paretoPoint {
	var l []paretoPoint
	for i := 0; i+1 < len(xy); i += 2 {
		l = append(l, paretoPoint{PerRequest: xy[i], Total: xy[i+1]})
	}
	return l
}

func onIndexes(on []bool) []int {
	var l []int
	for i, b := range on {
		if b {
			l = append(l, i)
		}
	}
	return l
}

// TestFrontier holds the sweep to frontiers known by hand.
func TestFrontier(t *testing.T) {
	for _, tt := range []struct {
		name string
		pts  []paretoPoint
		want []int
	}{
		{"no point", nil, nil},
		{"one point", pts(10, 10), []int{0}},
		{"one dominates the other", pts(10, 10, 20, 20), []int{1}},
		{"a staircase: each trades one for the other", pts(100, 100, 90, 360, 60, 480, 20, 500), []int{0, 1, 2, 3}},
		{"the same point twice: both stay", pts(50, 200, 50, 200, 40, 100), []int{0, 1}},
		{"same per-request, less total: dominated", pts(50, 200, 50, 150), []int{0}},
		{"same total, less per-request: dominated", pts(50, 200, 40, 200), []int{0}},
		{"same total, less per-request, given first", pts(40, 200, 50, 200), []int{1}},
		{"a point under the staircase", pts(100, 100, 60, 480, 70, 300, 80, 80), []int{0, 1, 2}},
		{"one concurrency level of a loop: more requests, less each, more in all", pts(162.5, 156.2, 135.4, 256.4, 112.5, 414.9, 88.4, 625.4), []int{0, 1, 2, 3}},
		{"queueing: more requests, less in all", pts(40, 160, 30, 120), []int{0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := onIndexes(frontier(tt.pts)); !slices.Equal(got, tt.want) {
				t.Errorf("frontier = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFrontierOracle holds the sweep to the definition on many point sets
// with ties (values from a small grid), from a fixed seed.
func TestFrontierOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 1))
	for range 2000 {
		n := rng.IntN(12)
		p := make([]paretoPoint, n)
		for i := range p {
			p[i] = paretoPoint{PerRequest: float64(rng.IntN(6)), Total: float64(rng.IntN(6))}
		}
		got := frontier(p)
		for i := range p {
			want := true
			for j := range p {
				if dominates(p[j], p[i]) {
					want = false
				}
			}
			if got[i] != want {
				t.Fatalf("point %d of %v: on the frontier %v, want %v", i, p, got[i], want)
			}
		}
	}
}

// TestMarkFrontiers: a run's own frontier is over its points alone, the
// frontier of all runs over every point.
func TestMarkFrontiers(t *testing.T) {
	p := []paretoPoint{
		{Run: 0, PerRequest: 100, Total: 100}, {Run: 0, PerRequest: 90, Total: 360}, {Run: 0, PerRequest: 60, Total: 480},
		{Run: 1, PerRequest: 80, Total: 80}, {Run: 1, PerRequest: 70, Total: 280}, {Run: 1, PerRequest: 50, Total: 600},
		{Run: 2, PerRequest: 95, Total: 95}, {Run: 2, PerRequest: 94, Total: 90},
	}
	markFrontiers(p)
	wantOwn := []bool{true, true, true, true, true, true, true, false}
	wantAll := []bool{true, true, true, false, false, true, false, false}
	for i := range p {
		if p[i].OwnFrontier != wantOwn[i] || p[i].OnFrontier != wantAll[i] {
			t.Errorf("point %d %+v: own %v all %v, want %v %v", i, p[i], p[i].OwnFrontier, p[i].OnFrontier, wantOwn[i], wantAll[i])
		}
	}
}

// TestMeetsSLO: a run measured with the same objectives is judged by its
// requests; otherwise the cell's histograms decide at the target share; a
// cell without either is not judged.
func TestMeetsSLO(t *testing.T) {
	spec, err := slo.Parse("ttft=100ms,target=90%")
	if err != nil {
		t.Fatal(err)
	}
	att := func(v float64) *result.SLO { return &result.SLO{Judged: 10, Good: int(v * 10), Attainment: &v} }
	measured := &result.Result{SLO: &result.SLORun{Spec: spec.Result()}}
	other := &result.Result{}
	// 10 requests: 9 within 100 ms, one at 500 ms; p90 is within.
	nine := histo.New()
	for range 9 {
		nine.RecordTTFT(50 * time.Millisecond)
	}
	nine.RecordTTFT(500 * time.Millisecond)
	// 10 requests: 8 within, 2 at 500 ms; p90 is not.
	eight := histo.New()
	for range 8 {
		eight.RecordTTFT(50 * time.Millisecond)
	}
	eight.RecordTTFT(500 * time.Millisecond)
	eight.RecordTTFT(500 * time.Millisecond)
	// 9 seen within, one censored after 2 s without a first token: p90
	// lies at the seen 50 ms... but p95 would not; at 90% the tenth is the
	// censored one, at least 2 s.
	censored := histo.New()
	for range 8 {
		censored.RecordTTFT(50 * time.Millisecond)
	}
	censored.RecordTTFTCensored(2 * time.Second)
	censored.RecordTTFTCensored(2 * time.Second)
	for _, tt := range []struct {
		name string
		r    *result.Result
		c    result.Cell
		ok   bool
		how  string
	}{
		{"same objectives, attainment at the target", measured, result.Cell{SLO: att(0.9), Histograms: eight}, true, verdictRequests},
		{"same objectives, attainment below", measured, result.Cell{SLO: att(0.8), Histograms: nine}, false, verdictRequests},
		{"other objectives: p90 within", other, result.Cell{Histograms: nine}, true, verdictPercentiles},
		{"other objectives: p90 beyond", other, result.Cell{Histograms: eight}, false, verdictPercentiles},
		{"p90 among the censored: not known to meet", other, result.Cell{Histograms: censored}, false, verdictPercentiles},
		{"no histograms, no verdict", other, result.Cell{}, false, verdictNone},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ok, how := meetsSLO(tt.r, &tt.c, spec)
			if ok != tt.ok || how != tt.how {
				t.Errorf("meetsSLO = %v, %s; want %v, %s", ok, how, tt.ok, tt.how)
			}
		})
	}
}
