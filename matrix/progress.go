package matrix

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// progress shows on stderr what the run is doing: the step running (a
// prefill, a warm-up, a cell's window), its live tok/s, the run's elapsed
// and estimated remaining time. On a terminal it redraws one line with a
// bar; otherwise it prints a plain line when a step starts and every few
// seconds in between. A nil *progress prints nothing (--quiet).
//
// The estimate covers every step the plan has left, not only the windows:
// cold prefill requests, each row's cold first request and each cell's
// warm-up take time in proportion to the prefill they ask for, which is
// estimated from the prefills measured so far (eta). It counts down during
// a step, so a 7 s prefill at 32K shows the time going, not a frozen "cell
// 0/4".
type progress struct {
	w        io.Writer
	terminal bool
	start    time.Time
	now      func() time.Time

	mu        sync.Mutex
	steps     []pstep
	cur       int // index of the step running, -1 none
	curLabel  string
	stepStart time.Time
	cellsDone int
	cellsAll  int
	lastPlain time.Time
	eta       eta
	// counted are the cells a request count alone ended (no window) so
	// far: their time in all and how many, the estimate of the rest.
	counted struct {
		sum time.Duration
		n   int
	}

	tokens atomic.Int64 // tokens arrived in the current step
	last   struct {
		at     time.Time
		tokens int64
		rate   float64
	}
	stop chan struct{}
	done chan struct{}
}

// Kinds of step.
const (
	stepPrefill = iota // a cold prefill row's request
	stepPrompts        // building prompts (counted as it goes, not estimated)
	stepRowCold        // a row's slot 0, alone and cold
	stepWarm           // a cell's warm-up
	stepWindow         // a cell's window
	stepWait           // a shard waiting for its schedule (never planned)
	stepFinish         // a window's running streams ending by themselves (never planned)
)

// pstep is one planned step and its estimate's inputs.
type pstep struct {
	kind    int
	context int
	col     result.Column
	prompts int           // prompts of context computed cold (prefill, row cold, warm-up)
	window  time.Duration // a window's length (with an open loop's grace, its expected part)
	done    bool
}

// steps lays out what the run will do, in order, for the estimate: cold
// prefill rows, then per row its cold request, and per cell its warm-up
// (the prompts not warmed before in the row, at most the engine's slots)
// and window. An arrival-rate cell's requests are all cold, and the
// requests still running at its window's end get up to a window more.
//
// A sweep's row (sweep) runs its first and last concurrency, then
// scenarios.SweepSize − 2 rate cells whose rates its closed cells decide:
// until then they stand as placeholders (Rate −1, −2, …; sweepRates
// names them), each a window and its grace.
func (p *plan) steps(window time.Duration, warmSlots func(int) int, sweep bool) []pstep {
	var out []pstep
	reps := max(p.repeats, 1)
	for _, pc := range p.coldPrefill {
		out = append(out, pstep{kind: stepPrefill, context: pc, prompts: reps})
	}
	for _, c := range p.contexts {
		ns, rates := p.runnable(c), p.runnableRates(c)
		if len(ns) == 0 && len(rates) == 0 {
			continue
		}
		if sweep && len(ns) > 0 {
			ns = slices.Compact([]int{ns[0], ns[len(ns)-1]})
			rates = nil
			for i := range scenarios.SweepSize - 2 {
				rates = append(rates, -float64(i+1))
			}
		}
		cold := 1 // the row's slot 0, and a prefill row's other repeats
		if slices.ContainsFunc(p.prefill, func(r result.Prefill) bool { return r.Context == c }) {
			cold = reps
		}
		out = append(out, pstep{kind: stepRowCold, context: c, prompts: cold})
		warmed := 1
		for _, n := range ns {
			k := warmSlots(n)
			out = append(out, pstep{kind: stepWarm, context: c, col: result.Column{N: n}, prompts: max(0, k-warmed)},
				pstep{kind: stepWindow, context: c, col: result.Column{N: n}, window: window})
			warmed = max(warmed, k)
		}
		for _, rate := range rates {
			n := int(math.Round(max(rate, 0) * window.Seconds()))
			out = append(out, pstep{kind: stepWindow, context: c, col: result.Column{Rate: rate}, prompts: n, window: window + window/2})
		}
	}
	return out
}

// eta estimates how long the prefill of a prompt of C tokens takes, from
// the prefills measured so far (prompt tokens, TTFT): between two measured
// contexts it interpolates on a log-log scale, beyond them it extends the
// slope of the last two (clamped to 1–2: prefill grows at least linearly,
// at most as attention's square), from one it grows as C^1.5 (what the
// seed pages show between 8K and 32K), and before any as a 4,000 tok/s
// engine would.
type eta struct {
	points []etaPoint // ascending tokens
}

type etaPoint struct {
	tokens int
	t      time.Duration
}

func (e *eta) add(tokens int, t time.Duration) {
	if tokens <= 0 || t <= 0 {
		return
	}
	i, found := slices.BinarySearchFunc(e.points, tokens, func(p etaPoint, n int) int { return p.tokens - n })
	if found {
		e.points[i].t = t
		return
	}
	e.points = slices.Insert(e.points, i, etaPoint{tokens, t})
}

// prefill is the estimated time of one cold prefill of c tokens.
func (e *eta) prefill(c int) time.Duration {
	const floor = 20 * time.Millisecond // a request's own cost, even with no prompt
	x := float64(max(c, 16))
	pts := e.points
	var t float64 // seconds
	switch {
	case len(pts) == 0:
		t = x / 4000 * (1 + x/32768)
	case len(pts) == 1:
		t = pts[0].t.Seconds() * math.Pow(x/float64(pts[0].tokens), 1.5)
	default:
		i := 0 // the segment [i, i+1] used
		for i+2 < len(pts) && x > float64(pts[i+1].tokens) {
			i++
		}
		x0, x1 := math.Log(float64(pts[i].tokens)), math.Log(float64(pts[i+1].tokens))
		y0, y1 := math.Log(pts[i].t.Seconds()), math.Log(pts[i+1].t.Seconds())
		slope := 1.5
		if x1 > x0 {
			slope = (y1 - y0) / (x1 - x0)
		}
		if x < float64(pts[i].tokens) || x > float64(pts[i+1].tokens) {
			slope = min(2, max(1, slope)) // extrapolating
		}
		t = math.Exp(y0 + slope*(math.Log(x)-x0))
	}
	return max(floor, time.Duration(t*float64(time.Second)))
}

// longRunAbove is the planned duration over which a run says, once and
// even when quiet, how long it is expected to take.
const longRunAbove = time.Hour

// longRun is what a run planned to take over longRunAbove says before it
// starts ("" for a shorter one): its expected duration, from the plan's
// steps before any prefill is measured (as the progress line's first
// estimate), and how to stop it.
func longRun(steps []pstep, window time.Duration) string {
	var e eta
	var total time.Duration
	cells := 0
	for _, s := range steps {
		total += e.estimate(s)
		if s.kind == stepWindow {
			cells++
		}
	}
	if total <= longRunAbove {
		return ""
	}
	return fmt.Sprintf("tokentap matrix: this run is expected to take about %s (%s of %s each, with warm-ups and prefills); "+
		"Ctrl-C stops it and keeps the cells finished. A shorter --window, or fewer --contexts or --concurrency levels, shortens it.",
		fmtLong(total), english.Count(cells, "cell", "cells"), fmtLong(window))
}

// fmtLong is a long duration as people say it: 2h30m, 41d16h.
func fmtLong(d time.Duration) string {
	d = d.Round(time.Minute)
	days, h, m := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%dh", days, h)
	case h > 0 && m > 0:
		return fmt.Sprintf("%dh%dm", h, m)
	case h > 0:
		return fmt.Sprintf("%dh", h)
	default:
		return fmt.Sprintf("%dm", m)
	}
}

// estimate is step s's expected duration.
func (e *eta) estimate(s pstep) time.Duration {
	var d time.Duration
	if s.prompts > 0 {
		d = time.Duration(s.prompts) * e.prefill(s.context)
		if s.kind == stepWindow {
			d = 0 // an open loop's cold prompts are computed inside its window
		}
	}
	return d + s.window
}

func newProgress(w io.Writer, terminal bool, steps []pstep) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, terminal: terminal, now: time.Now, steps: steps, cur: -1,
		stop: make(chan struct{}), done: make(chan struct{})}
	p.start = p.now()
	for _, s := range steps {
		if s.kind == stepWindow {
			p.cellsAll++
		}
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	every := 5 * time.Second
	if p.terminal {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.draw(false)
			p.mu.Unlock()
		}
	}
}

// counter is where the load generator counts arrived tokens; nil when quiet.
func (p *progress) counter() *atomic.Int64 {
	if p == nil {
		return nil
	}
	return &p.tokens
}

// find is the first planned step of this kind, context and column not
// done yet; -1 when the plan has none (prompt building is not planned).
func (p *progress) find(kind, context int, col result.Column) int {
	for i, s := range p.steps {
		if !s.done && s.kind == kind && s.context == context && s.col == col {
			return i
		}
	}
	return -1
}

// countedEnds adds the step running, if a request count alone ends it, to
// the counted cells' time: it ends now. Called with p.mu held.
func (p *progress) countedEnds() {
	if p.cur >= 0 && !p.steps[p.cur].done && p.steps[p.cur].kind == stepWindow && p.steps[p.cur].window == 0 {
		p.counted.sum += p.now().Sub(p.stepStart)
		p.counted.n++
		p.steps[p.cur].done = true
	}
}

// begin announces a step (prompts, a prefill, a warm-up, a cell's window).
// Every planned step before it is over.
func (p *progress) begin(kind, context int, col result.Column, label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countedEnds()
	if i := p.find(kind, context, col); i >= 0 {
		for j := 0; j < i; j++ {
			p.steps[j].done = true
		}
		p.cur = i
	} else if p.cur >= 0 {
		p.steps[p.cur].done = true
		p.cur = -1
	}
	p.curLabel = label
	p.stepStart = p.now()
	p.tokens.Store(0)
	p.last.at, p.last.tokens, p.last.rate = p.stepStart, 0, 0
	p.draw(true)
}

// sweepRates names context c's placeholder sweep steps (plan.steps) by
// the rates the sweep chose, with the prompts each builds; placeholders
// left over (rates that rounded together) are dropped, and the cell count
// with them.
func (p *progress) sweepRates(c int, rates []float64, window time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	out := p.steps[:0]
	for i, st := range p.steps {
		if st.kind == stepWindow && st.context == c && st.col.Rate < 0 {
			if k >= len(rates) {
				p.cellsAll--
				if p.cur > i {
					p.cur--
				}
				continue
			}
			st.col.Rate = rates[k]
			st.prompts = int(math.Round(rates[k] * window.Seconds()))
			k++
		}
		out = append(out, st)
	}
	p.steps = out
}

// prefillMeasured feeds a measured cold prefill (prompt tokens, TTFT) to
// the estimate.
func (p *progress) prefillMeasured(tokens int, ttft time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.eta.add(tokens, ttft)
	p.mu.Unlock()
}

// cellDone counts a decided cell (run or skipped) and shows its status;
// its planned steps are over.
func (p *progress) cellDone(context int, col result.Column, label, status string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countedEnds()
	for i := range p.steps {
		if s := &p.steps[i]; s.context == context && s.col == col && (s.kind == stepWarm || s.kind == stepWindow) {
			s.done = true
		}
	}
	if p.cur >= 0 && p.steps[p.cur].done {
		p.cur = -1
	}
	p.cellsDone++
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintf(p.w, "  %-36s %s\n", label, status)
	if p.terminal {
		p.draw(true)
	}
}

// note prints a line of its own (a dropped context, a failure).
func (p *progress) note(s string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintln(p.w, s)
	if p.terminal {
		p.draw(true)
	}
}

// close stops the display and leaves the terminal on a fresh line.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintf(p.w, "matrix: %d of %d decode cells run in %s\n", p.cellsDone, p.cellsAll, fmtDur(p.now().Sub(p.start)))
}

func (p *progress) clearLine() { fmt.Fprint(p.w, "\r\033[K") }

// left is the estimated time the run has left at now: every planned step
// not done, the one running less what it has taken so far (but never less
// than a tenth of its estimate: a step over its estimate is not done yet).
// A cell a request count alone ends is estimated at the mean of those
// done; before the first, unknown: atLeast says left leaves them out.
// Called with p.mu held.
func (p *progress) left(now time.Time) (left, total time.Duration, atLeast bool) {
	for i, s := range p.steps {
		e := p.eta.estimate(s)
		if s.kind == stepWindow && s.window == 0 && !s.done {
			if p.counted.n > 0 {
				e += p.counted.sum / time.Duration(p.counted.n)
			} else {
				atLeast = true
			}
		}
		total += e
		switch {
		case s.done:
		case i == p.cur:
			left += max(e-now.Sub(p.stepStart), e/10)
		default:
			left += e
		}
	}
	return left, total, atLeast
}

// draw writes the status line; force draws a plain line now even if one was
// drawn recently. Called with p.mu held.
func (p *progress) draw(force bool) {
	now := p.now()
	if dt := now.Sub(p.last.at); dt >= 500*time.Millisecond {
		tok := p.tokens.Load()
		p.last.rate = float64(tok-p.last.tokens) / dt.Seconds()
		p.last.at, p.last.tokens = now, tok
	}
	elapsed := now.Sub(p.start)
	left, total, atLeast := p.left(now)
	leftText := "left ~" + fmtDur(left)
	if atLeast {
		leftText = "left ≥" + fmtDur(left) + " (cells end by request count)"
	}
	inWindow := p.cur >= 0 && p.steps[p.cur].kind == stepWindow
	rate := ""
	if p.last.rate > 0 || inWindow {
		rate = fmt.Sprintf("%8.1f tok/s", p.last.rate)
	}
	if p.terminal {
		const width = 20
		frac := 0.0
		if total > 0 {
			frac = math.Min(1, math.Max(0, 1-float64(left)/float64(total)))
		}
		filled := int(frac * width)
		bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
		p.clearLine()
		fmt.Fprintf(p.w, "%s cell %d/%d  %-36s %s  elapsed %s  %s", bar, p.cellsDone, p.cellsAll, p.curLabel, rate, fmtDur(elapsed), leftText)
		return
	}
	if !force && now.Sub(p.lastPlain) < 5*time.Second {
		return
	}
	p.lastPlain = now
	if force {
		rate = "" // a step that just began has no rate yet
	}
	line := fmt.Sprintf("[%s] cell %d/%d  %s", fmtDur(elapsed), p.cellsDone, p.cellsAll, p.curLabel)
	if r := strings.TrimSpace(rate); r != "" {
		line += "  " + r
	}
	fmt.Fprintf(p.w, "%s  %s\n", line, leftText)
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	m := int(d / time.Minute)
	s := int((d % time.Minute) / time.Second)
	if m >= 60 {
		return fmt.Sprintf("%d:%02d:%02d", m/60, m%60, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}
