package matrix

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestProgressCountsPrefillAndWarmup: the estimate of the time left covers
// the cold prefill rows, each row's cold request and each cell's warm-up,
// not only the windows (it said "left ~0:16" for a run that took 0:38),
// and it follows the prefills measured.
func TestProgressCountsPrefillAndWarmup(t *testing.T) {
	p := makePlan([]int{0, 32 * k}, []int{1, 4}, nil, []int{8 * k, 32 * k}, 256, 262144, kvFit{}, nil)
	steps := p.steps(2*time.Second, func(n int) int { return n }, false)
	kinds := map[int]int{}
	for _, s := range steps {
		kinds[s.kind]++
	}
	if kinds[stepPrefill] != 1 || kinds[stepRowCold] != 2 || kinds[stepWarm] != 4 || kinds[stepWindow] != 4 {
		t.Fatalf("steps %v; want the 8K cold prefill, 2 row starts, 4 warm-ups, 4 windows", kinds)
	}
	// 32K × 4 warms the 3 prompts 32K × 1 did not.
	for _, s := range steps {
		if s.kind == stepWarm && s.context == 32*k && s.col.N == 4 && s.prompts != 3 {
			t.Errorf("32K × 4 warms %d new prompts, want 3", s.prompts)
		}
	}
	var e eta
	e.add(8*k, 828*time.Millisecond) // seed 000's 8K prefill
	e.add(16*k, 2303*time.Millisecond)
	if got := e.prefill(32 * k); got < 5*time.Second || got > 8*time.Second {
		t.Errorf("32K prefill estimated %v from 8K and 16K; seed 000 measured 7.3 s", got)
	}
	if got := e.prefill(12 * k); got < 828*time.Millisecond || got > 2303*time.Millisecond {
		t.Errorf("12K prefill %v not between 8K's and 16K's", got)
	}
	windows := 4 * 2 * time.Second
	var total time.Duration
	for _, s := range steps {
		total += e.estimate(s)
	}
	// 32K: the row's cold request, then 3 more prompts for N=4: ~4 × 6 s.
	if total < windows+20*time.Second {
		t.Errorf("estimate %v: the 32K prefills are missing (windows alone are %v)", total, windows)
	}
}

// TestProgressMovesDuringSteps: the time left counts down during a long
// prefill, steps are named by context and N (not "C="), and the plain
// display says which step runs.
func TestProgressMovesDuringSteps(t *testing.T) {
	plan := makePlan([]int{32 * k}, []int{1}, nil, nil, 256, 262144, kvFit{}, nil)
	var out bytes.Buffer
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := &progress{w: &out, now: func() time.Time { return clock }, steps: plan.steps(10*time.Second, func(n int) int { return n }, false), cur: -1,
		stop: make(chan struct{}), done: make(chan struct{})}
	p.start = clock
	p.cellsAll = 1
	p.eta.add(8*k, time.Second)
	p.begin(stepRowCold, 32*k, result.Column{}, "cold prefill, context 32K (the row's first warm-up)")
	p.mu.Lock()
	left0, _, _ := p.left(clock)
	clock = clock.Add(3 * time.Second)
	left3, _, _ := p.left(clock)
	p.mu.Unlock()
	if left0 < 10*time.Second+5*time.Second || left3 != left0-3*time.Second {
		t.Errorf("left %v at the prefill's start, %v 3 s into it; want the 32K prefill (~8 s) and the window, counting down", left0, left3)
	}
	p.begin(stepWindow, 32*k, result.Column{N: 1}, cellLabel(32*k, result.Column{N: 1}))
	p.cellDone(32*k, result.Column{N: 1}, cellLabel(32*k, result.Column{N: 1}), "Valid")
	p.mu.Lock()
	left, _, _ := p.left(clock)
	p.mu.Unlock()
	if left != 0 {
		t.Errorf("%v left after the last cell", left)
	}
	s := out.String()
	if !strings.Contains(s, "cold prefill, context 32K") || !strings.Contains(s, "decode context 32K, N=1") || strings.Contains(s, "C=") {
		t.Errorf("progress lines:\n%s", s)
	}
	if got := cellLabel(0, result.Column{Rate: 2.5}); got != "decode context 0, 2.5 requests/s" {
		t.Errorf("rate cell label %q", got)
	}
}

// TestLongRun: a run planned past an hour says how long, once; a shorter
// one says nothing.
func TestLongRun(t *testing.T) {
	for _, tt := range []struct {
		window time.Duration
		cells  int
		want   string
	}{
		{30 * time.Second, 40, ""},
		{time.Hour, 1, ""},
		{time.Hour, 2, "about 2h (2 cells of 1h each"},
		{1000 * time.Hour, 2, "about 83d8h (2 cells of 41d16h each"},
		{45 * time.Minute, 3, "about 2h15m (3 cells of 45m each"},
	} {
		var steps []pstep
		for i := 0; i < tt.cells; i++ {
			steps = append(steps, pstep{kind: stepWindow, col: result.Column{N: i + 1}, window: tt.window})
		}
		got := longRun(steps, tt.window)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%d cells of %v: %q, want %q", tt.cells, tt.window, got, tt.want)
		}
	}
}

// TestSweepSteps: a sweep's row plans its two closed cells and
// scenarios.SweepSize − 2 rate windows before it knows their rates; once
// the sweep chose them they name the steps, and rates fewer than the
// placeholders drop the rest from the cell count.
func TestSweepSteps(t *testing.T) {
	p := makePlan([]int{0}, []int{1, 2, 4}, nil, nil, 64, 0, kvFit{}, nil)
	steps := p.steps(time.Second, func(n int) int { return n }, true)
	var closed, rates int
	for _, st := range steps {
		if st.kind != stepWindow {
			continue
		}
		if st.col.Rate < 0 {
			rates++
		} else if st.col.N == 1 || st.col.N == 4 {
			closed++
		} else {
			t.Errorf("a step of N=%d: a sweep runs the first and last concurrency only", st.col.N)
		}
	}
	if closed != 2 || rates != scenarios.SweepSize-2 {
		t.Fatalf("%d closed and %d rate windows, want 2 and %d", closed, rates, scenarios.SweepSize-2)
	}
	var out bytes.Buffer
	pr := newProgress(&out, false, steps)
	defer pr.close()
	if pr.cellsAll != scenarios.SweepSize {
		t.Errorf("%d cells planned, want %d", pr.cellsAll, scenarios.SweepSize)
	}
	pr.sweepRates(0, []float64{3, 5, 7}, time.Second)
	if pr.cellsAll != 5 || pr.find(stepWindow, 0, result.Column{Rate: 5}) < 0 || pr.find(stepWindow, 0, result.Column{Rate: -1}) >= 0 {
		t.Errorf("after the sweep chose 3 rates: %d cells, rate 5 found %v", pr.cellsAll, pr.find(stepWindow, 0, result.Column{Rate: 5}) >= 0)
	}
}

// The estimate counts every prefill repeat: a separate prefill row's
// requests, and a decode row that is also a prefill row sends its repeats
// after its cold first request; a row that is not a prefill row, one.
func TestProgressCountsPrefillRepeats(t *testing.T) {
	for _, tt := range []struct {
		repeats                 int
		prefill8K, row32K, row0 int
	}{{0, 1, 1, 1}, {1, 1, 1, 1}, {3, 3, 3, 1}, {5, 5, 5, 1}} {
		p := makePlan([]int{0, 32 * k}, []int{1}, nil, []int{8 * k, 32 * k}, 256, 262144, kvFit{}, nil)
		p.repeats = tt.repeats
		got := map[[2]int]int{}
		var e eta
		e.add(8*k, time.Second)
		var total time.Duration
		for _, s := range p.steps(time.Second, func(n int) int { return n }, false) {
			if s.kind == stepPrefill || s.kind == stepRowCold {
				got[[2]int{s.kind, s.context}] = s.prompts
			}
			total += e.estimate(s)
		}
		if got[[2]int{stepPrefill, 8 * k}] != tt.prefill8K || got[[2]int{stepRowCold, 32 * k}] != tt.row32K || got[[2]int{stepRowCold, 0}] != tt.row0 {
			t.Errorf("repeats %d: prompts %v; want 8K prefill %d, 32K row %d, 0 row %d", tt.repeats, got, tt.prefill8K, tt.row32K, tt.row0)
		}
		// 1 s per 8K, about 4 s per 32K: each repeat beyond the first adds at least 5 s.
		if min := time.Duration(max(tt.repeats, 1)-1) * 5 * time.Second; total < min+2*time.Second {
			t.Errorf("repeats %d: estimate %v, want at least %v for the repeats", tt.repeats, total, min+2*time.Second)
		}
	}
}

// TestProgressCountedCells: cells a request count alone ends have no
// window to estimate by: until one has run the time left is a lower bound
// and says so; after, each left counts at the mean of those run.
func TestProgressCountedCells(t *testing.T) {
	plan := makePlan([]int{0}, []int{1, 2, 4}, nil, nil, 256, 262144, kvFit{}, nil)
	var out bytes.Buffer
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := &progress{w: &out, now: func() time.Time { return clock }, steps: plan.steps(0, func(n int) int { return n }, false), cur: -1,
		stop: make(chan struct{}), done: make(chan struct{})}
	p.start, p.cellsAll = clock, 3
	p.begin(stepWindow, 0, result.Column{N: 1}, cellLabel(0, result.Column{N: 1}))
	p.mu.Lock()
	_, _, atLeast := p.left(clock)
	p.mu.Unlock()
	if !atLeast || !strings.Contains(out.String(), "left ≥") {
		t.Errorf("before any counted cell ran: at least %v; progress %q", atLeast, out.String())
	}
	clock = clock.Add(20 * time.Second)
	p.cellDone(0, result.Column{N: 1}, cellLabel(0, result.Column{N: 1}), "Valid")
	p.begin(stepWindow, 0, result.Column{N: 2}, cellLabel(0, result.Column{N: 2}))
	p.mu.Lock()
	left, _, atLeast := p.left(clock)
	p.mu.Unlock()
	if atLeast || left < 35*time.Second || left > 45*time.Second {
		t.Errorf("after one 20 s counted cell, two left: %v (at least %v); want about 40 s", left, atLeast)
	}
}
