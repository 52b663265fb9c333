// Package slo judges requests against service-level objectives and sums
// up how much of a load met them (METHOD.md §6): the share of requests
// that met every objective (attainment) and the rate of such requests and
// of their output tokens (goodput), as vLLM's `bench serve --goodput`,
// AIPerf's --goodput and DistServe count them.
//
// Objectives are given as "ttft=500ms,tbt=50ms" (Parse):
//
//   - ttft: time to first token (First − Sent);
//   - tbt: every gap between token events the client saw, whole (an event
//     that carried several tokens is one gap, not split over them): a
//     stream that stalls once misses it;
//   - tpot: the request's mean time per output token after the first,
//     (last − first) / (tokens after the first event), vLLM's TPOT;
//   - e2e: end-to-end time (End − Sent).
//
// A non-streaming request has no token events: its TTFT is its whole
// latency, as vllm bench serve counts it.
//
// A request that ended (OK, or failed: a failed request is never good) is
// judged on all of it. A request cut before its end (the matrix's window
// closing, a client leaving) is judged on what had happened by the cut
// when that decides its result: no first token yet and longer than the
// TTFT objective already, or a first token later than it, a gap already
// over the TBT objective, longer than the e2e objective already (missed);
// or, with a TTFT objective alone, a first token in time (good). Only a
// request whose result the cut left open is undecided, and not judged
// (METHOD.md §6); a window's attainment is then estimated with it
// censored at the cut, not without it (estimate.go). The package is pure:
// no I/O, no clock.
package slo

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// DefaultTarget is the share of requests that must meet every objective
// for a load to count as served when the spec does not say (DistServe's
// 90%).
const DefaultTarget = 0.9

// Spec is a set of objectives; a zero duration is an objective not set.
type Spec struct {
	TTFT, TBT, TPOT, E2E time.Duration
	// Target is the attainment a load must reach to count as served, 0
	// to 1 (DefaultTarget when Parse was not given one).
	Target float64
}

// Names lists the objectives in the order they are checked and printed.
var Names = []string{result.SLOTTFT, result.SLOTBT, result.SLOTPOT, result.SLOE2E}

// IsZero reports whether no objective is set.
func (s Spec) IsZero() bool { return s.TTFT == 0 && s.TBT == 0 && s.TPOT == 0 && s.E2E == 0 }

// Limit returns the objective called name (0: not set).
func (s Spec) Limit(name string) time.Duration {
	switch name {
	case result.SLOTTFT:
		return s.TTFT
	case result.SLOTBT:
		return s.TBT
	case result.SLOTPOT:
		return s.TPOT
	case result.SLOE2E:
		return s.E2E
	}
	return 0
}

func (s *Spec) set(name string, d time.Duration) {
	switch name {
	case result.SLOTTFT:
		s.TTFT = d
	case result.SLOTBT:
		s.TBT = d
	case result.SLOTPOT:
		s.TPOT = d
	case result.SLOE2E:
		s.E2E = d
	}
}

// Set lists the names of the objectives set, in Names order.
func (s Spec) Set() []string {
	var out []string
	for _, n := range Names {
		if s.Limit(n) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// String is the spec as Parse reads it, e.g. "ttft=500ms,tbt=50ms"; the
// target is written only when it is not DefaultTarget.
func (s Spec) String() string {
	var parts []string
	for _, n := range s.Set() {
		parts = append(parts, n+"="+s.Limit(n).String())
	}
	if s.Target > 0 && s.Target != DefaultTarget {
		parts = append(parts, "target="+strconv.FormatFloat(100*s.Target, 'g', -1, 64)+"%")
	}
	return strings.Join(parts, ",")
}

// Describe is the spec for people: "TTFT ≤ 500 ms, time between tokens ≤
// 50 ms".
func (s Spec) Describe() string {
	var parts []string
	for _, n := range s.Set() {
		parts = append(parts, Label(n)+" ≤ "+fmtDur(s.Limit(n)))
	}
	return strings.Join(parts, ", ")
}

// Label names an objective for people.
func Label(name string) string {
	switch name {
	case result.SLOTTFT:
		return "TTFT"
	case result.SLOTBT:
		return "time between tokens"
	case result.SLOTPOT:
		return "time per output token"
	case result.SLOE2E:
		return "end-to-end time"
	}
	return name
}

// fmtDur writes an objective for people: whole or tenths of seconds from
// 1 s ("5 s", "1.5 s"), milliseconds below ("500 ms", "1.5 ms").
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d >= time.Second && d%(100*time.Millisecond) == 0:
		return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) + " s"
	case ms == math.Trunc(ms):
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'g', 4, 64) + " ms"
}

// Result is the spec as the result document keeps it.
func (s Spec) Result() result.SLOSpec {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	t := s.Target
	if t == 0 {
		t = DefaultTarget
	}
	return result.SLOSpec{Text: s.String(), TTFTms: ms(s.TTFT), TBTms: ms(s.TBT), TPOTms: ms(s.TPOT), E2Ems: ms(s.E2E), Target: t}
}

// FromResult is the spec a result document kept.
func FromResult(r result.SLOSpec) Spec {
	d := func(ms float64) time.Duration { return time.Duration(math.Round(ms * float64(time.Millisecond))) }
	return Spec{TTFT: d(r.TTFTms), TBT: d(r.TBTms), TPOT: d(r.TPOTms), E2E: d(r.E2Ems), Target: r.Target}
}

// maxLimit bounds an objective: a day is no latency target.
const maxLimit = 24 * time.Hour

// Parse reads objectives: comma-separated name=duration pairs with names
// ttft, tbt, tpot and e2e and Go durations with a unit (500ms, 2s, 1m),
// and optionally target=90% (or 0.9), the attainment a load must reach to
// count as served. An empty string is no objective. Errors name the part
// that is wrong and what is wanted.
func Parse(text string) (Spec, error) {
	s := Spec{Target: DefaultTarget}
	text = strings.TrimSpace(text)
	if text == "" {
		return s, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return Spec{}, fmt.Errorf("SLO %q: want name=duration, e.g. ttft=500ms,tbt=50ms (names: %s)", part, strings.Join(Names, ", "))
		}
		if seen[k] {
			return Spec{}, fmt.Errorf("SLO %q: %s is given twice", text, k)
		}
		seen[k] = true
		if k == "target" {
			t, err := parseShare(v)
			if err != nil {
				return Spec{}, fmt.Errorf("SLO target %q: %v", v, err)
			}
			s.Target = t
			continue
		}
		if !slices.Contains(Names, k) {
			return Spec{}, fmt.Errorf("SLO %q: unknown objective %q (use %s, and optionally target=90%%)", part, k, strings.Join(Names, ", "))
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
				return Spec{}, fmt.Errorf("SLO %s=%s: give a unit, e.g. %s=%sms", k, v, k, v)
			}
			return Spec{}, fmt.Errorf("SLO %s=%s: want a duration such as 500ms or 2s", k, v)
		}
		if d <= 0 || d > maxLimit {
			return Spec{}, fmt.Errorf("SLO %s=%s: want a positive duration of at most 24h", k, v)
		}
		s.set(k, d)
	}
	if s.IsZero() {
		return Spec{}, fmt.Errorf("SLO %q sets no objective (use %s)", text, strings.Join(Names, ", "))
	}
	return s, nil
}

// parseShare reads "90%", "90 %" or "0.9" as 0.9; it must lie in (0, 1].
func parseShare(v string) (float64, error) {
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(v, "%")), 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("want a share such as 90%% or 0.9")
	}
	if pct || f > 1 {
		f /= 100
	}
	if f <= 0 || f > 1 {
		return 0, fmt.Errorf("want a share above 0%% and at most 100%%")
	}
	return f, nil
}

// Verdict is what one request's judgement found.
type Verdict struct {
	// Judged is false for a request the cut left undecided.
	Judged bool
	// Good: judged, not failed, and every objective met.
	Good bool
	// Failed: the request failed (record.Outcome.Failed).
	Failed bool
	// Cut: the request did not end; it was judged (or left undecided) on
	// what had happened by the cut.
	Cut bool
	// Missed lists the objectives it missed, in Names order.
	Missed []string
}

// Never is a cut instant later than any: Window with it judges every
// request as it ended, for a run that let every request end.
const Never = time.Duration(math.MaxInt64)

// Judge checks one record against the objectives: a failed request is
// judged and not good; an OK one is good when it meets every objective
// set; a cancelled one (a client that left) is judged as cut at its End
// (JudgeCut). A request that ended without a token event has no TTFT and
// misses a ttft objective, unless it did not stream: then its TTFT is its
// whole latency.
func (s Spec) Judge(r *record.Record) Verdict {
	switch {
	case r.Outcome.Failed():
		return Verdict{Judged: true, Failed: true}
	case r.Outcome != record.OK:
		return s.JudgeCut(r, r.End)
	}
	var v Verdict
	v.Judged = true
	for _, n := range Names {
		lim := s.Limit(n)
		if lim > 0 && !meets(r, n, lim) {
			v.Missed = append(v.Missed, n)
		}
	}
	v.Good = len(v.Missed) == 0
	return v
}

// outcome of one objective for a request cut before its end.
type decision int

const (
	open decision = iota
	met
	missed
)

// JudgeCut judges r as cut at instant at, before its end, on the token
// events that arrived by then: it is judged when that decides its result
// (an objective already missed, or every objective already met), and left
// undecided otherwise.
func (s Spec) JudgeCut(r *record.Record, at time.Duration) Verdict {
	v := Verdict{Cut: true}
	n, _ := slices.BinarySearch(r.Arrivals, at+1) // the events that arrived by at
	stream := r.Stream || len(r.Arrivals) > 0
	undecided := false
	for _, name := range Names {
		lim := s.Limit(name)
		if lim <= 0 {
			continue
		}
		d := open
		switch name {
		case result.SLOTTFT:
			switch {
			case stream && n > 0 && r.Arrivals[0]-r.Sent <= lim:
				d = met
			case stream && n > 0, at-r.Sent > lim:
				d = missed
			}
		case result.SLOTBT:
			if !stream {
				d = met // no gaps, ever
			}
			for i := 1; i < n; i++ {
				if r.Arrivals[i]-r.Arrivals[i-1] > lim {
					d = missed
					break
				}
			}
		case result.SLOTPOT:
			if !stream {
				d = met
			}
		case result.SLOE2E:
			if at-r.Sent > lim {
				d = missed
			}
		}
		switch d {
		case missed:
			v.Missed = append(v.Missed, name)
		case open:
			undecided = true
		}
	}
	switch {
	case len(v.Missed) > 0:
		v.Judged = true
	case !undecided:
		v.Judged, v.Good = true, true
	}
	return v
}

// meets reports whether r, which ended, meets objective name within lim.
func meets(r *record.Record, name string, lim time.Duration) bool {
	switch name {
	case result.SLOTTFT:
		if !r.Stream && len(r.Arrivals) == 0 {
			return r.End-r.Sent <= lim // not streamed: the whole latency
		}
		d, ok := r.TTFT()
		return ok && d <= lim
	case result.SLOTBT:
		for i := 1; i < len(r.Arrivals); i++ {
			if r.Arrivals[i]-r.Arrivals[i-1] > lim {
				return false
			}
		}
		return true
	case result.SLOTPOT:
		rate, ok := r.DecodeRate()
		if !ok {
			return true // one event: no time per output token to miss
		}
		return rate > 0 && time.Duration(float64(time.Second)/rate) <= lim
	case result.SLOE2E:
		return r.End-r.Sent <= lim
	}
	return true
}

// Tally sums verdicts. The zero value is ready to use.
type Tally struct {
	Judged, Good, Failed int
	// Undecided are requests a cut left undecided: not judged.
	Undecided int
	// JudgedCut are the judged requests that were cut before their end.
	JudgedCut int
	// GoodTokens are the output tokens of good requests.
	GoodTokens int64
	Missed     map[string]int

	// lives are the requests of a window as the attainment estimator
	// (estimate.go) takes them, and est the estimates of documents' cells
	// (FromFigures); without either, attainment is Good / Judged.
	lives []life
	est   estSum
}

// Add judges r and counts it.
func (t *Tally) Add(s Spec, r *record.Record) Verdict {
	v := s.Judge(r)
	t.AddVerdict(v, r.CompletionTokens)
	return v
}

// AddVerdict counts a verdict of a request that produced tokens output
// tokens.
func (t *Tally) AddVerdict(v Verdict, tokens int) {
	if !v.Judged {
		t.Undecided++
		return
	}
	t.Judged++
	if v.Cut {
		t.JudgedCut++
	}
	if v.Failed {
		t.Failed++
	}
	if v.Good {
		t.Good++
		t.GoodTokens += int64(tokens)
	}
	for _, n := range v.Missed {
		if t.Missed == nil {
			t.Missed = map[string]int{}
		}
		t.Missed[n]++
	}
}

// Merge adds o's counts to t.
func (t *Tally) Merge(o Tally) {
	t.Judged += o.Judged
	t.Good += o.Good
	t.Failed += o.Failed
	t.Undecided += o.Undecided
	t.JudgedCut += o.JudgedCut
	t.GoodTokens += o.GoodTokens
	t.lives = append(t.lives, o.lives...)
	t.est.n += o.est.n
	t.est.point += o.est.point
	t.est.low += o.est.low
	t.est.high += o.est.high
	for n, c := range o.Missed {
		if t.Missed == nil {
			t.Missed = map[string]int{}
		}
		t.Missed[n] += c
	}
}

// FromFigures is the tally a result document's figures kept (good tokens
// aside).
func FromFigures(s *result.SLO) Tally {
	t := Tally{Judged: s.Judged, Good: s.Good, Failed: s.Failed, Undecided: s.Undecided, JudgedCut: s.JudgedCut, Missed: s.Missed}
	if s.Attainment != nil {
		// The cell's estimate, weighted by the requests it counted.
		n := float64(s.Judged + s.Undecided)
		low, high := *s.Attainment, *s.Attainment
		if s.AttainmentAtLeast != nil {
			low = *s.AttainmentAtLeast
		}
		if s.AttainmentAtMost != nil {
			high = *s.AttainmentAtMost
		}
		t.est = estSum{n: n, point: *s.Attainment * n, low: low * n, high: high * n}
	}
	return t
}

// Figures are the tally as the result document keeps it, goodput over
// seconds (the window, or the period measured); seconds <= 0 gives no
// goodput.
func (t Tally) Figures(seconds float64) *result.SLO {
	out := &result.SLO{Judged: t.Judged, Good: t.Good, Failed: t.Failed, Undecided: t.Undecided, JudgedCut: t.JudgedCut}
	switch point, low, high, ok := t.attainment(); {
	case ok && t.Judged == 0:
		// Nothing decided: no figure, as before (the bounds would be 0
		// and 1).
	case ok:
		out.Attainment = &point
		if high > low+1e-12 {
			out.AttainmentAtLeast, out.AttainmentAtMost = &low, &high
		}
	case t.Judged > 0:
		a := float64(t.Good) / float64(t.Judged)
		out.Attainment = &a
	}
	if seconds > 0 {
		out.GoodputReqPerSec = float64(t.Good) / seconds
		out.GoodputTokPerSec = float64(t.GoodTokens) / seconds
	}
	if len(t.Missed) > 0 {
		out.Missed = map[string]int{}
		for n, c := range t.Missed {
			out.Missed[n] = c
		}
	}
	out.MostMissed = MostMissed(t.Missed)
	return out
}

// MostMissed is the objective with the most misses ("" when none was
// missed); a tie goes to the first in Names order.
func MostMissed(missed map[string]int) string {
	best, top := "", 0
	for _, n := range Names {
		if c := missed[n]; c > top {
			best, top = n, c
		}
	}
	return best
}

// Window judges the requests sent in the window [start, end) of a matrix
// cell: those that ended inside it (OK, or failed) on all of them; those
// still running when it closed were cut by the load generator, and are
// judged on what had happened by the close where that decides (JudgeCut;
// a failure the client is blamed for at or after the close is that cut,
// as package cell counts it).
func (s Spec) Window(recs []record.Record, start, end time.Duration) Tally {
	return s.WindowUntil(recs, start, end, end)
}

// WindowUntil is Window for requests that may end after the window: an
// open loop's grace, or a run that let every request end (until Never).
// The requests sent in [start, end) that ended before until are judged on
// all of them, the rest as cut at until (or at their own End, a client's
// cancel, when that came first).
func (s Spec) WindowUntil(recs []record.Record, start, end, until time.Duration) Tally {
	var t Tally
	for i := range recs {
		r := &recs[i]
		if r.Sent < start || r.Sent >= end {
			continue
		}
		cut := false
		switch {
		case r.Outcome == record.OK:
			cut = r.End >= until
		case r.Outcome.Failed():
			cut = r.Blame == record.BlameClient && r.End >= until
		default:
			cut = true
		}
		if !cut {
			v := t.Add(s, r)
			t.lives = append(t.lives, s.lifeOf(r, v, r.End))
			continue
		}
		at := min(r.End, until)
		v := s.JudgeCut(r, at)
		t.AddVerdict(v, r.CompletionTokens)
		t.lives = append(t.lives, s.lifeOf(r, v, at))
	}
	return t
}

// Capacity is, per context, the highest concurrency (and, for
// arrival-rate cells, the highest request rate) such that its cell and
// the cell of every lower level met the target attainment (METHOD.md §6):
// DistServe's serving capacity, without a noisy pass above a miss. A level
// whose cell shows no figures, or judged no request, is not met.
func Capacity(res *result.Result, target float64) []result.SLOCapacity {
	met := func(cl *result.Cell) bool {
		return cl != nil && cl.Status.ShowsFigures() && cl.SLO != nil && cl.SLO.Attainment != nil && *cl.SLO.Attainment >= target-1e-12
	}
	var out []result.SLOCapacity
	for _, c := range res.Settings.Contexts {
		cp := result.SLOCapacity{Context: c}
		ns := slices.Clone(res.Settings.Concurrency)
		slices.Sort(ns)
		for _, n := range ns {
			if !met(res.Cell(c, n)) {
				break
			}
			cp.Concurrency = n
		}
		// The row's own rates: a sweep's rows each have theirs
		// (Settings.Rates is every row's).
		var rates []float64
		for _, cl := range res.Decode {
			if cl.Context == c && cl.Rate > 0 {
				rates = append(rates, cl.Rate)
			}
		}
		slices.Sort(rates)
		for _, rate := range rates {
			if !met(res.CellAt(c, result.Column{Rate: rate})) {
				break
			}
			cp.Rate = rate
		}
		out = append(out, cp)
	}
	return out
}

// Totals sets the run's SLO totals from its cells (METHOD.md §6): Overall
// sums the cells that show figures, goodput over their windows together
// (each cell's good requests, and its goodput tok/s × its measured
// seconds, over their seconds); the cells that failed are
// summed apart in FailedCells, never mixed in; and the serving capacity.
func Totals(r *result.Result) {
	if r.SLO == nil {
		return
	}
	type sum struct {
		t            Tally
		secs, g, tok float64
		cells        int
	}
	add := func(s *sum, c *result.Cell) {
		s.t.Merge(FromFigures(c.SLO))
		s.secs += c.MeasuredForSeconds
		s.g += float64(c.SLO.Good) // not goodput × seconds: a count-ended rate cell's goodput is over its send span
		s.tok += c.SLO.GoodputTokPerSec * c.MeasuredForSeconds
		s.cells++
	}
	figures := func(s *sum) *result.SLO {
		o := s.t.Figures(0)
		if s.secs > 0 {
			o.GoodputReqPerSec, o.GoodputTokPerSec = s.g/s.secs, s.tok/s.secs
		}
		return o
	}
	var shown, failed sum
	for i := range r.Decode {
		c := &r.Decode[i]
		switch {
		case c.SLO == nil:
		case c.Status.ShowsFigures():
			add(&shown, c)
		case c.Status == result.Failed:
			add(&failed, c)
		}
	}
	r.SLO.Overall, r.SLO.OverallCells = *figures(&shown), shown.cells
	r.SLO.FailedCells, r.SLO.FailedCellCount = nil, 0
	if failed.cells > 0 {
		r.SLO.FailedCells, r.SLO.FailedCellCount = figures(&failed), failed.cells
	}
	r.SLO.Capacity = Capacity(r, r.SLO.Spec.Target)
}
