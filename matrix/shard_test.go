package matrix

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/testwindow"
	"github.com/tokentap/tokentap/merge"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/shard"
)

// shardRun is what one in-process shard did.
type shardRun struct {
	res   *result.Result
	cells map[[2]int]CellRun
	recs  []record.Record
}

// runShards runs count shards of one matrix at once against one fake
// engine, as count machines with one --start-at would.
func runShards(t *testing.T, url string, sc scenarios.Scenario, count int, lead, gap time.Duration) ([]shardRun, time.Time) {
	t.Helper()
	start := time.Now().Add(lead).Truncate(time.Millisecond)
	out := make([]shardRun, count)
	var wg sync.WaitGroup
	errs := make([]error, count)
	for i := range count {
		out[i].cells = map[[2]int]CellRun{}
		var mu sync.Mutex
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Run(context.Background(), Config{
				Target: replay.Target{BaseURL: url}, Scenario: sc,
				Shard: shard.Spec{Index: i, Count: count}, StartAt: start, Gap: gap,
				OnCell: func(c CellRun) {
					mu.Lock()
					out[i].cells[[2]int{c.Cell.Context, c.Cell.Concurrency}] = c
					mu.Unlock()
				},
				OnRecords: func(r []record.Record) {
					mu.Lock()
					out[i].recs = append(out[i].recs, r...)
					mu.Unlock()
				},
			})
			out[i].res, errs[i] = res, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d/%d: %v", i, count, err)
		}
	}
	return out, start
}

// scrapeLog serves h and notes when each GET /metrics came.
type scrapeLog struct {
	h  http.Handler
	mu sync.Mutex
	at []time.Time
}

func (s *scrapeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.mu.Unlock()
	}
	s.h.ServeHTTP(w, r)
}

func (s *scrapeLog) between(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.at {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// roundTrip writes a result as the shard's file would hold it and reads it
// back: the merge works from documents, histograms and all.
func roundTrip(t *testing.T, r *result.Result) *result.Result {
	t.Helper()
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	out, err := result.Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sharedCountersMiss says whether a Cache missed verdict came from the
// engine's prefix-cache counters while the cell's own requests were served
// from the cache (the fake's ledger says, request by request): the
// counters are the engine's, moved by every shard's requests, and a
// shard's warm-up admitted within the late tolerance of another's window
// lowers that window's rate (METHOD §10). A request the window cut has no
// usage to say it, so the counters decide where every request is cut.
func sharedCountersMiss(t *testing.T, eng *fixtures.Engine, c result.Cell, recs []record.Record) bool {
	t.Helper()
	if c.Status != result.CacheMissed || c.Cache == nil || c.Cache.Source != result.CacheCounters {
		return false
	}
	var prompt, cached int
	for _, r := range recs {
		if e, ok := eng.LedgerEntryByID(r.ResponseID); ok {
			prompt += e.PromptTokens
			cached += e.CachedTokens
		}
	}
	if prompt == 0 || float64(cached) < cell.CacheHitShare*float64(prompt) {
		return false
	}
	t.Logf("%d × %d: Cache missed by the engine's shared counters (%.1f%%) while its own requests were %.1f%% cached: another shard's traffic in its window",
		c.Context, c.Concurrency, 100*c.Cache.HitRate, 100*float64(cached)/float64(prompt))
	return true
}

// TestShardedMatrixMergesExactly runs three shards of a matrix at once
// against one fake engine, merges their documents, and checks the merge
// against the shards' records: every figure of a merged cell equals the one
// computed from all shards' records together (each judged against its own
// shard's window), and each shard kept exactly its share in flight.
func TestShardedMatrixMergesExactly(t *testing.T) {
	// Room in the KV cache for every prompt the shards keep warm: with
	// quickModel's 6,144 tokens, a busy machine's shards still ending one
	// cell's requests while another warms the next made the engine evict
	// warmed prompts (Cache missed at 79%), which is not what this test
	// is about.
	m := quickModel()
	m.KVCapacity = 65536
	eng := fixtures.StartTest(t, m)
	sc := scenarios.Scenario{Name: "sharded", Contexts: []int{0, 1024}, Concurrency: []int{1, 4}, Prefill: []int{2048},
		Window: time.Second, MaxOutput: 256, API: "chat"}
	// The schedule's gap holds each cell's drain and warm-up: 1 s on an
	// idle machine. A busy one can take longer, and a shard then opens its
	// window late (the run's own remedy: a longer --gap), so the gap grows
	// from how many windows opened on time until all did
	// (internal/test/testwindow), and the assertions below hold on that run.
	// 2.5 s ahead and the gap: each shard has time to read the engine's
	// clock.
	var runs []shardRun
	testwindow.Enough(t, time.Second, 8*time.Second, func(gap time.Duration) (got, want int) {
		runs, _ = runShards(t, eng.URL(), sc, 3, 2500*time.Millisecond+gap, gap)
		tol := shard.LateTolerance(sc.Window)
		for _, r := range runs {
			for _, c := range r.res.Decode {
				if !c.Measured || len(c.Shards) != 1 {
					continue
				}
				want++
				if c.Shards[0].LateMs <= millis(tol) {
					got++
				}
			}
		}
		return got, want
	})

	var ins []merge.Input
	for i, r := range runs {
		sh := r.res.Sharding
		if sh == nil || sh.Count != 3 || len(sh.Shards) != 1 || sh.Shards[0].Index != i {
			t.Fatalf("shard %d: sharding %+v", i, sh)
		}
		if sh.Shards[0].ClockSource == "" || math.Abs(sh.Shards[0].ClockOffsetMs) > sh.Shards[0].ClockUncertaintyMs+1 {
			t.Errorf("shard %d: clock offset %.3f ± %.3f ms (%q) against an engine in the same process",
				i, sh.Shards[0].ClockOffsetMs, sh.Shards[0].ClockUncertaintyMs, sh.Shards[0].ClockSource)
		}
		if sh.Run != runs[0].res.Sharding.Run {
			t.Errorf("shard %d is of run %q, shard 0 of %q: shards given no salt derive one from the start", i, sh.Run, runs[0].res.Sharding.Run)
		}
		// Shard 0 alone measures prefill.
		if (i == 0) != (len(r.res.Prefill) > 0) {
			t.Errorf("shard %d has %d prefill rows", i, len(r.res.Prefill))
		}
		for _, rec := range r.recs {
			if !strings.HasPrefix(rec.ID, fmt.Sprintf("s%d/", i)) {
				t.Fatalf("shard %d record id %q does not start with its shard", i, rec.ID)
			}
			if i > 0 && strings.HasPrefix(rec.Tag, "prefill") {
				t.Errorf("shard %d sent a prefill request %s", i, rec.ID)
			}
		}
		for _, c := range r.res.Decode {
			share := (shard.Spec{Index: i, Count: 3}).Share(c.Concurrency)
			if share == 0 {
				if c.Status != result.NotRun || c.Measured {
					t.Errorf("shard %d has no share of %d × %d yet it is %s", i, c.Context, c.Concurrency, c.Status)
				}
				continue
			}
			// A busy machine may make a shard open a window late (marked,
			// and the figures still exact), or another shard's warm-up
			// move the engine's shared counters (sharedCountersMiss);
			// anything else is wrong.
			ok := c.Status == result.Valid || c.Status == result.LateWindow ||
				sharedCountersMiss(t, eng, c, r.cells[[2]int{c.Context, c.Concurrency}].Records)
			if !ok || c.Sent != share || len(c.Shards) != 1 {
				t.Errorf("shard %d, %d × %d: %s (%s), sent %d, want Valid with its share %d", i, c.Context, c.Concurrency, c.Status, c.Reason, c.Sent, share)
				continue
			}
			if cs := c.Shards[0]; cs.Share != share || cs.LateMs < 0 || cs.Decoding == "" || cs.ScheduledAt.IsZero() {
				t.Errorf("shard %d, %d × %d: shard part %+v", i, c.Context, c.Concurrency, cs)
			}
			if c.AvgActiveSource != result.ActiveClient || c.AvgActive > float64(share)+0.01 || c.EngineRunning <= 0 {
				t.Errorf("shard %d, %d × %d: average active %.2f (%s), engine %.2f: a shard counts its own, the engine's gauge all",
					i, c.Context, c.Concurrency, c.AvgActive, c.AvgActiveSource, c.EngineRunning)
			}
		}
		ins = append(ins, merge.Input{Name: fmt.Sprintf("shard-%d.json", i), Doc: roundTrip(t, r.res)})
	}
	// The cells' windows opened together, on the schedule.
	for k := range runs[0].res.Decode {
		var opens []time.Time
		for _, r := range runs {
			if c := r.res.Decode[k]; c.Measured {
				opens = append(opens, c.Shards[0].Opened)
			}
		}
		if len(opens) > 1 {
			if d := slices.MaxFunc(opens, time.Time.Compare).Sub(slices.MinFunc(opens, time.Time.Compare)); d > shard.LateTolerance(sc.Window) {
				t.Errorf("cell %d: the shards opened their windows %s apart", k, d)
			}
		}
	}

	merged, sum, err := merge.Runs(ins)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dropped != 0 || len(merged.Sharding.Shards) != 3 || len(merged.Prefill) != 1 || merged.Prefill[0].Status != result.Valid {
		t.Fatalf("merged: dropped %d, shards %d, prefill %+v", sum.Dropped, len(merged.Sharding.Shards), merged.Prefill)
	}
	merged = roundTrip(t, merged)
	for _, mc := range merged.Decode {
		key := [2]int{mc.Context, mc.Concurrency}
		var parts []cell.Part
		for _, r := range runs {
			if cr, ok := r.cells[key]; ok {
				parts = append(parts, cell.Part{Records: cr.Records, Window: cr.Window})
			}
		}
		if len(parts) != min(3, mc.Concurrency) {
			t.Fatalf("%d × %d: %d shards ran it", mc.Context, mc.Concurrency, len(parts))
		}
		f := cell.DecodeAll(parts)
		want := result.Cell{Context: mc.Context, Concurrency: mc.Concurrency}
		f.Fill(&want, cell.Judge{N: mc.Concurrency, MaxWaiting: 0, AvgRunning: -1})
		label := fmt.Sprintf("%d × %d", mc.Context, mc.Concurrency)
		var all []record.Record
		for _, p := range parts {
			all = append(all, p.Records...)
		}
		if mc.Status != result.Valid && mc.Status != result.LateWindow && !sharedCountersMiss(t, eng, mc, all) {
			t.Errorf("%s: merged %s (%s)", label, mc.Status, mc.Reason)
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"TTFT ms", mc.TTFTms, want.TTFTms},
			{"TBT ms", mc.TBTms, want.TBTms},
			{"per-request tok/s", mc.PerRequestTokPerSec, want.PerRequestTokPerSec},
			{"completed", float64(mc.Completed), float64(want.Completed)},
			{"output tokens", float64(mc.OutputTokens), float64(want.OutputTokens)},
			{"sent", float64(mc.Sent), float64(want.Sent)},
			{"failed", float64(mc.FailedReqs), float64(want.FailedReqs)},
			{"peak decoding", float64(mc.PeakDecoding), float64(want.PeakDecoding)},
			{"measured for", mc.MeasuredForSeconds, want.MeasuredForSeconds},
		} {
			if c.got != c.want {
				t.Errorf("%s: merged %s %v, from all records %v", label, c.name, c.got, c.want)
			}
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"total tok/s", mc.TotalTokPerSec, want.TotalTokPerSec}, {"average active", mc.AvgActive, want.AvgActive}} {
			if math.Abs(c.got-c.want) > 1e-9*math.Max(1, c.want) {
				t.Errorf("%s: merged %s %v, from all records %v", label, c.name, c.got, c.want)
			}
		}
		if mc.Sent != mc.Concurrency || mc.PeakDecoding != mc.Concurrency {
			t.Errorf("%s: sent %d, peak %d: the shards' shares must make up N", label, mc.Sent, mc.PeakDecoding)
		}
		// Prefix cache: usage's per-request figures add exactly; without
		// them (requests cut at the window's end report no usage), every
		// shard read the engine's own counters, which count all shards'
		// requests: the merged rate is their mean.
		switch {
		case want.Cache != nil:
			if mc.Cache == nil || *mc.Cache != *want.Cache {
				t.Errorf("%s: merged prefix cache %+v, from all records %+v", label, mc.Cache, want.Cache)
			}
		default:
			var rates []float64
			for _, in := range ins {
				if c := in.Doc.Cell(mc.Context, mc.Concurrency); c.Cache != nil {
					rates = append(rates, c.Cache.HitRate)
				}
			}
			mean := 0.0
			for _, r := range rates {
				mean += r / float64(len(rates))
			}
			if mc.Cache == nil || mc.Cache.Source != result.CacheCounters || math.Abs(mc.Cache.HitRate-mean) > 1e-12 {
				t.Errorf("%s: merged prefix cache %+v; the shards' counters say %v", label, mc.Cache, rates)
			}
		}
		for _, h := range []struct {
			name string
			a, b interface {
				TotalCount() int64
				ValueAtQuantile(float64) int64
				Max() int64
				Min() int64
			}
		}{{"ttft", mc.Histograms.TTFT, want.Histograms.TTFT}, {"tbt", mc.Histograms.TBT, want.Histograms.TBT},
			{"e2e", mc.Histograms.E2E, want.Histograms.E2E}, {"rate", mc.Histograms.Rate, want.Histograms.Rate}} {
			if h.a.TotalCount() != h.b.TotalCount() || h.a.Min() != h.b.Min() || h.a.Max() != h.b.Max() {
				t.Errorf("%s: %s histogram: merged %d values [%d, %d], from records %d [%d, %d]", label, h.name,
					h.a.TotalCount(), h.a.Min(), h.a.Max(), h.b.TotalCount(), h.b.Min(), h.b.Max())
			}
			for _, q := range []float64{1, 10, 50, 90, 99, 99.9} {
				if h.a.ValueAtQuantile(q) != h.b.ValueAtQuantile(q) {
					t.Errorf("%s: %s p%g merged %d, from records %d", label, h.name, q, h.a.ValueAtQuantile(q), h.b.ValueAtQuantile(q))
				}
			}
		}
		// The merged counts are the shards' sums.
		var ttft, tbt int64
		for _, in := range ins {
			for _, c := range in.Doc.Decode {
				if c.Context == mc.Context && c.Concurrency == mc.Concurrency && c.Histograms != nil {
					ttft += c.Histograms.TTFT.TotalCount()
					tbt += c.Histograms.TBT.TotalCount()
				}
			}
		}
		if mc.Histograms.TTFT.TotalCount() != ttft || mc.Histograms.TBT.TotalCount() != tbt {
			t.Errorf("%s: merged histogram counts %d TTFT, %d TBT; the shards' sum %d, %d", label,
				mc.Histograms.TTFT.TotalCount(), mc.Histograms.TBT.TotalCount(), ttft, tbt)
		}
	}
}

// TestShardPromptsAreTheSingleRunsPrompts: every shard builds only its own
// slots' prompts, and together the shards' prompts of a cell are exactly
// those a single-process run sends, each once.
func TestShardPromptsAreTheSingleRunsPrompts(t *testing.T) {
	words := prompts.CounterFunc(func(_ context.Context, _, text string) (int, error) {
		return len(strings.Fields(text)), nil
	})
	ctx := context.Background()
	for _, n := range []int{1, 2, 5, 7, 64} {
		single, err := prompts.NewBuilder("salt", words).Prompts(ctx, 300, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, count := range []int{1, 2, 3, 4} {
			seen := map[string]int{}
			for i := range count {
				sp := shard.Spec{Index: i, Count: count}
				ps, err := prompts.NewBuilder("salt", words).Slots(ctx, 300, sp.Slots(n))
				if err != nil {
					t.Fatal(err)
				}
				if len(ps) != sp.Share(n) {
					t.Fatalf("n=%d shard %s: %d prompts, share %d", n, sp, len(ps), sp.Share(n))
				}
				for j, p := range ps {
					if p.Slot != sp.Slot(j) || p.Text != single[p.Slot].Text {
						t.Fatalf("n=%d shard %s stream %d: slot %d's prompt differs from the single run's", n, sp, j, p.Slot)
					}
					seen[p.Text]++
				}
			}
			if len(seen) != n {
				t.Errorf("n=%d over %d shards: %d distinct prompts", n, count, len(seen))
			}
			for _, k := range seen {
				if k != 1 {
					t.Errorf("n=%d over %d shards: a prompt sent by %d shards", n, count, k)
				}
			}
		}
	}
}

// TestShardRefusesBadSchedules: a shard without a start, with one already
// past, or with too short a gap fails before any load.
func TestShardRefusesBadSchedules(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Contexts: []int{0}, Concurrency: []int{2}, Window: time.Second, MaxOutput: 16}
	for _, tc := range []struct {
		name  string
		cfg   Config
		words string
	}{
		{"no start", Config{Shard: shard.Spec{Index: 0, Count: 2}}, "--start-at"},
		{"start past", Config{Shard: shard.Spec{Index: 0, Count: 2}, StartAt: time.Now().Add(-time.Second)}, "passed"},
		{"short gap", Config{Shard: shard.Spec{Index: 1, Count: 2}, StartAt: time.Now().Add(time.Minute), Gap: 100 * time.Millisecond}, "gap"},
		{"bad index", Config{Shard: shard.Spec{Index: 2, Count: 2}, StartAt: time.Now().Add(time.Minute)}, "index"},
	} {
		tc.cfg.Target = replay.Target{BaseURL: eng.URL()}
		tc.cfg.Scenario = sc
		res, err := Run(context.Background(), tc.cfg)
		if err == nil || res != nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v, %v; want an error saying %q", tc.name, res, err, tc.words)
		}
	}
	if n := len(eng.Ledger()); n != 0 {
		t.Errorf("the engine got %d generation requests from refused shards", n)
	}
}

// TestShardsWaitOutOthersWindows: a shard with no share of a cell does not
// poll the engine's gauges (draining for its next cell) through the other
// shards' window of it; only the running shard's sampler, every 250 ms,
// reads /metrics then. Another client's long stream keeps the engine busy,
// so a drain that started would poll until its deadline.
func TestShardsWaitOutOthersWindows(t *testing.T) {
	eng := fixtures.New(quickModel())
	scrapes := &scrapeLog{h: eng.Handler()}
	srv := httptest.NewServer(scrapes)
	defer srv.Close()
	go func() {
		body := fmt.Sprintf(`{"model":%q,"prompt":"busy","max_tokens":250,"ignore_eos":true,"stream":true}`, quickModel().Name)
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	sc := scenarios.Scenario{Name: "wait", Contexts: []int{0}, Concurrency: []int{1, 2}, Window: time.Second, MaxOutput: 64, API: "chat"}
	runs, start := runShards(t, srv.URL, sc, 2, 1500*time.Millisecond, time.Second)
	w := runs[0].cells[[2]int{0, 1}].Window
	if w.Len() <= 0 {
		t.Fatal("shard 0 did not run 0 × 1")
	}
	if n := scrapes.between(start.Add(w.Start), start.Add(w.End)); n > 8 {
		t.Errorf("the engine's /metrics was read %d times during a 1 s window only shard 0 ran (its sampler reads it 4 or 5 times)", n)
	}
}
