// Package sweep reads a sweep's rows (matrix --sweep, METHOD §3 sweeps)
// off their cells: each row's latency curve against the achieved request
// rate, where the curve bends (Knee), and the highest rate that met the
// run's SLOs (SLO). Pure: a result document in, its Sweeps out.
package sweep

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// The knee's thresholds (METHOD §3, sweeps).
const (
	// MinPoints is the fewest points a curve needs for a knee: its two
	// ends and two between, so the bend is not an end.
	MinPoints = 4
	// MinGrowth is the least the latency must rise over the sweep (its
	// last point over its first) for the curve to bend at all.
	MinGrowth = 1.5
	// MinDeparture is the least distance below the line from the first
	// point to the last, as a share of the latency's rise, that makes a
	// bend rather than a straight line's noise.
	MinDeparture = 0.1
)

// Rows are the sweep rows of res, one per context with a cell, in
// context order; nil when the run is not a sweep.
func Rows(res *result.Result) []result.SweepRow {
	if !res.Settings.Sweep {
		return nil
	}
	tail := 0.0
	for _, p := range res.Settings.Percentiles {
		if p > tail && p < 100 {
			tail = p
		}
	}
	var contexts []int
	for _, c := range res.Decode {
		if !slices.Contains(contexts, c.Context) {
			contexts = append(contexts, c.Context)
		}
	}
	slices.Sort(contexts)
	var out []result.SweepRow
	for _, ctx := range contexts {
		var cells []result.Cell
		for _, c := range res.Decode {
			if c.Context == ctx {
				cells = append(cells, c)
			}
		}
		row := Row(cells, tail)
		row.Context = ctx
		if res.SLO != nil {
			row.SLO = SLO(cells, row.Points, res.SLO.Spec.Target)
		}
		out = append(out, row)
	}
	return out
}

// Row is one context's curve and knees from its cells: the cells that
// show figures, by achieved rate, read at the median and percentile tail.
func Row(cells []result.Cell, tail float64) result.SweepRow {
	row := result.SweepRow{Tail: tail, Points: []result.SweepPoint{}}
	var left []string
	for i := range cells {
		c := &cells[i]
		if !c.ShowsFigures() {
			row.LeftOut++
			left = append(left, fmt.Sprintf("%s %s", c.Column().Label(), c.Status.Label()))
			continue
		}
		row.Points = append(row.Points, point(c, tail))
	}
	if len(left) > 0 {
		row.LeftOutWhy = english.List(left)
	}
	slices.SortStableFunc(row.Points, func(a, b result.SweepPoint) int {
		return cmpRate(a.AchievedRate, b.AchievedRate)
	})
	row.Knees = []result.Knee{
		Knee(result.KneeTTFT, row.Points),
		Knee(result.KneeTBT, row.Points),
	}
	return row
}

func cmpRate(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// point is cell c on the curve.
func point(c *result.Cell, tail float64) result.SweepPoint {
	p := result.SweepPoint{Concurrency: c.Concurrency, Rate: c.Rate, AchievedRate: c.AchievedRate,
		TTFTms: c.TTFTms, TTFTAtLeast: c.TTFTAtLeast, TTFTKind: c.TTFTOf(), TBTms: c.TBTms}
	if c.Percentiles != nil && tail > 0 {
		if v, ok := c.Percentiles.TTFTms.Value(tail); ok {
			p.TTFTTailMs = v
		}
		if v, ok := c.Percentiles.TBTms.Value(tail); ok {
			p.TBTTailMs = v
		}
	}
	if c.SLO != nil && c.SLO.Attainment != nil {
		a := *c.SLO.Attainment
		p.Attainment = &a
	}
	return p
}

// Curve is the indexes in points of metric's curve: the points with a
// latency of that metric, but the throughput's closed loop, and, for
// TTFT, of the rate cells' TTFT kind (a closed cell's warmed prompts leave
// prefill out of its TTFT, a rate cell's cold ones do not: one curve
// holds one kind). The throughput's closed loop keeps its N requests in
// flight at whatever rate they end: at its rate an open loop has fewer in
// flight and shorter latencies, so it is another curve's point (it stands
// beside this one in reports). One request at a time is both a closed
// loop of 1 and an open loop's lightest load, and stays.
func Curve(metric string, points []result.SweepPoint) []int {
	kind := ""
	if metric == result.KneeTTFT {
		for _, p := range points {
			if p.Rate > 0 {
				kind = p.TTFTKind
				break
			}
		}
	}
	var idx []int
	for i, p := range points {
		switch {
		case p.Concurrency > 1:
		case metric == result.KneeTBT && p.TBTms > 0:
			idx = append(idx, i)
		case metric == result.KneeTTFT && p.TTFTms > 0 && (kind == "" || p.TTFTKind == kind):
			idx = append(idx, i)
		}
	}
	return idx
}

// latency is point p's median of metric.
func latency(metric string, p result.SweepPoint) float64 {
	if metric == result.KneeTTFT {
		return p.TTFTms
	}
	return p.TBTms
}

// Knee is where metric's curve over points bends (METHOD §3, sweeps):
// with the curve's points (x achieved rate, y median latency, by rate),
// both axes scaled so the first point is (0, 0) and the last (1, 1), the
// interior point with the largest x − y, the farthest below the line
// joining the ends. There the curve's slope passes its mean over the
// sweep: the segment into the knee rose no faster than that line, the
// segment out of it no slower. None when the curve has fewer than
// MinPoints points, its latency grew less than MinGrowth times, or no
// point lies MinDeparture below the line.
func Knee(metric string, points []result.SweepPoint) result.Knee {
	k := result.Knee{Metric: metric, Point: -1}
	idx := Curve(metric, points)
	k.Points = len(idx)
	if len(idx) < MinPoints {
		k.Reason = fmt.Sprintf("%s with this latency; a knee needs at least %d", english.Count(len(idx), "point", "points"), MinPoints)
		return k
	}
	first, last := points[idx[0]], points[idx[len(idx)-1]]
	x0, x1 := first.AchievedRate, last.AchievedRate
	y0, y1 := latency(metric, first), latency(metric, last)
	k.Growth = round3(y1 / y0)
	if x1 <= x0 {
		k.Reason = "the points span no range of rates"
		return k
	}
	if y1 < MinGrowth*y0 {
		k.Reason = fmt.Sprintf("the latency grew %.2f× from the lowest rate to the highest, under %.1f×: no bend within the rates measured", y1/y0, MinGrowth)
		return k
	}
	best, at := math.Inf(-1), -1
	for _, i := range idx[1 : len(idx)-1] {
		p := points[i]
		d := (p.AchievedRate-x0)/(x1-x0) - (latency(metric, p)-y0)/(y1-y0)
		if d > best {
			best, at = d, i
		}
	}
	k.Departure = round3(best)
	if best < MinDeparture {
		k.Reason = fmt.Sprintf("no point lies %.2f or more below the line from the lowest rate's latency to the highest's (at most %.2f): the latency grew steadily, without a bend", MinDeparture, best)
		return k
	}
	k.Found, k.Point = true, at
	k.AchievedRate, k.LatencyMs = points[at].AchievedRate, latency(metric, points[at])
	return k
}

// SLO is the highest rate of a row that met target (METHOD §3, sweeps):
// cells in the row's order (by rate: the closed loop of 1, the rate
// cells, the throughput's closed loop), the last of the unbroken run of
// cells from the first whose attainment is at least target; a cell
// without figures or attainment is a miss. points are the row's curve,
// whose index names the cell.
func SLO(cells []result.Cell, points []result.SweepPoint, target float64) *result.SweepSLO {
	s := &result.SweepSLO{Target: target, Met: -1}
	ordered := slices.Clone(cells)
	slices.SortStableFunc(ordered, func(a, b result.Cell) int { return cmpRate(order(a), order(b)) })
	met := func(c *result.Cell) bool {
		return c.ShowsFigures() && c.SLO != nil && c.SLO.Attainment != nil && *c.SLO.Attainment >= target-1e-12
	}
	missed := -1
	for i := range ordered {
		c := &ordered[i]
		if missed >= 0 {
			if met(c) {
				s.AboveMiss++
			}
			continue
		}
		if !met(c) {
			missed = i
			continue
		}
		s.Met = pointOf(points, c)
		s.MetRate, s.MetAttainment = c.AchievedRate, *c.SLO.Attainment
	}
	if missed < 0 {
		return s
	}
	m := &ordered[missed]
	s.MissedRate = m.AchievedRate
	if !m.ShowsFigures() || s.MissedRate == 0 {
		s.MissedRate = m.Rate
	}
	if m.ShowsFigures() && m.SLO != nil && m.SLO.Attainment != nil {
		a := *m.SLO.Attainment
		s.MissedAttainment = &a
	}
	s.Interpolated = Interpolate(s.MetRate, s.MetAttainment, s.MissedRate, s.MissedAttainment, target, s.Met >= 0)
	return s
}

// Interpolate is the rate between a cell that met target (rate lo,
// attainment aLo) and the next, which missed (rate hi, attainment aHi),
// where the attainment, taken as linear in rate between them, equals
// target: an estimate between two measurements. 0 when there is none to
// make: no cell met, the miss has no attainment (it showed no figures),
// or its rate is not above the met one.
func Interpolate(lo, aLo, hi float64, aHi *float64, target float64, haveLo bool) float64 {
	if !haveLo || aHi == nil || hi <= lo || aLo <= *aHi {
		return 0
	}
	return round3(lo + (aLo-target)/(aLo-*aHi)*(hi-lo))
}

// order is a cell's place in its row: the closed loop of 1 first, the
// rate cells by rate, any larger closed loop (the throughput's) last.
func order(c result.Cell) float64 {
	switch {
	case c.Rate > 0:
		return c.Rate
	case c.Concurrency <= 1:
		return -1
	}
	return math.Inf(1)
}

// pointOf is the index in points of cell c (-1: not on the curve).
func pointOf(points []result.SweepPoint, c *result.Cell) int {
	for i, p := range points {
		if p.Concurrency == c.Concurrency && p.Rate == c.Rate {
			return i
		}
	}
	return -1
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
