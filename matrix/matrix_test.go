package matrix

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// accuracyModel is a fake engine whose figures are easy to predict: the
// time between tokens depends only on how many requests run (15 ms + 1 ms
// per running request), the first token comes 200 ms after a cached prompt,
// at most 4 requests run at once, and the KV cache holds 6,144 tokens.
func accuracyModel() fixtures.Model {
	m := fixtures.DefaultModel()
	m.Name = "accuracy"
	m.MaxModelLen = 8192
	m.PrefillTokPerSec = 200000
	m.PrefillSlowdown = 0
	m.FirstEventDelay = 200 * time.Millisecond
	m.TBTBase = 15 * time.Millisecond
	m.TBTPerRunning = time.Millisecond
	m.TBTPerKTokens = 0
	m.MaxRunning = 4
	m.KVCapacity = 6144
	m.BlockSize = 16
	return m
}

// quickModel is accuracyModel with a 20 ms first token, for tests that
// need tokens soon in short windows, not figures.
func quickModel() fixtures.Model {
	m := accuracyModel()
	m.FirstEventDelay = 20 * time.Millisecond
	return m
}

// accuracyScenario: contexts 0, 1K and 3K (the 3K row fails: the engine
// answers HTTP 500 to every prompt of 2,500+ tokens), concurrency 1–8, 256
// output tokens (longer than a window, so every request decodes throughout).
func accuracyScenario() scenarios.Scenario {
	return scenarios.Scenario{
		Name:        "accuracy",
		Contexts:    []int{0, 1024, 3072},
		Concurrency: []int{1, 2, 4, 8},
		Prefill:     []int{1024},
		Window:      1500 * time.Millisecond,
		MaxOutput:   256,
		API:         "chat",
	}
}

// TestMatrixAgainstModel runs a full small matrix against the fake engine.
// The fake's performance model predicts every cell's status, total tok/s,
// time between tokens and TTFT; the measured values must match within ±3%.
// Where the busy test machine kept the fake from keeping its own schedule,
// the prediction is replaced by the fake's ledger (what it really sent and
// when), which the measured values must match within ±3% in every case.
func TestMatrixAgainstModel(t *testing.T) {
	m := accuracyModel()
	fault, err := fixtures.ParseFault("status=500,min-prompt=2500")
	if err != nil {
		t.Fatal(err)
	}
	eng := fixtures.StartTest(t, m, fixtures.WithFaults(fault))
	var (
		mu   sync.Mutex
		runs []CellRun
	)
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		Target:   replay.Target{BaseURL: eng.URL()},
		Scenario: accuracyScenario(),
		Progress: &progress,
		OnCell: func(c CellRun) {
			mu.Lock()
			runs = append(runs, c)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the fake finish the ledger entries of cancelled streams

	// Statuses: N × (C + 256) > 6,144 is Over capacity; 8 streams at C=0
	// exceed MaxRunning 4 (Requests queued); the 3K row fails.
	wantStatus := map[[2]int]result.Status{
		{0, 1}: result.Valid, {0, 2}: result.Valid, {0, 4}: result.Valid, {0, 8}: result.RequestsQueued,
		{1024, 1}: result.Valid, {1024, 2}: result.Valid, {1024, 4}: result.Valid, {1024, 8}: result.OverCapacity,
		{3072, 1}: result.Failed, {3072, 2}: result.OverCapacity, {3072, 4}: result.OverCapacity, {3072, 8}: result.OverCapacity,
	}
	for cn, st := range wantStatus {
		c := res.Cell(cn[0], cn[1])
		if c == nil {
			t.Fatalf("no cell C=%d N=%d", cn[0], cn[1])
		}
		if c.Status != st {
			t.Errorf("C=%d N=%d: status %s (%s), want %s", cn[0], cn[1], c.Status, c.Reason, st)
		}
	}
	if q := res.Cell(0, 8); q.MaxWaiting != 4 {
		t.Errorf("C=0 N=8: max waiting %d, want 4 (the fake's gauge)", q.MaxWaiting)
	}
	if len(runs) != 8 {
		t.Fatalf("%d cells measured, want 8", len(runs))
	}

	within := func(what string, got, want, tol float64) bool {
		if want == 0 || math.Abs(got-want)/want > tol {
			t.Errorf("%s: measured %.3f, want %.3f (±%.0f%%)", what, got, want, tol*100)
			return false
		}
		return true
	}
	for _, run := range runs {
		c := run.Cell
		name := "C=" + TokenLabel(c.Context) + " N=" + itoa(c.Concurrency)
		if c.Status == result.Failed {
			if c.Measured && c.OutputTokens != 0 {
				t.Errorf("%s: failed cell counted %d tokens", name, c.OutputTokens)
			}
			continue
		}
		// The achieved context is recorded per cell (METHOD §4), even
		// though every request was cancelled before the engine's usage.
		if c.Context > 0 && (c.PromptTokens < c.Context-16 || c.PromptTokens > c.Context+16) {
			t.Errorf("%s: prompt tokens %d, want %d ± 16", name, c.PromptTokens, c.Context)
		}
		truth := ledgerTruth(t, eng, run)
		running := min(c.Concurrency, m.MaxRunning)
		w := run.Window.End - run.Window.Start
		tbt := m.TBT(running, 0)
		ttft := m.FirstEventDelay + m.PrefillTime(truth.uncached)
		perReq := int((w-ttft)/tbt) + 1
		nominal := struct{ tokS, tbtMs, ttftMs float64 }{
			tokS:   float64(running*perReq) / w.Seconds(),
			tbtMs:  ms(tbt),
			ttftMs: ms(ttft),
		}
		// Against the ledger: always. Times may sit anywhere in the ledger's
		// range, ±3% (with a floor of 0.1 ms for TBT and 1 ms for TTFT: a
		// busy fake writes a late event's successors back to back).
		// A token in flight at either edge of the window may land on the
		// other side of it: allow one per stream beyond the 3%.
		edge := float64(running) / w.Seconds()
		inRange(t, name+" total tok/s vs the fake's ledger", c.TotalTokPerSec, truth.tokS, truth.tokS, 0.03, edge)
		inRange(t, name+" TBT vs the fake's ledger", c.TBTms, truth.tbtLo, truth.tbtHi, 0.03, 0.1)
		inRange(t, name+" TTFT vs the fake's ledger", c.TTFTms, truth.ttftLo, truth.ttftHi, 0.03, 1)
		// Against the model: where the fake kept its schedule (its ledger
		// medians within 2% of the model; Go timers oversleep a little, and
		// the fake forgives stalls rather than making them up) and took the
		// requests in promptly (intake under 1% of the modelled TTFT).
		kept := math.Abs(truth.tbtMs-nominal.tbtMs)/nominal.tbtMs < 0.02 &&
			math.Abs(truth.ttftMs-nominal.ttftMs)/nominal.ttftMs < 0.02 &&
			truth.intakeMs < 0.01*nominal.ttftMs &&
			math.Abs(truth.tokS-nominal.tokS)/nominal.tokS < 0.02
		if kept {
			// ±3% beyond what the fake itself strayed from its model (under
			// 2%, by kept): tokentap answers for its own error, the ledger
			// check above, not for the machine's (a 208.9 ms TTFT failed
			// against 200.1 ± 3% where the fake's own first events were late
			// by 2%, on a machine with two busy loops).
			dev := func(ledger, model float64) float64 { return 0.03 + math.Abs(ledger-model)/model }
			within(name+" total tok/s vs the model", c.TotalTokPerSec, nominal.tokS, dev(truth.tokS, nominal.tokS))
			within(name+" TBT vs the model", c.TBTms, nominal.tbtMs, dev(truth.tbtMs, nominal.tbtMs))
			within(name+" TTFT vs the model", c.TTFTms, nominal.ttftMs, dev(truth.ttftMs, nominal.ttftMs))
		} else {
			t.Logf("%s: the fake fell behind its model on this busy machine (ledger %.1f tok/s, TBT %.2f ms, TTFT %.1f ms after %.2f ms intake; model %.1f, %.2f, %.1f): checked against the ledger only",
				name, truth.tokS, truth.tbtMs, truth.ttftMs, truth.intakeMs, nominal.tokS, nominal.tbtMs, nominal.ttftMs)
		}
	}

	// Prefill at 1K is measured during the 1K row's warm-up.
	if len(res.Prefill) != 1 || res.Prefill[0].Status != result.Valid || !res.Prefill[0].DuringWarmup {
		t.Fatalf("prefill rows %+v", res.Prefill)
	}
	if p := res.Prefill[0]; p.PromptTokens < 1024-16 || p.PromptTokens > 1024+16 {
		t.Errorf("prefill prompt %d tokens, want 1024 ± 16", p.PromptTokens)
	}
	if res.Settings.PrefillMode != "Measured during decode warm-up" || res.Engine.Name != "vllm" || res.Settings.KVCapacity != 6144 {
		t.Errorf("settings %+v, engine %+v", res.Settings, res.Engine)
	}
	if !strings.Contains(progress.String(), "decode context 1K, N=4") {
		t.Errorf("progress lacks the cell lines:\n%s", progress.String())
	}
}

// truth is a cell's figures from the fake's ledger. The fake stamps each
// event when its write returned (At) and knows when it was due (Due); the
// bytes left somewhere between the two, so TTFT and TBT are known as a range
// [lo, hi] (lo == hi when the fake kept its schedule).
type truth struct {
	tokS           float64
	tbtLo, tbtHi   float64
	ttftLo, ttftHi float64
	tbtMs, ttftMs  float64 // the At-based medians
	// intakeMs is the median time from the request reaching the fake's
	// socket to its handler's start (Received), which a busy machine
	// stretches: part of the ledger's TTFT, not of the model's.
	intakeMs float64
	uncached int
}

// ledgerTruth computes a cell's figures from what the fake says it sent,
// with the same window, mapped onto the run clock.
func ledgerTruth(t *testing.T, eng *fixtures.Engine, run CellRun) truth {
	t.Helper()
	off := func(at time.Time) time.Duration { return at.Sub(run.Clock.Start()) }
	in := func(d time.Duration) bool { return d >= run.Window.Start && d < run.Window.End }
	var (
		tokens          int
		gapsAt, gapsDue []time.Duration
		ttftAt, ttftDue []time.Duration
		ttftLeft        []time.Duration
		intake          []time.Duration
		unc             []int
	)
	for _, r := range run.Records {
		if r.ResponseID == "" {
			continue // never answered (queued until cancelled)
		}
		le, ok := eng.LedgerEntryByID(r.ResponseID)
		if !ok {
			t.Fatalf("no ledger entry for %s", r.ResponseID)
		}
		for i, ev := range le.Events {
			if !in(off(ev.At)) {
				continue
			}
			tokens += ev.Tokens
			if i > 0 {
				gapsAt = append(gapsAt, ev.At.Sub(le.Events[i-1].At))
				gapsDue = append(gapsDue, ev.Due.Sub(le.Events[i-1].Due))
			}
		}
		if in(r.Sent) && !le.FirstToken.IsZero() {
			// The TTFT a client sees starts at the engine's door, when the
			// request reached its socket: a busy fake takes milliseconds
			// more to start its handler (intake), and that wait is the
			// engine's too.
			door := le.Arrived
			if door.IsZero() {
				door = le.Received // no kernel stamp (the fake's first milliseconds)
			}
			ttftAt = append(ttftAt, le.FirstToken.Sub(door))
			// The fake stamps an event as it starts writing it; a busy
			// machine may hold the write up (its Write, in the ledger),
			// and the event leaves at its end.
			ttftLeft = append(ttftLeft, le.FirstToken.Add(le.Events[0].Write).Sub(door))
			intake = append(intake, max(0, le.Received.Sub(door)))
			ttftDue = append(ttftDue, le.Events[0].Due.Sub(door))
			unc = append(unc, le.PromptTokens-le.CachedTokens)
		}
	}
	med := func(d []time.Duration) float64 {
		if len(d) == 0 {
			t.Fatalf("cell C=%d N=%d: nothing in the ledger to compare with", run.Cell.Context, run.Cell.Concurrency)
		}
		// The lower middle of an even count, as the cell's HDR p50 reads
		// it: two requests whose TTFTs differ (one waited for the other's
		// prefill) must be compared request for request.
		slices.Sort(d)
		return ms(d[(len(d)-1)/2])
	}
	slices.Sort(unc)
	tr := truth{
		tokS:     float64(tokens) / (run.Window.End - run.Window.Start).Seconds(),
		tbtMs:    med(gapsAt),
		ttftMs:   med(ttftAt),
		intakeMs: med(intake),
		uncached: unc[len(unc)/2],
	}
	tbtDue, ttftD := med(gapsDue), med(ttftDue)
	tr.tbtLo, tr.tbtHi = min(tr.tbtMs, tbtDue), max(tr.tbtMs, tbtDue)
	tr.ttftLo, tr.ttftHi = min(tr.ttftMs, ttftD), max(tr.ttftMs, ttftD, med(ttftLeft))
	return tr
}

// inRange checks got against [lo, hi] widened by tol (relative) or floor
// (absolute, ms), whichever is larger.
func inRange(t *testing.T, what string, got, lo, hi, tol, floor float64) {
	t.Helper()
	if got < lo-max(lo*tol, floor) || got > hi+max(hi*tol, floor) {
		t.Errorf("%s: measured %.3f, the fake's ledger says %.3f to %.3f (±%.0f%%)", what, got, lo, hi, tol*100)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func itoa(n int) string { return TokenLabel(n) }

// TestInterrupted cancels a run in its second cell: the result keeps the
// cells done, marks the rest Not run and says it was interrupted.
func TestInterrupted(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cells := 0
	sc := accuracyScenario()
	sc.Window = 600 * time.Millisecond
	res, err := Run(ctx, Config{
		Target:   replay.Target{BaseURL: eng.URL()},
		Scenario: sc,
		OnCell: func(CellRun) {
			cells++
			if cells == 2 {
				go func() { time.Sleep(100 * time.Millisecond); cancel() }()
			}
		},
	})
	if !errors.Is(err, ErrInterrupted) || res == nil {
		t.Fatalf("err %v, result %v; want ErrInterrupted with a partial result", err, res != nil)
	}
	if !res.Interrupted || res.Ended.IsZero() {
		t.Error("result not marked interrupted or not ended")
	}
	counts := map[result.Status]int{}
	for _, c := range res.Decode {
		counts[c.Status]++
	}
	if counts[result.Valid] != 2 || counts[result.NotRun] == 0 || counts[result.OverCapacity] != 4 {
		t.Errorf("statuses %v; want 2 valid, the rest of the runnable cells not run, 4 over capacity", counts)
	}
}

// TestUnreachable: a target nothing listens on is an error before any load,
// with no result.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: "http://" + addr}, Scenario: accuracyScenario()})
	if err == nil || res != nil {
		t.Fatalf("err %v, result %v", err, res)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the target", err)
	}
}

// TestDroppedAndOverrides: a context that does not fit the max model length
// is dropped with a note; --kv-capacity overrides the probe and is recorded
// as a fact from the flag. The fake is vLLM, which allocates per step: a
// cell is ruled out before load only when its prompts and one token each
// do not fit (64 × (512 + 1) > 1,000), not by its max_tokens (64 × (0 +
// 256) is run).
func TestDroppedAndOverrides(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	sc := accuracyScenario()
	sc.Contexts = []int{0, 512, 8192}
	sc.Concurrency = []int{1, 64}
	sc.Prefill = nil
	sc.Window = 600 * time.Millisecond
	var recs int
	res, err := Run(context.Background(), Config{
		Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc, KVCapacity: 1000,
		OnRecords: func(r []record.Record) { recs += len(r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Settings.Dropped, []int{8192}) || !strings.Contains(strings.Join(res.Notes, " "), "8K dropped") {
		t.Errorf("dropped %v, notes %q", res.Settings.Dropped, res.Notes)
	}
	if c := res.Cell(512, 64); c == nil || c.Status != result.OverCapacity || !strings.Contains(c.Reason, "1000") || !strings.Contains(c.Reason, "64 × (512 + 1)") {
		t.Errorf("cell 512/64 %+v; want Over capacity against the given 1,000 tokens", c)
	}
	if c := res.Cell(0, 64); c == nil || !c.Measured {
		t.Errorf("cell 0/64 %+v; want it run: per step, 64 × (0 + 1) fits 1,000 tokens", c)
	}
	if c := res.Cell(0, 1); c == nil || c.Status != result.Valid {
		t.Errorf("cell 0/1 %+v", c)
	}
	found := false
	for _, f := range res.Probes {
		found = found || (f.Name == "kv_capacity_tokens" && strings.Contains(f.Source, "--kv-capacity") && f.Value == "1000")
	}
	if !found {
		t.Errorf("no kv capacity fact from the flag in %+v", res.Probes)
	}
	if recs == 0 {
		t.Error("OnRecords saw no records")
	}
}

// TestNothingToMeasure: a run whose plan keeps no decode cell (every
// context too long for the engine, or every cell over its KV capacity) is
// an error before any load, saying why, with no result; it used to run
// "0 of 0 decode cells", write an empty result and exit 0.
func TestNothingToMeasure(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	maxLen := quickModel().MaxModelLen
	for _, tt := range []struct {
		name string
		edit func(sc *scenarios.Scenario)
		kv   int
		says string
	}{
		{"every context too long", func(sc *scenarios.Scenario) { sc.Contexts = []int{maxLen * 2} }, 0, "exceeds the engine's max model length"},
		{"max output too long", func(sc *scenarios.Scenario) { sc.Contexts = []int{0}; sc.MaxOutput = maxLen + 1 }, 0, "Context 0 dropped"},
		{"every cell over capacity", func(sc *scenarios.Scenario) { sc.Contexts = []int{1024} }, 500, "needs more KV cache than the engine's 500 tokens"},
		{"every rate over capacity", func(sc *scenarios.Scenario) { sc.Contexts = []int{1024}; sc.Concurrency = nil; sc.Rates = []float64{1} }, 500, "500 tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := accuracyScenario()
			tt.edit(&sc)
			var recs int
			res, err := Run(context.Background(), Config{
				Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc, KVCapacity: tt.kv,
				OnRecords: func(r []record.Record) { recs += len(r) },
			})
			if res != nil || !errors.Is(err, ErrNothingToMeasure) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("result %v, err %v; want no result and ErrNothingToMeasure saying %q", res != nil, err, tt.says)
			}
			if recs != 0 {
				t.Errorf("%d requests were sent", recs)
			}
		})
	}
}

// TestRequestSettingsRecorded: the scenario settings that shape requests
// (shared prefix, sampling, extra fields) are in the result, so runs that
// differ in them do not compare as identical; and a context no longer
// than the shared prefix keeps its length (context 0 sent 257-token
// prompts under a 256-token prefix and was still labelled 0).
func TestRequestSettingsRecorded(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	sc := accuracyScenario()
	sc.Contexts = []int{0, 1024}
	sc.Concurrency = []int{2}
	sc.Prefill = nil
	sc.Window = 500 * time.Millisecond
	sc.MaxOutput = 16
	sc.SharedPrefix = 256
	temp, seed := 0.7, int64(42)
	sc.Sampling = scenarios.Sampling{Temperature: &temp, Seed: &seed}
	sc.Extra = map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}
	var mu sync.Mutex
	longest := map[string]int{}
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
		OnRecords: func(recs []record.Record) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				for _, row := range []string{"C=0 ", "C=1024 "} {
					if strings.Contains(r.ID, row) {
						longest[row] = max(longest[row], r.PromptTokens)
					}
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Settings
	if s.SharedPrefix != 256 || s.Sampling["temperature"] != 0.7 || s.Sampling["seed"] != int64(42) || s.RequestFields["chat_template_kwargs"] == nil {
		t.Errorf("settings %+v: want the shared prefix, sampling and extra fields recorded", s)
	}
	if err := schematest.Result(res); err != nil {
		t.Errorf("schema: %v", err)
	}
	if n := longest["C=0 "]; n == 0 || n > 64 {
		t.Errorf("context 0's prompts were %d tokens; want a minimal prompt, not the shared prefix", n)
	}
	if n := longest["C=1024 "]; n < 1000 || n > 1100 {
		t.Errorf("context 1K's prompts were %d tokens", n)
	}
	if !strings.Contains(strings.Join(res.Notes, " "), "Shared prefix of 256 tokens: the prompts of 0 share nothing") {
		t.Errorf("notes %q", res.Notes)
	}
}
