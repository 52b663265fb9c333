package matrix

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// prefillTolerance is how far a prefill row's median may read from the
// same requests' prefill as the fake's ledger timed them at its door (the
// request's arrival, kernel-stamped, to its first token's write): what
// lies between is the loopback and the send, well under a millisecond
// against prefills of 400–800 ms. Not the fake's configured speed: a
// loaded machine wakes its sleeps late, and the ledger says by how much.
const prefillTolerance = 0.03

// TestPrefillRepeatsOnTheFake runs prefill rows of 3 repeats against a fake
// whose prefill speed is set: a cold row of its own (8K) and one measured
// from a decode row's warm-up (4K, its first repeat the row's first
// warm-up request). Every repeat is cold (the fake reports its cache: no
// more than the salt line found there), the rows' medians are the fake's
// prompt tok/s within prefillTolerance, their spread holds the median, and
// the document holds to the schema.
func TestPrefillRepeatsOnTheFake(t *testing.T) {
	m := accuracyModel()
	m.MaxModelLen = 16384
	m.KVCapacity = 65536
	m.PrefillTokPerSec = 10000 // as the fake engine's --prefill-tok-per-sec 10000
	m.PrefillSlowdown = 0
	m.FirstEventDelay = 10 * time.Millisecond
	eng := fixtures.StartTest(t, m)
	sc := scenarios.Scenario{Name: "repeats", Contexts: []int{0, 4096}, Concurrency: []int{1}, Prefill: []int{4096, 8192},
		PrefillRepeats: 3, Window: 300 * time.Millisecond, MaxOutput: 16, API: "chat"}
	var (
		mu   sync.Mutex
		recs []record.Record
	)
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
		OnRecords: func(r []record.Record) { mu.Lock(); recs = append(recs, r...); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := schematest.Result(res); err != nil {
		t.Fatal(err)
	}
	if res.Settings.PrefillRepeats != 3 {
		t.Errorf("settings say %d repeats, want 3", res.Settings.PrefillRepeats)
	}
	if len(res.Prefill) != 2 || !res.Prefill[0].DuringWarmup || res.Prefill[1].DuringWarmup {
		t.Fatalf("prefill rows %+v; want 4K during the 4K row's warm-up and 8K on its own", res.Prefill)
	}
	for _, p := range res.Prefill {
		name := TokenLabel(p.Context)
		if p.Status != result.Valid || p.Repeats != 3 || p.Requests != 3 || p.Measured != 3 || len(p.Each) != 3 {
			t.Fatalf("%s: %+v; want Valid, 3 of 3 repeats sent and measured", name, p)
		}
		var tps []float64
		for i, e := range p.Each {
			if e.CachedTokens == nil || *e.CachedTokens > prompts.Tolerance(e.PromptTokens) {
				t.Errorf("%s repeat %d: cached %v of %d prompt tokens; want the fake to say, and no more than the salt line cached", name, i+1, e.CachedTokens, e.PromptTokens)
			}
			tps = append(tps, e.TokPerSec)
		}
		if p.TokPerSec != cell.Median(tps) || p.TokPerSecMin > p.TokPerSec || p.TokPerSecMax < p.TokPerSec {
			t.Errorf("%s: tok/s %.1f (%.1f–%.1f) is not the median of the repeats %v", name, p.TokPerSec, p.TokPerSecMin, p.TokPerSecMax, tps)
		}
		// The same cold requests as the fake's ledger timed them.
		var door []float64
		for _, r := range recs {
			le, ok := eng.LedgerEntryByID(r.ResponseID)
			if !ok || le.FirstToken.IsZero() || le.CachedTokens > prompts.Tolerance(le.PromptTokens) || le.PromptTokens != p.PromptTokens {
				continue
			}
			from := le.Arrived
			if from.IsZero() {
				from = le.Received
			}
			door = append(door, float64(le.PromptTokens)/le.FirstToken.Sub(from).Seconds())
		}
		if len(door) != 3 {
			t.Fatalf("%s: the ledger holds %d cold requests of %d tokens, want the 3 repeats", name, len(door), p.PromptTokens)
		}
		want := cell.Median(door)
		if math.Abs(p.TokPerSec-want)/want > prefillTolerance {
			t.Errorf("%s: median %.1f tok/s, the fake's ledger %.1f (±%.0f%%); repeats %v, ledger %v", name, p.TokPerSec, want, prefillTolerance*100, tps, door)
		}
		t.Logf("%s: median %.1f tok/s (%.1f–%.1f), the fake's ledger %.1f, its setting %.1f", name, p.TokPerSec, p.TokPerSecMin, p.TokPerSecMax, want,
			float64(p.PromptTokens)/(m.FirstEventDelay+m.PrefillTime(p.PromptTokens)).Seconds())
	}
}

// A prefill row whose every repeat fails sends them all and counts them:
// Failed, 3 sent, none measured, each repeat's error kept.
func TestPrefillRepeatsFailedAreCounted(t *testing.T) {
	m := quickModel()
	m.MaxModelLen = 16384
	fault, err := fixtures.ParseFault("status=500,min-prompt=2000")
	if err != nil {
		t.Fatal(err)
	}
	eng := fixtures.StartTest(t, m, fixtures.WithFaults(fault))
	sc := scenarios.Scenario{Name: "failing", Contexts: []int{0}, Concurrency: []int{1}, Prefill: []int{2048},
		PrefillRepeats: 3, Window: 200 * time.Millisecond, MaxOutput: 16, API: "chat"}
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	if err := schematest.Result(res); err != nil {
		t.Fatal(err)
	}
	p := res.Prefill[0]
	if p.Status != result.Failed || p.Requests != 3 || p.Measured != 0 || len(p.Each) != 3 || !strings.Contains(p.Error, "500") {
		t.Fatalf("row %+v; want Failed, 3 repeats sent, none measured, the engine's error", p)
	}
	for i, e := range p.Each {
		if e.Error == "" || e.TokPerSec != 0 {
			t.Errorf("repeat %d: %+v; want its error and no figure", i+1, e)
		}
	}
}

// prefillRepeat turns one cold request into a repeat: its figure, or why
// it has none, a request served from the prefix cache among them.
func TestPrefillRepeatClassifies(t *testing.T) {
	r := &runner{build: prompts.NewBuilder("s", nil)}
	ok := func(edit func(*record.Record)) *record.Record {
		rec := &record.Record{Outcome: record.OK, Sent: 0, First: 800 * time.Millisecond, End: 810 * time.Millisecond,
			Arrivals: []time.Duration{800 * time.Millisecond}, PromptTokens: 8192, PromptSource: record.SourceUsage, CachedSource: record.SourceUsage}
		edit(rec)
		return rec
	}
	for _, tt := range []struct {
		name   string
		rec    *record.Record
		tps    float64
		errHas string
	}{
		{"cold", ok(func(*record.Record) {}), 10240, ""},
		{"the salt line cached", ok(func(r *record.Record) { r.CachedTokens = 16 }), 10240, ""},
		{"served from the cache", ok(func(r *record.Record) { r.CachedTokens = 8176 }), 0, "served 8176 of its 8192 prompt tokens from its prefix cache"},
		{"no cache report", ok(func(r *record.Record) { r.CachedSource = record.SourceNone }), 10240, ""},
		{"failed", ok(func(r *record.Record) { r.Outcome, r.Error, r.Arrivals = record.HTTPError, "HTTP 500", nil }), 0, "HTTP 500"},
		{"truncated", ok(func(r *record.Record) { r.PromptTokens = 4096 }), 0, "truncated the 8192-token prompt to 4096"},
		{"no prompt count", ok(func(r *record.Record) { r.PromptTokens, r.PromptSource = 0, record.SourceNone }), 0, "no prompt token count"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rp := r.prefillRepeat(tt.rec, 8192)
			if math.Abs(rp.TokPerSec-tt.tps) > 0.01 || (tt.errHas == "") != (rp.Error == "") || !strings.Contains(rp.Error, tt.errHas) {
				t.Errorf("repeat %+v; want %.0f tok/s, error holding %q", rp, tt.tps, tt.errHas)
			}
			if (tt.rec.CachedSource == record.SourceUsage) != (rp.CachedTokens != nil) {
				t.Errorf("cached tokens %v, but the engine said them: %v", rp.CachedTokens, tt.rec.CachedSource == record.SourceUsage)
			}
		})
	}
}
