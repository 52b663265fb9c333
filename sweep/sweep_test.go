package sweep

import (
	"math"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// pts builds a curve's points: rate cells at xs with median TBT ys (and
// the same TTFT), all cold.
func pts(xs, ys []float64) []result.SweepPoint {
	out := make([]result.SweepPoint, len(xs))
	for i := range xs {
		out[i] = result.SweepPoint{Rate: xs[i], AchievedRate: xs[i], TBTms: ys[i], TTFTms: ys[i], TTFTKind: result.TTFTCold}
	}
	return out
}

// TestKnee: the knee is the interior point farthest below the line from
// the first point to the last, both scaled to their span; none for too
// few points, too little growth or a near-straight curve.
func TestKnee(t *testing.T) {
	tests := []struct {
		name      string
		xs, ys    []float64
		found     bool
		rate      float64
		departure float64
		reason    string
	}{
		// Flat, then a wall at the end: the last point before it.
		{name: "hockey stick", xs: []float64{1, 2, 3, 4, 5}, ys: []float64{10, 10, 10, 11, 50}, found: true, rate: 4,
			// x' = 3/4, y' = 1/40: 0.725.
			departure: 0.725},
		// M/M/1's 1/(1−ρ) over ρ 0.1 … 0.9 (service 1 s): where slope passes the chord's.
		{name: "queue", xs: []float64{0.1, 0.3, 0.5, 0.7, 0.9}, ys: []float64{1 / 0.9, 1 / 0.7, 1 / 0.5, 1 / 0.3, 1 / 0.1}, found: true, rate: 0.7},
		{name: "straight line", xs: []float64{1, 2, 3, 4, 5}, ys: []float64{10, 20, 30, 40, 50}, reason: "without a bend"},
		{name: "near straight", xs: []float64{1, 2, 3, 4, 5}, ys: []float64{10, 19, 28, 39, 50}, reason: "without a bend"},
		{name: "too little growth", xs: []float64{1, 2, 3, 4, 5}, ys: []float64{10, 10, 10, 11, 14}, reason: "under 1.5×"},
		{name: "three points", xs: []float64{1, 2, 3}, ys: []float64{10, 10, 50}, reason: "at least 4"},
		{name: "no range", xs: []float64{2, 2, 2, 2}, ys: []float64{10, 10, 10, 50}, reason: "no range"},
		// Concave (a saturating rise): every interior point lies above the line.
		{name: "concave", xs: []float64{1, 2, 3, 4, 5}, ys: []float64{10, 40, 48, 49, 50}, reason: "without a bend"},
	}
	for _, tt := range tests {
		for _, metric := range []string{result.KneeTBT, result.KneeTTFT} {
			k := Knee(metric, pts(tt.xs, tt.ys))
			if k.Found != tt.found {
				t.Errorf("%s %s: found %v (%s), want %v", tt.name, metric, k.Found, k.Reason, tt.found)
				continue
			}
			if !tt.found {
				if !strings.Contains(k.Reason, tt.reason) || k.Point != -1 {
					t.Errorf("%s %s: reason %q point %d, want %q and -1", tt.name, metric, k.Reason, k.Point, tt.reason)
				}
				continue
			}
			if k.AchievedRate != tt.rate || k.Points != len(tt.xs) || tt.xs[k.Point] != tt.rate {
				t.Errorf("%s %s: knee at %v (point %d of %d), want %v", tt.name, metric, k.AchievedRate, k.Point, k.Points, tt.rate)
			}
			if tt.departure > 0 && math.Abs(k.Departure-tt.departure) > 1e-9 {
				t.Errorf("%s %s: departure %v, want %v", tt.name, metric, k.Departure, tt.departure)
			}
		}
	}
}

// TestKneeSlopes: at the knee the segment in rose no faster than the
// line joining the ends, the segment out no slower (both scaled).
func TestKneeSlopes(t *testing.T) {
	xs := []float64{2, 4.5, 7, 9.5, 12, 14.5, 17, 19.5, 22}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = 6 + 0.2*x/(1-x/26) // the fake's steady TBT, roughly
	}
	p := pts(xs, ys)
	k := Knee(result.KneeTBT, p)
	if !k.Found {
		t.Fatalf("no knee: %s", k.Reason)
	}
	chord := (ys[len(ys)-1] - ys[0]) / (xs[len(xs)-1] - xs[0])
	in := (ys[k.Point] - ys[k.Point-1]) / (xs[k.Point] - xs[k.Point-1])
	out := (ys[k.Point+1] - ys[k.Point]) / (xs[k.Point+1] - xs[k.Point])
	if in > chord || out < chord {
		t.Errorf("knee at %v: slope in %.3f, out %.3f, the line's %.3f", k.AchievedRate, in, out, chord)
	}
}

// TestCurveTTFTKind: the TTFT curve holds the rate cells' TTFT kind only
// (the closed cells' warm TTFT is left off it); neither holds the
// throughput's closed loop.
func TestCurveTTFTKind(t *testing.T) {
	p := []result.SweepPoint{
		{Concurrency: 1, AchievedRate: 1, TTFTms: 5, TBTms: 10, TTFTKind: result.TTFTWarm},
		{Rate: 2, AchievedRate: 2, TTFTms: 20, TBTms: 10, TTFTKind: result.TTFTCold},
		{Rate: 3, AchievedRate: 3, TTFTms: 25, TBTms: 11, TTFTKind: result.TTFTCold},
		{Concurrency: 8, AchievedRate: 4, TTFTms: 8, TBTms: 30, TTFTKind: result.TTFTWarm},
		{Rate: 4, AchievedRate: 4, TBTms: 40, TTFTKind: result.TTFTCold}, // no TTFT (none arrived)
	}
	if got := Curve(result.KneeTTFT, p); !equal(got, []int{1, 2}) {
		t.Errorf("TTFT curve %v, want [1 2]", got)
	}
	if got := Curve(result.KneeTBT, p); !equal(got, []int{0, 1, 2, 4}) {
		t.Errorf("TBT curve %v, want all but the throughput's closed loop", got)
	}
	// A dataset run's closed cells are cold too: one at a time is on the
	// curve, the throughput's closed loop still is not.
	p[0].TTFTKind, p[3].TTFTKind = result.TTFTCold, result.TTFTCold
	if got := Curve(result.KneeTTFT, p); !equal(got, []int{0, 1, 2}) {
		t.Errorf("cold TTFT curve %v, want [0 1 2]", got)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func att(v float64) *result.SLO { return &result.SLO{Judged: 10, Attainment: &v} }

// sloRow is a sweep row's cells: the closed loop of 1, rate cells at
// rates with attainments, the throughput's closed loop of 8.
func sloRow(sync float64, rates, atts []float64, top float64) []result.Cell {
	cells := []result.Cell{{Concurrency: 1, Status: result.Valid, Measured: true, AchievedRate: 1, OutputTokens: 10, TotalTokPerSec: 1, SLO: att(sync)}}
	for i, r := range rates {
		c := result.Cell{Rate: r, Status: result.Valid, Measured: true, AchievedRate: r, OutputTokens: 10, TotalTokPerSec: 1}
		if atts[i] >= 0 {
			c.SLO = att(atts[i])
		} else {
			c.Status, c.Measured, c.OutputTokens, c.TotalTokPerSec = result.OverCapacity, false, 0, 0
		}
		cells = append(cells, c)
	}
	// Listed out of order: SLO orders them itself.
	return append([]result.Cell{{Concurrency: 8, Status: result.Valid, Measured: true, AchievedRate: 6, OutputTokens: 10, TotalTokPerSec: 1, SLO: att(top)}}, cells...)
}

// TestSLO: the highest rate met is the last of the unbroken run of cells
// from the lowest that met the target; the next cell missed; between them
// an interpolated rate, labelled as such; a pass above a miss is counted,
// not taken.
func TestSLO(t *testing.T) {
	tests := []struct {
		name          string
		cells         []result.Cell
		met           float64
		missed        float64
		interpolated  float64
		aboveMiss     int
		missedHasAtt  bool
		metIsFirstPos bool
	}{
		{name: "bends at 3", cells: sloRow(1, []float64{2, 3, 4, 5}, []float64{1, 0.95, 0.5, 0.1}, 0.0),
			// 3 + (0.95 − 0.9)/(0.95 − 0.5) × 1 = 3.111.
			met: 3, missed: 4, interpolated: 3.111, missedHasAtt: true},
		{name: "all met", cells: sloRow(1, []float64{2, 3}, []float64{1, 1}, 0.99), met: 6},
		{name: "first missed", cells: sloRow(0.5, []float64{2, 3}, []float64{1, 1}, 1), met: 0, missed: 1, aboveMiss: 3, missedHasAtt: true},
		{name: "pass above a miss", cells: sloRow(1, []float64{2, 3, 4}, []float64{0.95, 0.8, 0.92}, 0.5), met: 2, missed: 3, interpolated: 2.333, aboveMiss: 1, missedHasAtt: true},
		// A rate cell the engine refused: a miss without attainment, its offered rate, nothing to interpolate.
		{name: "refused", cells: sloRow(1, []float64{2, 3}, []float64{0.95, -1}, 0.2), met: 2, missed: 3},
		{name: "exactly the target", cells: sloRow(1, []float64{2, 3}, []float64{0.9, 0.5}, 0.2), met: 2, missed: 3, interpolated: 2, missedHasAtt: true},
	}
	for _, tt := range tests {
		row := Row(tt.cells, 99)
		s := SLO(tt.cells, row.Points, 0.9)
		if s.MetRate != tt.met || s.MissedRate != tt.missed || s.Interpolated != tt.interpolated || s.AboveMiss != tt.aboveMiss {
			t.Errorf("%s: met %v missed %v interpolated %v above miss %d; want %v %v %v %d", tt.name, s.MetRate, s.MissedRate, s.Interpolated, s.AboveMiss, tt.met, tt.missed, tt.interpolated, tt.aboveMiss)
		}
		if (s.MissedAttainment != nil) != tt.missedHasAtt {
			t.Errorf("%s: missed attainment %v, want one: %v", tt.name, s.MissedAttainment, tt.missedHasAtt)
		}
		if tt.met == 0 && s.Met != -1 {
			t.Errorf("%s: met point %d, want -1", tt.name, s.Met)
		}
		if tt.met > 0 && (s.Met < 0 || row.Points[s.Met].AchievedRate != tt.met) {
			t.Errorf("%s: met point %d is not the cell at %v", tt.name, s.Met, tt.met)
		}
		if s.Interpolated > 0 && (s.Interpolated < s.MetRate || s.Interpolated > s.MissedRate) {
			t.Errorf("%s: interpolated %v outside [%v, %v]", tt.name, s.Interpolated, s.MetRate, s.MissedRate)
		}
	}
}

// TestRows: a sweep's rows, one per context, with the cells that show
// no figures counted off the curve; a run that is not a sweep has none.
func TestRows(t *testing.T) {
	cells := sloRow(1, []float64{2, 3}, []float64{1, -1}, 1)
	res := &result.Result{Settings: result.Settings{Sweep: true, Percentiles: []float64{50, 90, 99}}, Decode: cells,
		SLO: &result.SLORun{Spec: result.SLOSpec{Target: 0.9}}}
	rows := Rows(res)
	if len(rows) != 1 || rows[0].Tail != 99 || len(rows[0].Points) != 3 || rows[0].LeftOut != 1 || !strings.Contains(rows[0].LeftOutWhy, "3/s Over capacity") {
		t.Fatalf("rows %+v", rows)
	}
	if rows[0].SLO == nil || rows[0].SLO.MetRate != 2 || len(rows[0].Knees) != 2 {
		t.Errorf("row %+v", rows[0])
	}
	for i := 1; i < len(rows[0].Points); i++ {
		if rows[0].Points[i].AchievedRate < rows[0].Points[i-1].AchievedRate {
			t.Errorf("points not by rate: %+v", rows[0].Points)
		}
	}
	res.Settings.Sweep = false
	if Rows(res) != nil {
		t.Error("a run that is not a sweep has sweep rows")
	}
}

func TestInterpolate(t *testing.T) {
	a := func(v float64) *float64 { return &v }
	tests := []struct {
		lo, aLo, hi float64
		aHi         *float64
		haveLo      bool
		want        float64
	}{
		{10, 1, 20, a(0), true, 11},
		{10, 0.9, 20, a(0.8), true, 10},
		{10, 0.95, 20, nil, true, 0},
		{0, 0, 20, a(0.5), false, 0},
		{10, 0.95, 10, a(0.5), true, 0},
		{10, 0.95, 20, a(0.97), true, 0}, // a miss with more attainment: nothing linear to read
	}
	for _, tt := range tests {
		if got := Interpolate(tt.lo, tt.aLo, tt.hi, tt.aHi, 0.9, tt.haveLo); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Interpolate(%v, %v, %v, %v) = %v, want %v", tt.lo, tt.aLo, tt.hi, tt.aHi, got, tt.want)
		}
	}
}
