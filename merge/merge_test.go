package merge

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/shard"
)

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const window = 10 * time.Second

// decodingRec is a request of one shard that decodes from first to end
// (offsets from the common start) with a token every 50 ms.
func decodingRec(id string, sent, first, end time.Duration) record.Record {
	r := record.Record{ID: id, Sent: sent, Stream: true, MaxTokens: 8192, Outcome: record.Cancelled, Blame: record.BlameClient,
		Wall: start.Add(sent)}
	for at := first; at < end; at += 50 * time.Millisecond {
		r.AddEvent(at, 1)
	}
	r.End = end
	return r
}

// shardDoc is shard i of count of a one-cell run (0 × n) whose requests
// decode over the intervals given (from, to: offsets into the window), as
// matrix would write it: figures from cell.Decode, the shard's part with
// its decoding steps.
func shardDoc(i, count, n int, lateMs float64, iv ...[2]time.Duration) *result.Result {
	open := window + time.Duration(lateMs*float64(time.Millisecond)) // the window opens one gap (10 s) after the start
	w := cell.Window{Start: open, End: open + window}
	var recs []record.Record
	for j, v := range iv {
		recs = append(recs, decodingRec(fmt.Sprintf("s%d/C=0 N=%d#%d", i, n, j), open, open+v[0], open+v[1]))
	}
	f := cell.Decode(recs, w)
	share := (shard.Spec{Index: i, Count: count}).Share(n)
	c := result.Cell{Context: 0, Concurrency: n, MaxWaiting: -1}
	j := cell.Judge{N: share, MaxWaiting: -1, AvgRunning: -1}
	c.Status = cell.Status(f, j)
	f.Fill(&c, j)
	c.Shards = []result.CellShard{{Index: i, Share: share, ScheduledAt: start.Add(window), Opened: start.Add(open), LateMs: lateMs,
		TotalTokPerSec: c.TotalTokPerSec, OutputTokens: c.OutputTokens, Decoding: f.Decoding.Encode(open)}}
	return &result.Result{
		Schema:  result.SchemaVersion,
		Tool:    result.Tool{Name: "tokentap", Version: "test"},
		Started: start.Add(-3 * time.Second), Ended: start.Add(25 * time.Second),
		Engine: result.Engine{Name: "vllm"}, Model: result.Model{Served: "m"},
		Settings: result.Settings{DecodeTest: "Fixed duration", WindowSeconds: window.Seconds(), MaxOutput: 8192,
			Contexts: []int{0}, Concurrency: []int{n}, API: "chat"},
		Probes: []result.Fact{{Name: "kv_capacity_tokens", Value: "81920", Source: "GET /metrics"}},
		Decode: []result.Cell{c},
		Notes:  []string{fmt.Sprintf("Shard %d of %d of run r1: each cell's N requests are split.", i, count), "Contexts 64K dropped."},
		Sharding: &result.Sharding{Run: "r1", Count: count, StartAt: start, GapSeconds: 10,
			Shards: []result.ShardInfo{{Index: i, ClockSource: "GET /v1/models Date header", ClockUncertaintyMs: 1,
				Started: start.Add(-3 * time.Second), Ended: start.Add(25 * time.Second)}}},
	}
}

// full is a shard whose every request decodes through the whole window.
func full(i, count, n int) *result.Result {
	share := (shard.Spec{Index: i, Count: count}).Share(n)
	iv := make([][2]time.Duration, share)
	for j := range iv {
		iv[j] = [2]time.Duration{100 * time.Millisecond, window + time.Second}
	}
	return shardDoc(i, count, n, 0.5, iv...)
}

func inputs(docs ...*result.Result) []Input {
	out := make([]Input, len(docs))
	for i, d := range docs {
		out[i] = Input{Name: fmt.Sprintf("shard-%d.json", i), Doc: d}
	}
	return out
}

func TestMergeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		docs  func() []*result.Result
		words string
	}{
		{"not a shard", func() []*result.Result {
			d := full(0, 2, 4)
			d.Sharding = nil
			return []*result.Result{d, full(1, 2, 4)}
		}, "not a shard of a sharded run"},
		{"merged already", func() []*result.Result {
			d := full(0, 2, 4)
			d.Sharding.Shards = append(d.Sharding.Shards, result.ShardInfo{Index: 1})
			return []*result.Result{d}
		}, "already a merged run"},
		{"other run", func() []*result.Result {
			d := full(1, 2, 4)
			d.Sharding.Run = "r2"
			return []*result.Result{full(0, 2, 4), d}
		}, "different runs"},
		{"other count", func() []*result.Result { return []*result.Result{full(0, 2, 4), full(1, 3, 4)} }, "agree on their number"},
		{"other start", func() []*result.Result {
			d := full(1, 2, 4)
			d.Sharding.StartAt = start.Add(time.Second)
			return []*result.Result{full(0, 2, 4), d}
		}, "share one schedule"},
		{"missing", func() []*result.Result { return []*result.Result{full(0, 3, 4), full(1, 3, 4)} }, "shard 2 missing"},
		{"twice", func() []*result.Result { return []*result.Result{full(0, 2, 4), full(1, 2, 4), full(1, 2, 4)} }, "both shard 1"},
		{"settings", func() []*result.Result {
			d := full(1, 2, 4)
			d.Settings.MaxOutput = 4096
			return []*result.Result{full(0, 2, 4), d}
		}, "max_output 8192 against 4096"},
		{"prefill repeats", func() []*result.Result {
			d := full(1, 2, 4)
			d.Settings.PrefillRepeats = 5
			return []*result.Result{full(0, 2, 4), d}
		}, "prefill_repeats"},
		{"facts", func() []*result.Result {
			d := full(1, 2, 4)
			d.Probes[0].Value = "40960"
			return []*result.Result{full(0, 2, 4), d}
		}, "kv_capacity_tokens (GET /metrics) = 81920"},
		{"model", func() []*result.Result {
			d := full(1, 2, 4)
			d.Model.Served = "other"
			return []*result.Result{full(0, 2, 4), d}
		}, "model"},
		{"windows apart", func() []*result.Result {
			late := shardDoc(1, 2, 4, 11000, [2]time.Duration{0, window}, [2]time.Duration{0, window})
			return []*result.Result{full(0, 2, 4), late}
		}, "do not overlap"},
		{"histogram settings", func() []*result.Result {
			d := full(1, 2, 4)
			d.Decode[0].Histograms.TBT = hdr.New(1, 1000, 2)
			return []*result.Result{full(0, 2, 4), d}
		}, "settings differ"},
	} {
		_, _, err := Runs(inputs(tc.docs()...))
		if err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v; want a refusal saying %q", tc.name, err, tc.words)
		}
	}
	if _, _, err := Runs(nil); err == nil {
		t.Error("merging nothing succeeded")
	}
}

func TestMergeFigures(t *testing.T) {
	docs := []*result.Result{full(0, 3, 7), full(1, 3, 7), full(2, 3, 7)}
	m, sum, err := Runs(inputs(docs[2], docs[0], docs[1])) // any order
	if err != nil {
		t.Fatal(err)
	}
	c := m.Decode[0]
	if c.Status != result.Valid || c.PeakDecoding != 7 || c.Sent != 7 || sum.Dropped != 0 || sum.Shards != 3 {
		t.Fatalf("merged %+v, %+v", c, sum)
	}
	var tok, active float64
	var out int
	for _, d := range docs {
		tok += d.Decode[0].TotalTokPerSec
		active += d.Decode[0].AvgActive
		out += d.Decode[0].OutputTokens
	}
	if c.TotalTokPerSec != tok || c.AvgActive != active || c.OutputTokens != out || c.AvgActiveSource != result.ActiveClient {
		t.Errorf("merged tok/s %v active %v output %d; shards add to %v, %v, %d", c.TotalTokPerSec, c.AvgActive, c.OutputTokens, tok, active, out)
	}
	if len(c.Shards) != 3 || c.Shards[0].Index != 0 || c.Shards[0].Share != 3 || c.Shards[2].Share != 2 || c.Shards[1].Decoding != "" {
		t.Errorf("merged shard parts %+v", c.Shards)
	}
	if len(m.Sharding.Shards) != 3 || m.Sharding.Shards[1].Index != 1 || m.Sharding.Run != "r1" {
		t.Errorf("merged sharding %+v", m.Sharding)
	}
	// Notes: the shards' own "this is shard I" notes go, a note every shard
	// made stays once.
	joined := strings.Join(m.Notes, "\n")
	if strings.Contains(joined, "Shard 1 of 3 of run") || strings.Count(joined, "Contexts 64K dropped.") != 1 || !strings.Contains(joined, "Merged from 3 shards") {
		t.Errorf("merged notes:\n%s", joined)
	}
	// The document round-trips and reads like any run.
	var b bytes.Buffer
	if err := m.Write(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := result.Read(&b); err != nil {
		t.Fatal(err)
	}
}

// TestMergeStatus: a merged cell takes the worst of its shards' statuses,
// or worse where only the shards together can tell.
func TestMergeStatus(t *testing.T) {
	set := func(d *result.Result, st result.Status, reason string) *result.Result {
		d.Decode[0].Status, d.Decode[0].Reason = st, reason
		return d
	}
	for _, tc := range []struct {
		name   string
		docs   []*result.Result
		want   result.Status
		reason string
	}{
		{"all valid", []*result.Result{full(0, 2, 4), full(1, 2, 4)}, result.Valid, ""},
		{"one cache missed", []*result.Result{full(0, 2, 4), set(full(1, 2, 4), result.CacheMissed, "missed")}, result.CacheMissed, "shard 1: missed"},
		{"failed beats over capacity", []*result.Result{set(full(0, 2, 4), result.OverCapacity, "no room"), set(full(1, 2, 4), result.Failed, "500")}, result.Failed, "shard 1: 500"},
		{"queued beats late", []*result.Result{set(full(0, 2, 4), result.LateWindow, "late"), set(full(1, 2, 4), result.RequestsQueued, "queued")}, result.RequestsQueued, "shard 1: queued"},
		{"share 0 does not count", []*result.Result{full(0, 3, 1), set(full(1, 3, 1), result.NotRun, "no share"), set(full(2, 3, 1), result.NotRun, "no share")}, result.Valid, ""},
		// Each shard had both its requests decoding, but never at the same
		// time as the other's: only 2 of 4 ran at once.
		{"queued across shards", []*result.Result{
			shardDoc(0, 2, 4, 0.5, [2]time.Duration{0, 5 * time.Second}, [2]time.Duration{0, 5 * time.Second}),
			shardDoc(1, 2, 4, 0.5, [2]time.Duration{5 * time.Second, 10 * time.Second}, [2]time.Duration{5 * time.Second, 10 * time.Second}),
		}, result.RequestsQueued, "at most 2 of the 4 requests, over all shards"},
		// A Failed cell's windows end when its requests fail, each
		// shard's at its own instant: they need not overlap.
		{"failed, windows apart", []*result.Result{set(full(0, 2, 4), result.Failed, "500"),
			set(shardDoc(1, 2, 4, 11000, [2]time.Duration{0, window}, [2]time.Duration{0, window}), result.Failed, "500")},
			result.Failed, "500"},
		// Shard 1 opened its window 400 ms after shard 0.
		{"opened apart", []*result.Result{full(0, 2, 4), shardDoc(1, 2, 4, 400, [2]time.Duration{0, 11 * time.Second}, [2]time.Duration{0, 11 * time.Second})},
			result.LateWindow, "400ms apart"},
	} {
		m, _, err := Runs(inputs(tc.docs...))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		c := m.Decode[0]
		if c.Status != tc.want || !strings.Contains(c.Reason, tc.reason) {
			t.Errorf("%s: %s (%s), want %s (%q)", tc.name, c.Status, c.Reason, tc.want, tc.reason)
		}
	}
}

// TestMergeCorrectsClocks: shard 1's clock ran 400 ms ahead of shard 0's,
// as both read against the engine: by its own clock it opened 400 ms late,
// by the engine's with the others.
func TestMergeCorrectsClocks(t *testing.T) {
	ahead := shardDoc(1, 2, 4, 400, [2]time.Duration{0, 11 * time.Second}, [2]time.Duration{0, 11 * time.Second})
	ahead.Sharding.Shards[0].ClockOffsetMs = 400
	m, sum, err := Runs(inputs(full(0, 2, 4), ahead))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Decode[0]; c.Status != result.Valid || c.PeakDecoding != 4 {
		t.Errorf("clock-corrected: %s (%s), peak %d", c.Status, c.Reason, c.PeakDecoding)
	}
	if sum.ClockSpreadMs != 400 || !strings.Contains(strings.Join(m.Notes, " "), "400.0 ms") {
		t.Errorf("spread %v, notes %q", sum.ClockSpreadMs, m.Notes)
	}
	// Within the offsets' uncertainty nothing is corrected.
	near := full(1, 2, 4)
	near.Sharding.Shards[0].ClockOffsetMs = 1.5
	if m, _, err := Runs(inputs(full(0, 2, 4), near)); err != nil || m.Decode[0].Shards[1].LateMs != 0.5 {
		t.Errorf("offsets within their uncertainty corrected: %v, %+v", err, m.Decode[0].Shards)
	}
}

// TestMergeCache: usage's per-request prefix-cache figures add exactly.
func TestMergeCache(t *testing.T) {
	a, b := full(0, 2, 4), full(1, 2, 4)
	a.Decode[0].Cache = &result.Cache{HitRate: 0.5, Requests: 2, Misses: 1, CachedTokens: 1000, PromptTokens: 2000, Source: result.CacheUsage}
	b.Decode[0].Cache = &result.Cache{HitRate: 1, Requests: 2, CachedTokens: 6000, PromptTokens: 6000, Source: result.CacheUsage}
	m, _, err := Runs(inputs(a, b))
	if err != nil {
		t.Fatal(err)
	}
	want := result.Cache{HitRate: 7000.0 / 8000, Requests: 4, Misses: 1, CachedTokens: 7000, PromptTokens: 8000, Source: result.CacheUsage}
	if got := m.Decode[0].Cache; got == nil || *got != want {
		t.Errorf("merged cache %+v, want %+v", got, want)
	}
}

func TestMergeHistogramsExactly(t *testing.T) {
	docs := []*result.Result{full(0, 2, 4), full(1, 2, 4)}
	all := histo.New()
	for _, d := range docs {
		if _, err := all.MergeExact(d.Decode[0].Histograms); err != nil {
			t.Fatal(err)
		}
	}
	m, _, err := Runs(inputs(docs...))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Decode[0].Histograms
	if !h.TTFT.Equals(all.TTFT) || !h.TBT.Equals(all.TBT) || !h.Rate.Equals(all.Rate) || h.TBT.TotalCount() == 0 {
		t.Error("merged histograms differ from the shards' together")
	}
}

// Shard 0 alone measures prefill (METHOD §10): the merged run's prefill
// rows are its rows whole, every repeat with them, measured or not.
func TestMergeKeepsPrefillRepeats(t *testing.T) {
	zero, one := full(0, 2, 4), full(1, 2, 4)
	zero.Settings.PrefillRepeats, one.Settings.PrefillRepeats = 3, 3
	zero.Settings.PrefillAt, one.Settings.PrefillAt = []int{8192}, []int{8192}
	row := result.Prefill{Context: 8192, Repeats: 3, Each: []result.PrefillRepeat{
		{PromptTokens: 8192, TokPerSec: 10000, TTFTms: 819.2},
		{PromptTokens: 8192, Error: "http_error (HTTP 503)"},
		{PromptTokens: 8190, TokPerSec: 9800, TTFTms: 835.7},
	}}
	cell.SummarizePrefill(&row)
	zero.Prefill = []result.Prefill{row}
	m, _, err := Runs(inputs(one, zero)) // in any order
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Prefill) != 1 {
		t.Fatalf("merged prefill rows %+v, want shard 0's one", m.Prefill)
	}
	p := m.Prefill[0]
	if p.Status != result.Valid || p.Requests != 3 || p.Measured != 2 || p.RepeatsAsked() != 3 || len(p.Each) != 3 ||
		p.TokPerSec != 9900 || p.TokPerSecMin != 9800 || p.TokPerSecMax != 10000 || p.Each[1].Error == "" {
		t.Errorf("merged prefill row %+v: want shard 0's, 2 of 3 repeats measured, median 9,900 tok/s (9,800–10,000), the failed one kept", p)
	}
	if m.Settings.PrefillRepeats != 3 {
		t.Errorf("merged settings say %d repeats, want 3", m.Settings.PrefillRepeats)
	}
}
