package report

import (
	"cmp"
	"math"
	"slices"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// The trade-off between how fast each request decodes (per-request tok/s,
// interactivity) and how much the engine outputs in all (total tok/s,
// throughput): every Valid decode cell of a run is one point, and a point
// is on the Pareto frontier when no other point is at least as good on
// both and better on one (METHOD §12). Both are maximised.

// paretoPoint is one Valid decode cell as a point of the trade-off.
type paretoPoint struct {
	Run        int // index of the run in the board
	Context    int
	Col        result.Column
	PerRequest float64 // per-request tok/s (x)
	Total      float64 // total tok/s (y)
	TTFTms     float64
	TBTms      float64
	// OwnFrontier: no point of the same run dominates it; OnFrontier: no
	// point of any run on the frontier does.
	OwnFrontier, OnFrontier bool
}

// frontier marks which of pts no other point dominates, in O(n log n):
// sorted by per-request tok/s falling (total falling among equals), a
// point is on the frontier when its total exceeds every total before it,
// or equals the best so far at the same per-request tok/s.
func frontier(pts []paretoPoint) []bool {
	idx := make([]int, len(pts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(pts[b].PerRequest, pts[a].PerRequest); c != 0 {
			return c
		}
		return cmp.Compare(pts[b].Total, pts[a].Total)
	})
	on := make([]bool, len(pts))
	best := math.Inf(-1) // the highest total of any point so far
	bestX := math.NaN()  // the per-request tok/s of the first point that had it
	for _, i := range idx {
		p := pts[i]
		switch {
		case p.Total > best:
			on[i] = true
			best, bestX = p.Total, p.PerRequest
		case p.Total == best && p.PerRequest == bestX:
			on[i] = true // the same point twice: neither dominates
		}
	}
	return on
}

// markFrontiers sets OwnFrontier (within each run) and OnFrontier (over
// all runs) on the points of one context.
func markFrontiers(pts []paretoPoint) {
	all := frontier(pts)
	byRun := map[int][]int{}
	for i, p := range pts {
		pts[i].OnFrontier = all[i]
		byRun[p.Run] = append(byRun[p.Run], i)
	}
	for _, is := range byRun {
		sub := make([]paretoPoint, len(is))
		for k, i := range is {
			sub[k] = pts[i]
		}
		for k, on := range frontier(sub) {
			pts[is[k]].OwnFrontier = on
		}
	}
}

// How a cell was judged against the report's --slo.
const (
	verdictRequests    = "requests"    // the run measured the same objectives: each request was judged
	verdictPercentiles = "percentiles" // read off the cell's histograms at the target share
	verdictNone        = "none"        // the cell kept no histograms and the run no verdict
)

// meetsSLO judges cell c of run r against spec (METHOD §12). A run that
// was measured with the same objectives judged each request: the cell
// meets them when its attainment reaches the target. Otherwise the cell's
// histograms decide: at target share q, its TTFT and end to end at
// percentile q (over every request sent, the censored included), its time
// between tokens at percentile q (of every gap), and its per-request rate
// at percentile 1 − q (the mean time per output token of the slowest
// requests kept) must each meet their objective.
func meetsSLO(r *result.Result, c *result.Cell, spec slo.Spec) (ok bool, how string) {
	if r.SLO != nil && sameObjectives(slo.FromResult(r.SLO.Spec), spec) && c.SLO != nil && c.SLO.Attainment != nil {
		return *c.SLO.Attainment >= spec.Target-1e-9, verdictRequests
	}
	h := c.Histograms
	if h == nil {
		return false, verdictNone
	}
	q := spec.Target
	within := func(hist, censored *hdr.Histogram, lim time.Duration) bool {
		// A percentile among the censored is a lower bound: not known to
		// meet the objective.
		v, atLeast, known := histo.Quantile(hist, censored, q)
		return known && !atLeast && v <= lim
	}
	if spec.TTFT > 0 && !within(h.TTFT, h.TTFTCensored, spec.TTFT) {
		return false, verdictPercentiles
	}
	if spec.E2E > 0 && !within(h.E2E, h.E2ECensored, spec.E2E) {
		return false, verdictPercentiles
	}
	if spec.TBT > 0 && !within(h.TBT, nil, spec.TBT) {
		return false, verdictPercentiles
	}
	if spec.TPOT > 0 {
		rate, known := h.RateAt(1 - q)
		if !known || rate <= 0 || time.Duration(float64(time.Second)/rate) > spec.TPOT {
			return false, verdictPercentiles
		}
	}
	return true, verdictPercentiles
}

// sameObjectives reports whether a and b set the same objectives and
// target.
func sameObjectives(a, b slo.Spec) bool {
	return a.TTFT == b.TTFT && a.TBT == b.TBT && a.TPOT == b.TPOT && a.E2E == b.E2E && math.Abs(a.Target-b.Target) < 1e-9
}
