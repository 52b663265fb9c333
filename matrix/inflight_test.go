package matrix

import (
	"context"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestInFlightSpreads: with drawn lengths the plan holds what the cell's
// slots really send, not the means (issue 31): a capacity one token short
// of the slots' sum rules the cell out though the means' 4 × (1,000 +
// 100) = 4,400 would fit it; an open loop's least is one request at the
// spread's upper bounds, ⌈1,000 × 1.5⌉ + 100 = 1,600.
func TestInFlightSpreads(t *testing.T) {
	sc := scenarios.Scenario{Contexts: []int{1000}, Concurrency: []int{4}, MaxOutput: 100,
		PromptLengths: scenarios.Lengths{RangeRatio: 0.5}}
	var r *runner
	var sum int
	for seed := range int64(50) { // a seed whose four prompts draw above their mean
		sc.Seed = seed
		r = &runner{sc: sc}
		sum = 0
		for _, q := range r.loadOf(nil)(1000, 4) {
			sum += q.prompt + q.output
		}
		if sum > 4400 {
			break
		}
	}
	if sum <= 4400 {
		t.Fatalf("no seed of 50 drew four prompts above 4,000 tokens together")
	}
	for slot, q := range r.loadOf(nil)(1000, 4) {
		if q.prompt != r.promptLength(1000, slot) || q.output != 100 {
			t.Errorf("slot %d: %+v, want the slot's prompt %d and 100", slot, q, r.promptLength(1000, slot))
		}
	}
	fit := kvFit{Alloc: engines.AllocReserve, Tokens: sum - 1}
	p := makePlan(sc.Contexts, sc.Concurrency, nil, nil, sc.MaxOutput, 0, fit, r.loadOf(nil))
	if c := p.cells[0]; c.Status != result.OverCapacity || !strings.Contains(c.Reason, "4 requests' prompts + max_tokens") {
		t.Errorf("cell %+v: want Over capacity by the slots' own lengths (%d > %d)", c, sum, sum-1)
	}
	if one := r.loadOf(nil)(1000, 0); len(one) != 1 || one[0] != (reqLen{1500, 100}) {
		t.Errorf("an open loop's largest request %+v, want {1500 100}", one)
	}
	p = makePlan(sc.Contexts, nil, []float64{1}, nil, sc.MaxOutput, 0, kvFit{Alloc: engines.AllocReserve, Tokens: 1599}, r.loadOf(nil))
	if c := p.cells[0]; c.Status != result.OverCapacity {
		t.Errorf("rate cell %+v: one request may need 1,600 > 1,599", c)
	}
}

// TestDatasetLargest: a dataset's cell of N holds its N lines that ask
// most, their prompts counted by the engine (the fake: a word of up to 8
// bytes is a token, a chat message 8 more).
func TestDatasetLargest(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	in, err := engines.Probe(context.Background(), engines.Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	words := func(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }
	d := &dataset.Dataset{Name: "d.jsonl", Entries: []dataset.Entry{
		{Line: 1, Text: words(10)}, {Line: 2, Text: words(300), MaxTokens: 10},
		{Line: 3, Text: words(200)}, {Line: 4, Text: words(50), MaxTokens: 900},
	}}
	r := &runner{sc: scenarios.Scenario{MaxOutput: 100}, info: in, tgt: replay.Target{API: record.Chat}}
	// Prompt + max_tokens: 308 + 10, 208 + 100, 58 + 900, 18 + 100.
	got, err := r.datasetLargest(context.Background(), d, 2, true)
	if err != nil || len(got) != 2 || got[0] != (reqLen{58, 900}) || got[1] != (reqLen{308, 10}) {
		t.Errorf("largest 2 = %+v, %v; want {58 900} {308 10}", got, err)
	}
	// Per step, prompts and one token: 308, 208 first.
	got, err = r.datasetLargest(context.Background(), d, 2, false)
	if err != nil || len(got) != 2 || got[0] != (reqLen{308, 10}) || got[1] != (reqLen{208, 100}) {
		t.Errorf("largest 2 prompts = %+v, %v; want {308 10} {208 100}", got, err)
	}
}
