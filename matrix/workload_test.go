package matrix

import (
	"context"
	"fmt"
	"github.com/tokentap/tokentap/slo"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// Matrix-level tests of the workload paths against the fake engine: each
// asserts counts from the records and the fake's ledger (what it served),
// never a wall-clock rate.

// runWorkload runs sc (and a dataset, when given) against eng and returns
// the result and each measured cell's records, in cell order.
func runWorkload(t *testing.T, eng *fixtures.Engine, sc scenarios.Scenario, ds *dataset.Dataset) (*result.Result, [][]record.Record) {
	t.Helper()
	res, runs := runWorkloadCells(t, eng, sc, ds)
	cells := make([][]record.Record, len(runs))
	for i := range runs {
		cells[i] = runs[i].Records
	}
	return res, cells
}

// runWorkloadCells is runWorkload returning each measured cell's run
// whole (a rate cell's schedule and what of it went unsent).
func runWorkloadCells(t *testing.T, eng *fixtures.Engine, sc scenarios.Scenario, ds *dataset.Dataset) (*result.Result, []CellRun) {
	t.Helper()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	var runs []CellRun
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc, Dataset: ds,
		OnCell: func(c CellRun) { runs = append(runs, c) }})
	if err != nil {
		t.Fatal(err)
	}
	return res, runs
}

// checkUnsent holds a rate cell's schedule to what was done with it:
// every request due in the window was sent, or, only when the load
// generator woke for it later than replay.SendLateTolerance past the
// window's end (a machine that stalled the loop), counted unsent, and a
// note says how many. A loaded machine may leave requests unsent; a loop
// that drops one it woke for in time fails here.
func checkUnsent(t *testing.T, res *result.Result, run CellRun, w time.Duration) {
	t.Helper()
	if run.Cell.Sent != len(run.Records) || run.Scheduled != run.Cell.Sent+run.Unsent {
		t.Errorf("rate %v: %d scheduled, %d records, the cell says %d sent and %d unsent: want each scheduled request sent or counted unsent",
			run.Cell.Rate, run.Scheduled, len(run.Records), run.Cell.Sent, run.Unsent)
	}
	if run.Unsent == 0 {
		return
	}
	t.Logf("rate %v: %d of %d unsent, the loop woke %v late (a busy machine)", run.Cell.Rate, run.Unsent, run.Scheduled, run.UnsentLate)
	if tol := replay.SendLateTolerance(w); run.UnsentLate <= tol {
		t.Errorf("rate %v: %d unsent, though the loop woke %v late, within the %v allowed", run.Cell.Rate, run.Unsent, run.UnsentLate, tol)
	}
	say := fmt.Sprintf("%d of its %d scheduled requests were not sent", run.Unsent, run.Scheduled)
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, say) }) {
		t.Errorf("rate %v: no note says %q: %q", run.Cell.Rate, say, res.Notes)
	}
}

// served is the fake's ledger entries of decode requests (warm-ups and the
// cold prefill ask for one token).
func served(eng *fixtures.Engine) []fixtures.LedgerEntry {
	var out []fixtures.LedgerEntry
	for _, e := range eng.Ledger() {
		if e.MaxTokens > 1 {
			out = append(out, e)
		}
	}
	return out
}

// TestDrawnLengths: a row with prompt and output spreads sends each slot a
// prompt of its own drawn length around the context and a max_tokens of
// its own around --max-output, within vLLM's ±ratio; a request count ends
// the closed cell after exactly that many requests, each served whole
// (ignore_eos: the engine sent max_tokens); a rerun draws the same
// max_tokens; the result records the spreads.
func TestDrawnLengths(t *testing.T) {
	const c, out, n = 1024, 16, 8
	sc := scenarios.Scenario{Name: "lengths", Contexts: []int{c}, Concurrency: []int{4}, MaxOutput: out, API: "chat", Requests: n,
		PromptLengths: scenarios.Lengths{RangeRatio: 0.5}, OutputLengths: scenarios.Lengths{RangeRatio: 0.5}}
	var first []int
	for run := range 2 {
		eng := fixtures.StartTest(t, quickModel())
		res, cells := runWorkload(t, eng, sc, nil)
		if len(cells) != 1 || len(cells[0]) != n {
			t.Fatalf("run %d: %d cells, %d records; want 1 cell of %d requests", run, len(cells), len(cells[0]), n)
		}
		if res.Settings.PromptLengths == nil || res.Settings.OutputLengths == nil || !strings.Contains(res.Settings.PromptLengths.Summary, "±50%") {
			t.Errorf("settings: prompt %+v, output %+v", res.Settings.PromptLengths, res.Settings.OutputLengths)
		}
		prompts := map[int]bool{}
		for _, r := range cells[0] {
			if r.PromptTokens < c/2-prompts16 || r.PromptTokens > c*3/2+prompts16 {
				t.Errorf("a prompt of %d tokens, outside %d ± 50%%", r.PromptTokens, c)
			}
			prompts[r.PromptTokens] = true
		}
		if len(prompts) < 2 {
			t.Errorf("run %d: every prompt %v tokens: not drawn per slot", run, prompts)
		}
		led := served(eng)
		if len(led) != n {
			t.Errorf("run %d: the engine served %d decode requests, want %d", run, len(led), n)
		}
		var maxes []int
		for _, e := range led {
			if e.MaxTokens < out/2 || e.MaxTokens > out*3/2 || e.CompletionTokens != e.MaxTokens {
				t.Errorf("a request of max_tokens %d (%d sent), want %d ± 50%%, sent whole", e.MaxTokens, e.CompletionTokens, out)
			}
			maxes = append(maxes, e.MaxTokens)
		}
		slices.Sort(maxes)
		if slices.Equal(maxes, slices.Repeat([]int{maxes[0]}, len(maxes))) {
			t.Errorf("run %d: every max_tokens %d: not drawn per slot", run, maxes[0])
		}
		if run == 0 {
			first = slices.Compact(maxes)
		} else if got := slices.Compact(maxes); !slices.Equal(got, first) {
			t.Errorf("a rerun drew max_tokens %v, the first %v", got, first)
		}
	}
}

// prompts16 is the builder's length tolerance at these sizes (±16 tokens).
const prompts16 = 16

// TestDatasetCells: a dataset's row with a request count sends exactly
// that many of the file's prompts, of the file's varied lengths, each
// with the line's max_tokens.
func TestDatasetCells(t *testing.T) {
	d, err := dataset.Load("../dataset/testdata/chat.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Name: "ds", Contexts: []int{0}, Concurrency: []int{2}, MaxOutput: 8, API: "chat", Requests: 10, Dataset: "chat.jsonl"}
	res, cells := runWorkload(t, eng, sc, d)
	if len(cells) != 1 || len(cells[0]) != 10 {
		t.Fatalf("%d cells, %d records; want 1 cell of 10 requests", len(cells), len(cells[0]))
	}
	if res.Settings.Dataset == nil || res.Settings.Dataset.Entries != len(d.Entries) {
		t.Errorf("dataset settings %+v", res.Settings.Dataset)
	}
	// The count alone ends the cell: no 30 s window beside it.
	if res.Settings.WindowSeconds != 0 || res.Settings.DecodeTest != "10 requests" {
		t.Errorf("window %v s, decode test %q; want none and \"10 requests\"", res.Settings.WindowSeconds, res.Settings.DecodeTest)
	}
	lens := map[int]bool{}
	for _, e := range served(eng) {
		lens[e.PromptTokens] = true
	}
	if n := len(served(eng)); n != 10 || len(lens) < 5 {
		t.Errorf("the engine served %d requests of %d distinct prompt lengths; want 10 of at least 5", n, len(lens))
	}
}

// TestFewerRequestsThanStreams: a request count below a column's N runs
// that many streams, and the result says so (it ran N=4 with 3 requests
// in flight and no word).
func TestFewerRequestsThanStreams(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Name: "few", Contexts: []int{0}, Concurrency: []int{2, 4}, MaxOutput: 4, API: "chat", Requests: 3}
	res, cells := runWorkload(t, eng, sc, nil)
	if len(cells) != 2 || len(cells[0]) != 3 || len(cells[1]) != 3 {
		t.Fatalf("%d cells; want 2 of 3 requests each", len(cells))
	}
	want := "A request count of 3 per cell is fewer than the streams of N=4: those cells never had more than 3 requests in flight"
	n := 0
	for _, note := range res.Notes {
		if strings.Contains(note, "request count of") {
			n++
			if !strings.HasPrefix(note, want) {
				t.Errorf("note %q; want it to start %q", note, want)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d notes of the request count, want 1: %q", n, res.Notes)
	}
	mk := func(ns ...int) []result.Cell {
		var out []result.Cell
		for _, n := range ns {
			out = append(out, result.Cell{Concurrency: n})
		}
		return out
	}
	over := mk(1, 2, 64)
	over[2].Status = result.OverCapacity // a sweep's throughput level the KV cache cannot hold: not run
	for _, tt := range []struct {
		name     string
		requests int
		cells    []result.Cell
		sweep    bool
		want     []string
	}{
		{"3 requests, N 1, 4, 8", 3, mk(1, 4, 8, 4), false, []string{"N=4", "N=8"}},
		{"a sweep runs 1 and its largest", 3, mk(1, 4, 8, 16), true, []string{"N=16"}},
		{"8 requests", 8, mk(1, 4, 8), false, nil},
		{"no count", 0, mk(4), false, nil},
		{"an open loop has no streams to fill", 2, []result.Cell{{Rate: 4}}, false, nil},
		{"a sweep's level judged over capacity is not run", 1, over, true, []string{"N=2"}},
	} {
		if got := fewerRequests(tt.requests, tt.cells, tt.sweep); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestRateCellByCount: an open loop a request count alone ends lays its
// arrivals over count ÷ rate, and its achieved rate and goodput are over
// the span it sent them over (that span, stretched by how late its last
// request went out): over the span to the last request's end, which with
// few requests is mostly the tail, 10 requests at 20/s read 5.3/s, and a
// sweep's points fell out of their order.
func TestRateCellByCount(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	spec, err := slo.Parse("ttft=5s")
	if err != nil {
		t.Fatal(err)
	}
	// With a window too, the count comes first: the cell ends when its 10
	// requests have (it waited out the 5 s window, and read 2 req/s).
	for _, win := range []time.Duration{0, 5 * time.Second} {
		sc := scenarios.Scenario{Name: "count", Contexts: []int{0}, Rates: []float64{20}, Window: win, MaxOutput: 32, API: "chat", Requests: 10}
		if err := sc.Validate(); err != nil {
			t.Fatal(err)
		}
		var run CellRun
		res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc, SLO: spec,
			OnCell: func(c CellRun) { run = c }})
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Records) != 10 {
			t.Fatalf("window %v: %d requests; want 10", win, len(run.Records))
		}
		c := res.Decode[0]
		var first, last time.Duration = run.Records[0].Sent, 0
		for _, r := range run.Records {
			first, last = min(first, r.Sent), max(last, r.Sent)
		}
		// 10 arrivals over 0.5 s; a machine that sent the last one late by
		// as much as 0.5 s still reads 10/s, where the span to the last end
		// read 5.3.
		if c.AchievedRate > 20+1e-9 || c.AchievedRate < 10 {
			t.Errorf("window %v: achieved rate %v, want 20 or a little below (10 requests over the 0.5 s they were laid over, sent from %v to %v)", win, c.AchievedRate, first, last)
		}
		if c.SLO == nil || c.SLO.Good != 10 || math.Abs(c.SLO.GoodputReqPerSec-c.AchievedRate) > 1e-9 {
			t.Errorf("window %v: SLO %+v; want 10 good and goodput %v, the achieved rate (every request good)", win, c.SLO, c.AchievedRate)
		} else if c.SLO.GoodputTokPerSec > c.TotalTokPerSec+1e-9 {
			t.Errorf("window %v: goodput %v tok/s above the total %v tok/s", win, c.SLO.GoodputTokPerSec, c.TotalTokPerSec)
		}
		if w := run.Window.End - run.Window.Start; win > 0 && w >= win {
			t.Errorf("window %v: the cell ran %v, its window; want it ended with its 10 requests", win, w)
		}
	}
}

// TestOfferedSpan: the span a count-ended open loop sent over is its
// schedule's, stretched by the lateness of its last send (a load generator
// stalled 1.5 s sends the rest late: 40 requests at 20/s over 3.5 s).
func TestOfferedSpan(t *testing.T) {
	at := make([]time.Duration, 40)
	for i := range at {
		at[i] = time.Duration(i) * 50 * time.Millisecond
	}
	sent := func(late time.Duration, n int) []record.Record {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i].Sent = time.Second + at[i] + time.Millisecond
			if i >= 20 {
				recs[i].Sent += late
			}
		}
		return recs
	}
	const span = 2 * time.Second
	for _, tt := range []struct {
		name string
		recs []record.Record
		want time.Duration
	}{
		{"on time, a millisecond late", sent(0, 40), span + time.Millisecond},
		{"stalled 1.5 s half way", sent(1500*time.Millisecond, 40), span + 1501*time.Millisecond},
		{"half sent, then stopped by a failure: half the span", sent(0, 20), span/2 + time.Millisecond},
		{"nothing sent", nil, span},
	} {
		if got := offeredSpan(span, at, tt.recs, time.Second); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBurstyRateCell: a bursty rate cell sends every request its
// schedule holds (round(rate × window), the same schedule the seed
// draws), and the engine serves each: none is lost at the window's end,
// though bursty gaps put one in its last instant often. (A machine that
// stalls the loop past the window's end by more than the tolerance leaves
// requests unsent: counted and noted, checkUnsent.)
func TestBurstyRateCell(t *testing.T) {
	const rate, w = 10.0, 2 * time.Second
	for _, seed := range []int64{0, 1, 2} {
		eng := fixtures.StartTest(t, quickModel())
		sc := scenarios.Scenario{Name: "bursty", Contexts: []int{0}, Rates: []float64{rate}, Window: w, MaxOutput: 4, API: "chat", Burstiness: 0.25, Seed: seed}
		res, runs := runWorkloadCells(t, eng, sc, nil)
		h := fnv.New64a()
		fmt.Fprintf(h, "%d|%d|%g", seed, 0, rate)
		want := len(replay.ArrivalTimes(rate, 0.25, w, h.Sum64()))
		if want != 20 || len(runs) != 1 || runs[0].Scheduled != want {
			t.Fatalf("seed %d: scheduled %d, %d cells; want 20 scheduled in 1 cell", seed, want, len(runs))
		}
		checkUnsent(t, res, runs[0], w)
		if got, sent := len(served(eng)), len(runs[0].Records); got != sent {
			t.Errorf("seed %d: the engine served %d, the cell sent %d", seed, got, sent)
		}
		if !strings.Contains(res.Settings.DecodeTest, "gamma arrivals of burstiness 0.25") || res.Settings.Burstiness != 0.25 {
			t.Errorf("seed %d: settings %q, burstiness %v", seed, res.Settings.DecodeTest, res.Settings.Burstiness)
		}
	}
}

// TestSweepCells: a sweep measures one request at a time, the throughput
// (the largest concurrency), then rate cells between, ordered by rate;
// each rate cell sent its schedule's count and the engine served every
// request the records hold.
//
// What a loaded machine changes is said, not lost, and the test holds
// that: a request the load generator woke for later than the tolerance
// past the window's end is not sent but counted and noted (Unsent, with
// how late it woke); a throughput window that achieved less than the
// one-request window (a busy machine) leaves no rate to sweep, which a
// note says.
func TestSweepCells(t *testing.T) {
	const w = time.Second
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Name: "sweep", Contexts: []int{0}, Concurrency: []int{1, 4}, Window: w, MaxOutput: 8, API: "chat", Sweep: true}
	var colds int
	var cells [][]record.Record
	runs := map[float64]CellRun{}
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
		OnCell: func(c CellRun) {
			cells = append(cells, c.Records)
			runs[c.Cell.Rate] = c
		},
		OnRecords: func(recs []record.Record) {
			// Warm-up steps of one request: the row's cold prefill and
			// the 1-stream cell's warm-up (the 4-stream cell's is a step
			// of 4); the rate cells send cold prompts, no warm-up.
			if len(recs) == 1 && recs[0].Tag == "warmup C=0" {
				colds++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if colds != 2 {
		t.Errorf("%d one-request warm-up steps, want 2: the row's cold prefill is sent once", colds)
	}
	if len(res.Decode) < 2 {
		t.Fatalf("%d cells, want at least the 1- and 4-stream cells", len(res.Decode))
	}
	first, last := res.Decode[0], res.Decode[len(res.Decode)-1]
	if first.Concurrency != 1 || last.Concurrency != 4 {
		t.Errorf("first cell N=%d, last N=%d; want 1 and 4", first.Concurrency, last.Concurrency)
	}
	if first.AchievedRate <= 0 || last.AchievedRate <= 0 {
		t.Fatalf("achieved rates %v and %v: the quick fake ends requests in every window", first.AchievedRate, last.AchievedRate)
	}
	// The rates lie between the two closed cells' achieved rates (about
	// 6 and 22 requests/s on an idle machine: 8 rates); a loaded machine
	// moves both, and where the 4-stream window achieved less there is
	// no rate between them, which a note says.
	wantRates := sweepRates(first.AchievedRate, last.AchievedRate, scenarios.SweepSize)
	var rates []float64
	for _, c := range res.Decode[1 : len(res.Decode)-1] {
		rates = append(rates, c.Rate)
	}
	if !slices.Equal(rates, wantRates) {
		t.Errorf("rates %v between achieved rates %v and %v, want %v", rates, first.AchievedRate, last.AchievedRate, wantRates)
	}
	if len(wantRates) == 0 {
		t.Logf("the 4-stream window achieved %v requests/s, the 1-stream one %v (a busy machine)", last.AchievedRate, first.AchievedRate)
		if !slices.ContainsFunc(res.Notes, func(n string) bool {
			return strings.Contains(n, "Sweep of context 0: the 4-stream cell achieved") && strings.Contains(n, "no rate cells were run")
		}) {
			t.Errorf("no rate cells and no note says why: %q", res.Notes)
		}
	}
	for _, c := range res.Decode[1 : len(res.Decode)-1] {
		if want := int(c.Rate*w.Seconds() + 0.5); runs[c.Rate].Scheduled != want {
			t.Errorf("rate %v: %d scheduled, want %d", c.Rate, runs[c.Rate].Scheduled, want)
		}
		checkUnsent(t, res, runs[c.Rate], w)
	}
	sent := 0
	for _, recs := range cells {
		sent += len(recs)
	}
	if got := len(served(eng)); got != sent {
		t.Errorf("the cells' records hold %d requests, the engine served %d", sent, got)
	}
}

// TestSweepRates: a sweep's rates rise evenly above the synchronous rate
// up to the throughput, rounded down to 3 significant figures (none above
// the throughput), without duplicates; a throughput no higher than the
// synchronous rate leaves one rate, that rate, or, lower, none.
func TestSweepRates(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{2, 10, []float64{3, 4, 5, 6, 7, 8, 9, 10}},
		{6.48, 22.7, []float64{8.5, 10.5, 12.5, 14.5, 16.6, 18.6, 20.6, 22.6}}, // 22.699… rounds down
		{1, 1.004, []float64{1}},                                               // 3 figures: one rate
		{5, 5, []float64{5}},
		{6.5, 5.9, nil},
		{0, 0, nil},
	} {
		if got := sweepRates(tc.lo, tc.hi, scenarios.SweepSize); !slices.Equal(got, tc.want) {
			t.Errorf("sweepRates(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// TestSweepHears: a sweep runs rate cells only where its fastest rate
// expects at least two requests in the window.
func TestSweepHears(t *testing.T) {
	for _, tc := range []struct {
		rates []float64
		w     time.Duration
		want  bool
	}{
		{[]float64{0.0217, 0.0527}, 5 * time.Second, false}, // the new user's 8,192-token sweep
		{[]float64{1, 2}, time.Second, true},
		{[]float64{0.5, 1.9}, time.Second, false},
		{[]float64{3, 4}, 500 * time.Millisecond, true},
		{nil, time.Minute, false},
	} {
		if got := sweepHears(tc.rates, tc.w); got != tc.want {
			t.Errorf("sweepHears(%v, %v) = %v, want %v", tc.rates, tc.w, got, tc.want)
		}
	}
}

// TestSweepTooSlowForItsWindow: a sweep whose requests last longer than
// its window (here 400 tokens at 10 ms a token in 1 s) runs no rate cells,
// and says why and what to change, instead of rate cells that hear no
// request and read Failed.
func TestSweepTooSlowForItsWindow(t *testing.T) {
	m := quickModel()
	m.TBTBase = 10 * time.Millisecond
	eng := fixtures.StartTest(t, m)
	sc := scenarios.Scenario{Name: "slow sweep", Contexts: []int{0}, Concurrency: []int{1, 2}, Window: time.Second, MaxOutput: 400, API: "chat", Sweep: true}
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Decode {
		if c.Rate > 0 {
			t.Errorf("a rate cell was run: %+v", c)
		}
		if c.Status == result.Failed {
			t.Errorf("cell %d × %d failed: %s", c.Context, c.Concurrency, c.Reason)
		}
	}
	found := false
	for _, n := range res.Notes {
		found = found || (strings.Contains(n, "too few to measure") && strings.Contains(n, "--max-output, now 400 tokens"))
	}
	if !found {
		t.Errorf("no note says why no rate cells ran: %q", res.Notes)
	}
}

// TestCellWindowOnTheRecordsClock: each cell says its window on the run's
// clock, the clock of its records' Sent, so the cell can be recomputed
// from the records file: a rate cell's requests sent in its window are
// its Sent, and no request of a closed cell was sent before its window
// opened.
func TestCellWindowOnTheRecordsClock(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	for _, sc := range []scenarios.Scenario{
		{Name: "rate", Contexts: []int{0}, Rates: []float64{10}, Window: time.Second, MaxOutput: 4, API: "chat"},
		{Name: "closed", Contexts: []int{0}, Concurrency: []int{2}, Window: time.Second, MaxOutput: 4, API: "chat"},
	} {
		res, runs := runWorkloadCells(t, eng, sc, nil)
		if len(runs) != 1 || len(res.Decode) != 1 {
			t.Fatalf("%s: %d cells run, %d in the result", sc.Name, len(runs), len(res.Decode))
		}
		c := res.Decode[0]
		from, to := time.Duration(c.WindowFromNS), time.Duration(c.WindowToNS)
		if from <= 0 || to <= from || to-from < 900*time.Millisecond {
			t.Fatalf("%s: window %v to %v on the run's clock", sc.Name, from, to)
		}
		in, before := 0, 0
		for _, r := range runs[0].Records {
			switch {
			case r.Sent < from:
				before++
			case r.Sent < to:
				in++
			}
		}
		if (sc.Name == "rate" && in != c.Sent) || before > 0 || in == 0 {
			t.Errorf("%s: of %d records %d sent in the window %v–%v, %d before it; the cell says %d sent", sc.Name, len(runs[0].Records), in, from, to, before, c.Sent)
		}
	}
}

// TestLateNote: a stall mid-cell, caught up by sending what fell due at
// once, leaves the achieved rate as asked; the lateness of the sends says
// it (18 requests went out in one instant after a 1.5 s stop, unnoted).
func TestLateNote(t *testing.T) {
	tol := replay.SendLateTolerance(4 * time.Second)
	if n := lateNote("0 × 10/s", replay.Late{Max: 1500 * time.Millisecond, Median: 2 * time.Millisecond}, tol); !strings.Contains(n, "up to 1.5s after their times (median 2ms") {
		t.Errorf("a 1.5 s stall: note %q", n)
	}
	if n := lateNote("0 × 10/s", replay.Late{Max: 3 * time.Millisecond}, tol); n != "" {
		t.Errorf("a timer's oversleep noted: %q", n)
	}
}
