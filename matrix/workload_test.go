package matrix

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"slices"
	"strconv"
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
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	var cells [][]record.Record
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc, Dataset: ds,
		OnCell: func(c CellRun) { cells = append(cells, c.Records) }})
	if err != nil {
		t.Fatal(err)
	}
	return res, cells
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
	lens := map[int]bool{}
	for _, e := range served(eng) {
		lens[e.PromptTokens] = true
	}
	if n := len(served(eng)); n != 10 || len(lens) < 5 {
		t.Errorf("the engine served %d requests of %d distinct prompt lengths; want 10 of at least 5", n, len(lens))
	}
}

// TestBurstyRateCell: a bursty rate cell's schedule holds round(rate ×
// window) requests (the same schedule the seed draws), and none is lost:
// each is sent and served, or counted unsent in the cell's note (a
// loaded machine may wake past the window's end for a burst's last
// requests; METHOD §3), and the cell's sent, its records and the engine's
// served all agree.
func TestBurstyRateCell(t *testing.T) {
	const rate, w = 10.0, 2 * time.Second
	unsentNote := regexp.MustCompile(`(\d+) of its (\d+) scheduled requests were not sent`)
	for _, seed := range []int64{0, 1, 2} {
		eng := fixtures.StartTest(t, quickModel())
		sc := scenarios.Scenario{Name: "bursty", Contexts: []int{0}, Rates: []float64{rate}, Window: w, MaxOutput: 4, API: "chat", Burstiness: 0.25, Seed: seed}
		res, cells := runWorkload(t, eng, sc, nil)
		h := fnv.New64a()
		fmt.Fprintf(h, "%d|%d|%g", seed, 0, rate)
		want := len(replay.ArrivalTimes(rate, 0.25, w, h.Sum64()))
		unsent := 0
		for _, n := range res.Notes {
			if m := unsentNote.FindStringSubmatch(n); m != nil {
				unsent, _ = strconv.Atoi(m[1])
				if m[2] != strconv.Itoa(want) {
					t.Errorf("seed %d: %s; want %d scheduled", seed, n, want)
				}
				t.Logf("seed %d: %s", seed, n)
			}
		}
		sent := want - unsent
		if want != 20 || len(cells) != 1 || sent < 1 || len(cells[0]) != sent || res.Decode[0].Sent != sent {
			t.Errorf("seed %d: scheduled %d, %d unsent, %d records, the cell says %d sent; want 20 scheduled, the rest of the unsent sent and recorded",
				seed, want, unsent, len(cells[0]), res.Decode[0].Sent)
		}
		if got := len(served(eng)); got != sent {
			t.Errorf("seed %d: the engine served %d, want the %d sent", seed, got, sent)
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
func TestSweepCells(t *testing.T) {
	const w = time.Second
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Name: "sweep", Contexts: []int{0}, Concurrency: []int{1, 4}, Window: w, MaxOutput: 8, API: "chat", Sweep: true}
	var colds int
	var cells [][]record.Record
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
		OnCell: func(c CellRun) { cells = append(cells, c.Records) },
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
	if len(res.Decode) < 5 {
		t.Fatalf("%d cells, want at least 5", len(res.Decode))
	}
	first, last := res.Decode[0], res.Decode[len(res.Decode)-1]
	if first.Concurrency != 1 || last.Concurrency != 4 {
		t.Errorf("first cell N=%d, last N=%d; want 1 and 4", first.Concurrency, last.Concurrency)
	}
	prev := first.AchievedRate
	sent := 0
	for _, c := range res.Decode[1 : len(res.Decode)-1] {
		if c.Rate <= prev {
			t.Errorf("rate %v after %v: not rising", c.Rate, prev)
		}
		prev = c.Rate
		if want := int(c.Rate*w.Seconds() + 0.5); c.Sent != want {
			t.Errorf("rate %v: sent %d, want %d", c.Rate, c.Sent, want)
		}
	}
	for _, recs := range cells {
		sent += len(recs)
	}
	if got := len(served(eng)); got != sent {
		t.Errorf("the cells' records hold %d requests, the engine served %d", sent, got)
	}
}

// TestClosedRate: a closed cell's request rate is its output tok/s over
// the tokens a request gets, not its requests sent per window second:
// with requests longer than the window, the N sent at its start are no
// rate.
func TestClosedRate(t *testing.T) {
	ok := func(tokens int) record.Record {
		return record.Record{Outcome: record.OK, CompletionTokens: tokens, MaxTokens: tokens}
	}
	cut := func(tokens, max int) record.Record {
		return record.Record{Outcome: record.Cancelled, CompletionTokens: tokens, MaxTokens: max}
	}
	tests := []struct {
		name      string
		tokPerSec float64
		recs      []record.Record
		want      float64
	}{
		{"completed requests", 640, []record.Record{ok(64), ok(64), cut(10, 64)}, 10},
		{"none completed: max_tokens", 1400, []record.Record{cut(40, 64), cut(30, 64), cut(20, 64)}, 1400.0 / 64},
		{"mixed lengths", 300, []record.Record{ok(100), ok(200)}, 2},
		{"nothing to divide by", 100, []record.Record{{Outcome: record.Cancelled}}, 0},
		{"no records", 100, nil, 0},
	}
	for _, tt := range tests {
		if got := closedRate(tt.tokPerSec, tt.recs); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: %v req/s, want %v", tt.name, got, tt.want)
		}
	}
}
