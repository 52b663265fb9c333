// Package result defines the document one matrix run produces (METHOD.md §5):
// what was run, on what, what the engine said about itself, and every prefill
// row and decode cell with its figures and histograms. Reports are rendered
// from this document alone, so a run can be re-rendered or compared later.
package result

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/histo"
)

// SchemaVersion of the document. Readers refuse newer ones.
const SchemaVersion = 1

// Status of a prefill row or decode cell (METHOD.md §3, checked in this order).
type Status string

// Statuses.
const (
	OverCapacity   Status = "over_capacity"
	Failed         Status = "failed"
	RequestsQueued Status = "requests_queued"
	CacheMissed    Status = "cache_missed" // ran, but the prefix cache did not serve its warmed prompts: TTFT includes prefill
	// LateWindow: a shard of a sharded run opened the window too late, so
	// fewer than N requests ran at its start (METHOD §10).
	LateWindow Status = "late_window"
	Valid      Status = "valid"
	NotRun     Status = "not_run" // the run was stopped (Ctrl-C, error) before this cell
)

// statuses are every status a document may hold (schema.json's enum).
var statuses = []Status{OverCapacity, Failed, RequestsQueued, CacheMissed, LateWindow, Valid, NotRun}

// UnmarshalJSON refuses a status no tokentap writes (the schema rejects
// it; a report would render it as it stands).
func (s *Status) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("status %s: want a string", b)
	}
	if !slices.Contains(statuses, Status(v)) {
		names := make([]string, len(statuses))
		for i, st := range statuses {
			names[i] = string(st)
		}
		return fmt.Errorf("status %q is none of %s", v, strings.Join(names, ", "))
	}
	*s = Status(v)
	return nil
}

// Label is the status as the seed pages print it.
func (s Status) Label() string {
	switch s {
	case OverCapacity:
		return "Over capacity"
	case Failed:
		return "Failed"
	case RequestsQueued:
		return "Requests queued"
	case CacheMissed:
		return "Cache missed"
	case LateWindow:
		return "Late window"
	case Valid:
		return "Valid"
	case NotRun:
		return "Not run"
	}
	return string(s)
}

// ShowsFigures reports whether reports show a cell's figures for this
// status: Valid, Requests queued, Cache missed and Late window cells ran
// and measured something worth reading; Over capacity, Failed and Not run
// ones did not.
func (s Status) ShowsFigures() bool {
	return s == Valid || s == RequestsQueued || s == CacheMissed || s == LateWindow
}

// ShowsFigures reports whether reports show this cell's figures: its
// status shows them and, if it was measured, a token arrived in its
// window (it counted output tokens or a rate). A Requests queued cell whose engine was still prefilling the
// requests it ran when the window closed has no figure to show (its 0
// tok/s and 0 ms TTFT are absences, not measurements; its reason says
// so).
func (c *Cell) ShowsFigures() bool {
	return c.Status.ShowsFigures() && !(c.Measured && c.OutputTokens == 0 && c.TotalTokPerSec == 0)
}

// Result is one run.
type Result struct {
	Schema   int       `json:"schema"`
	Tool     Tool      `json:"tool"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	Hardware Hardware  `json:"hardware"`
	Engine   Engine    `json:"engine"`
	Model    Model     `json:"model"`
	Settings Settings  `json:"settings"`
	Probes   []Fact    `json:"probes,omitempty"`
	Prefill  []Prefill `json:"prefill"`
	Decode   []Cell    `json:"decode"`
	// Notes are things the run wants a reader to know: dropped contexts,
	// a fake engine that fell behind, an interrupted run.
	Notes []string `json:"notes,omitempty"`
	// Interrupted is set when the run was stopped by the user (Ctrl-C,
	// SIGTERM) before every cell ran.
	Interrupted bool `json:"interrupted,omitempty"`

	// SLO is the run's service-level objectives and how it met them
	// (--slo); Bandwidth the inputs of the decode limit (slo.go, limit.go).
	SLO       *SLORun    `json:"slo,omitempty"`
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
	// StoppedEarly says why a run that was not interrupted still stopped
	// before every cell ran (the engine broke off the run); empty when it
	// ran to its end or was interrupted.
	StoppedEarly string `json:"stopped_early,omitempty"`
	// Sharding is set on a shard of a sharded run (tokentap matrix
	// --shard) and on the run tokentap merge made of its shards.
	Sharding *Sharding `json:"sharding,omitempty"`
	// Sweeps are a sweep's rows (--sweep): each its latency curve against
	// the achieved rate, its knees and its highest rate meeting the SLOs
	// (sweep.go).
	Sweeps []SweepRow `json:"sweeps,omitempty"`
}

// Tool identifies the tokentap build that made the run.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
}

// Hardware the engine ran on. Source says "detected" (where tokentap ran),
// "given" (flags/env) or "detected+given".
type Hardware struct {
	Type   string `json:"type,omitempty"` // e.g. "Discrete GPU", "CPU"
	GPU    string `json:"gpu,omitempty"`
	VRAM   string `json:"vram,omitempty"` // as shown, e.g. "12 GB"
	Driver string `json:"driver,omitempty"`
	CPU    string `json:"cpu,omitempty"` // e.g. "Intel Xeon E5-2680 v4 (14C)"
	RAM    string `json:"ram,omitempty"` // e.g. "32 GB"
	OS     string `json:"os,omitempty"`
	Source string `json:"source,omitempty"`
}

// Engine is what served the model.
type Engine struct {
	Name          string `json:"name,omitempty"` // vllm, sglang, llama.cpp, tgi, ollama, openai-compatible, tokentap-fake
	Version       string `json:"version,omitempty"`
	Quantization  string `json:"quantization,omitempty"`
	Backend       string `json:"backend,omitempty"`
	Build         string `json:"build,omitempty"`
	LaunchCommand string `json:"launch_command,omitempty"`
	URL           string `json:"url,omitempty"` // target base URL (no credentials)
}

// Model is what was served.
type Model struct {
	Name     string `json:"name,omitempty"`   // display name, e.g. "Fara1.5-4B-AutoRound-W4A16-RTN"
	Served   string `json:"served,omitempty"` // the name requests used, e.g. "bench"
	Revision string `json:"revision,omitempty"`
}

// Settings of the run.
type Settings struct {
	DecodeTest    string  `json:"decode_test"`  // "Fixed duration"
	PrefillMode   string  `json:"prefill_mode"` // "Measured during decode warm-up" or "Separate cold requests"
	WindowSeconds float64 `json:"window_s"`
	MaxOutput     int     `json:"max_output"`
	Contexts      []int   `json:"contexts"`    // decode contexts run (tokens)
	Concurrency   []int   `json:"concurrency"` // decode concurrency levels (empty in an arrival-rate run)
	// Rates are an arrival-rate run's columns: requests per second.
	Rates     []float64 `json:"rates,omitempty"`
	PrefillAt []int     `json:"prefill_at"` // prefill contexts (tokens)
	// PrefillRepeats is the cold requests each prefill row asked for
	// (METHOD §3); 0 in documents from before repeats (one each).
	PrefillRepeats int    `json:"prefill_repeats,omitempty"`
	API            string `json:"api"` // chat or completions
	Dropped        []int  `json:"dropped,omitempty"`
	KVCapacity     int    `json:"kv_capacity_tokens,omitempty"`
	// KVCapacityMin and KVCapacityMax bound the KV capacity where the
	// engine told only bounds (KVCapacity 0): cells above the upper bound
	// were not run, cells between the bounds were tried and the engine's
	// own answer decided.
	KVCapacityMin int      `json:"kv_capacity_min_tokens,omitempty"`
	KVCapacityMax int      `json:"kv_capacity_max_tokens,omitempty"`
	MaxModelLen   int      `json:"max_model_len,omitempty"`
	Scenario      string   `json:"scenario,omitempty"`
	By            string   `json:"by,omitempty"` // who ran it
	Extra         []string `json:"extra,omitempty"`
	// SharedPrefix, Sampling and RequestFields are the scenario settings
	// that shape every request beyond its prompt length and max_tokens
	// (METHOD §5): two runs that differ in them measured different
	// requests. SharedPrefix is the tokens every slot's prompt of a row
	// shares after the salt (rows of contexts up to it share nothing);
	// Sampling the sampling fields sent (temperature, top_p, seed, …);
	// RequestFields the extra JSON fields of every request body.
	SharedPrefix  int            `json:"shared_prefix,omitempty"`
	Sampling      map[string]any `json:"sampling,omitempty"`
	RequestFields map[string]any `json:"request_fields,omitempty"`
	// Percentiles are the percentiles (in percent) each cell's Percentiles
	// hold; reports show these unless asked for others.
	Percentiles []float64 `json:"percentiles,omitempty"`
	// FinishRequests: the requests still running when a window closed
	// (an open loop's grace ended) were let run to their end, not cut, so
	// every one is judged against the SLOs and counted by the engine's
	// TTFT figures; their tokens after the window count nowhere.
	FinishRequests bool `json:"finish_requests,omitempty"`

	// The workload (METHOD §3, workloads): the user's prompts in place of
	// synthetic ones; a request count ending each cell; the gamma shape
	// of rate cells' gaps; a sweep; the seed of the sample and schedules. The same in every shard of a
	// run (a shard's part of the dataset and of the count is the
	// schedule's, not a setting), so shards merge.
	Dataset    *Dataset `json:"dataset,omitempty"`
	Requests   int      `json:"requests,omitempty"`
	Burstiness float64  `json:"burstiness,omitempty"`
	Sweep      bool     `json:"sweep,omitempty"`
	Seed       int64    `json:"seed,omitempty"`
	// PromptLengths and OutputLengths: each synthetic request's prompt
	// length drawn around its row's context, and its max_tokens around
	// MaxOutput (--prompt-tokens-stdev …, --random-range-ratio); absent:
	// every request the mean.
	PromptLengths *Lengths `json:"prompt_lengths,omitempty"`
	OutputLengths *Lengths `json:"output_lengths,omitempty"`
}

// Lengths is how lengths were spread around their mean: uniform within
// ±RangeRatio of it (vLLM's --random-range-ratio), or normal with
// deviation Stdev held within [Min, Max] (GuideLLM's *_stdev, *_min,
// *_max), or uniform within [Min, Max]; Summary says it in words.
type Lengths struct {
	Stdev      int     `json:"stdev,omitempty"`
	Min        int     `json:"min,omitempty"`
	Max        int     `json:"max,omitempty"`
	RangeRatio float64 `json:"range_ratio,omitempty"`
	Summary    string  `json:"summary"`
}

// Dataset is the file of prompts a run sent (matrix --dataset): which file
// (name, size, SHA-256), its format, how many usable requests it held and
// how many lines it skipped, and why.
type Dataset struct {
	Name       string `json:"name"`
	Size       int64  `json:"size_bytes"`
	SHA256     string `json:"sha256"`
	Format     string `json:"format"`
	Entries    int    `json:"entries"`
	Skipped    int    `json:"skipped,omitempty"`
	SkippedWhy string `json:"skipped_why,omitempty"`
}

// Fact is one probed fact and where it came from.
type Fact struct {
	Name   string `json:"name"`   // e.g. "max_model_len", "kv_capacity_tokens", "version"
	Value  string `json:"value"`  // as text
	Source string `json:"source"` // endpoint, e.g. "GET /v1/models data[0].max_model_len", or "flag --kv-capacity"
}

// Prefill is one prefill row.
type Prefill struct {
	Context      int     `json:"context"`       // target prompt tokens
	PromptTokens int     `json:"prompt_tokens"` // as the engine counted them
	Status       Status  `json:"status"`
	TTFTms       float64 `json:"ttft_ms,omitempty"`
	TokPerSec    float64 `json:"tok_s,omitempty"` // prompt_tokens / TTFT
	Requests     int     `json:"requests"`
	Error        string  `json:"error,omitempty"`
	// DuringWarmup is true when the row's first repeat is the first warm-up
	// request of the same decode context (no extra request spent for it).
	DuringWarmup bool `json:"during_warmup,omitempty"`

	// Repeats is how many cold requests the row asked for (METHOD §3,
	// --prefill-repeats); Requests how many were sent, Each is every one of
	// them in order, measured or not, and Measured those that gave a
	// figure: TokPerSec and TTFTms are then the medians of the measured
	// repeats, TokPerSecMin and TokPerSecMax their spread. A document from
	// before repeats has none of these: its row is one request (RepeatsAsked).
	Repeats      int             `json:"repeats,omitempty"`
	Measured     int             `json:"measured,omitempty"`
	TokPerSecMin float64         `json:"tok_s_min,omitempty"`
	TokPerSecMax float64         `json:"tok_s_max,omitempty"`
	Each         []PrefillRepeat `json:"each,omitempty"`
}

// PrefillRepeat is one cold request of a prefill row.
type PrefillRepeat struct {
	PromptTokens int     `json:"prompt_tokens,omitempty"` // as the engine counted them
	TTFTms       float64 `json:"ttft_ms,omitempty"`
	TokPerSec    float64 `json:"tok_s,omitempty"` // prompt_tokens / TTFT
	// CachedTokens are the prompt tokens the engine said it served from its
	// prefix cache; nil where it does not say.
	CachedTokens *int `json:"cached_tokens,omitempty"`
	// Error says why the repeat gave no figure (it failed, the engine
	// truncated its prompt, served it from its cache, or counted no prompt).
	Error string `json:"error,omitempty"`
}

// Measured reports whether the repeat gave a figure.
func (p PrefillRepeat) Measured() bool { return p.Error == "" && p.TokPerSec > 0 }

// RepeatsAsked is how many cold requests the row asked for: Repeats, or for
// a document from before repeats, one.
func (p Prefill) RepeatsAsked() int { return max(p.Repeats, 1) }

// RepeatsMeasured is how many of the row's repeats gave a figure: Measured,
// or for a document from before repeats, one where the row shows figures.
func (p Prefill) RepeatsMeasured() int {
	if p.Repeats == 0 && p.Measured == 0 && p.Status.ShowsFigures() && p.TokPerSec > 0 {
		return 1
	}
	return p.Measured
}

// RepeatTokS are the measured repeats' prompt tok/s, in the order sent;
// for a document from before repeats, the row's one figure.
func (p Prefill) RepeatTokS() []float64 {
	var out []float64
	for _, e := range p.Each {
		if e.Measured() {
			out = append(out, e.TokPerSec)
		}
	}
	if len(p.Each) == 0 && p.RepeatsMeasured() == 1 {
		out = append(out, p.TokPerSec)
	}
	return out
}

// Cell is one decode cell (C, N) with every column of METHOD.md §3, or
// one arrival-rate cell (C, rate): Concurrency 0 and Rate set. Figures
// are present only when Measured is true.
type Cell struct {
	Context     int `json:"context"`
	Concurrency int `json:"concurrency"`
	// Rate is an arrival-rate cell's request rate asked for (requests per
	// second, Poisson arrivals, open loop); 0 for a concurrency cell.
	Rate   float64 `json:"rate,omitempty"`
	Status Status  `json:"status"`
	// Reason explains the status in a sentence (why over capacity, what failed).
	Reason string `json:"reason,omitempty"`

	Measured            bool    `json:"measured"`
	TotalTokPerSec      float64 `json:"total_tok_s,omitempty"`
	PerRequestTokPerSec float64 `json:"per_request_tok_s,omitempty"`
	TTFTms              float64 `json:"ttft_ms,omitempty"`
	// TTFTAtLeast: the median TTFT lies among the requests without a first
	// token (censored at their wait, METHOD §3), so TTFTms is a lower bound.
	TTFTAtLeast bool    `json:"ttft_at_least,omitempty"`
	TBTms       float64 `json:"tbt_ms,omitempty"`
	// ITLChunkMs and TPOTRequestMs are the peers' definitions of the time
	// between tokens beside tokentap's per-token TBTms (METHOD §3): the
	// median gap between events whole (vLLM's ITL, per chunk), and the
	// median over requests of each one's mean time per token after the
	// first (GuideLLM's and AIPerf's ITL, vLLM's TPOT: 1000 / the per
	// request tok/s). With k tokens an event, ITL per chunk is k times
	// the others.
	ITLChunkMs    float64 `json:"itl_chunk_ms,omitempty"`
	TPOTRequestMs float64 `json:"tpot_request_ms,omitempty"`
	// SubWindows are the cell's tok/s and TBT over each equal part of its
	// window, the batches the comparison's noise is estimated from
	// (METHOD §9); nil in documents that predate them.
	SubWindows *SubWindows `json:"sub_windows,omitempty"`
	// Unannounced: the engine announced no per-event token counts while
	// the completed requests' usage shows several tokens per event, so the
	// tokens of requests cut without usage are counted short (METHOD §2).
	Unannounced *Unannounced `json:"unannounced,omitempty"`
	AvgActive   float64      `json:"avg_active,omitempty"`
	// AvgActiveSource says what AvgActive counts: ActiveEngine (the
	// engine's running gauge) or ActiveClient (requests decoding, as the
	// client saw them).
	AvgActiveSource string `json:"avg_active_source,omitempty"`
	// PeakDecoding is the most requests decoding at one instant.
	PeakDecoding int `json:"peak_decoding,omitempty"`
	// AchievedRate is, for an arrival-rate cell, the requests sent in the
	// window per window second; PeakInFlight and AvgInFlight the
	// concurrency the rate reached: the most requests in flight (sent,
	// not yet ended) at one instant of the window, and their time-average.
	AchievedRate       float64 `json:"achieved_rate,omitempty"`
	PeakInFlight       int     `json:"peak_in_flight,omitempty"`
	AvgInFlight        float64 `json:"avg_in_flight,omitempty"`
	Completed          int     `json:"completed"`
	OutputTokens       int     `json:"output_tokens"`
	MeasuredForSeconds float64 `json:"measured_for_s,omitempty"`
	// WindowFromNS and WindowToNS are the cell's window on the run's
	// clock, the clock of its records' sent_ns (METHOD §5), so a cell can
	// be recomputed from the records file; absent in a merged cell, whose
	// shards each had their own clock.
	WindowFromNS int64 `json:"window_from_ns,omitempty"`
	WindowToNS   int64 `json:"window_to_ns,omitempty"`

	// PromptTokens is the achieved context as the engine counted it (median
	// over the cell's requests).
	PromptTokens int `json:"prompt_tokens,omitempty"`
	// Sent and Failed count requests sent in the window and failed ones.
	Sent       int `json:"sent,omitempty"`
	FailedReqs int `json:"failed_requests,omitempty"`
	// MaxWaiting is the highest waiting-requests gauge scraped in the window;
	// -1 when the engine has no such gauge.
	MaxWaiting int `json:"max_waiting"`
	// Cache is how much of the prompts the engine's prefix cache served;
	// nil when the engine said nothing about it.
	Cache *Cache `json:"prefix_cache,omitempty"`
	// TTFTKind says what the cell's TTFT holds (TTFTWarm, TTFTCacheMissed,
	// TTFTCold): decode cells warm their prompts first, so their TTFT is
	// not the cold TTFT other benchmarks report. Empty in old documents:
	// warm unless the status is Cache missed.
	TTFTKind string `json:"ttft_kind,omitempty"`
	// EngineRunning is the mean of the engine's running gauge over the
	// window, in a sharded run, where the engine has one: the gauge counts
	// every shard's requests, so a shard's AvgActive counts its own
	// (requests decoding) and this keeps the engine's figure.
	EngineRunning float64 `json:"engine_running,omitempty"`
	// Shards is, in a sharded run, each shard's part of this cell (one
	// entry in a shard's own document, all of them in a merged run).
	Shards []CellShard `json:"shards,omitempty"`

	// Percentiles are the histograms read at the run's percentiles
	// (Settings.Percentiles), as numbers.
	Percentiles *Percentiles `json:"percentiles,omitempty"`
	Histograms  *histo.Set   `json:"histograms,omitempty"`

	// SLO, TTFTSplit and DecodeLimit are the figures of slo.go, ttftsplit.go and limit.go: the
	// run's objectives met, where the engine says TTFT went, and decode
	// against the bandwidth limit. Nil where the run has none.
	SLO         *SLO         `json:"slo,omitempty"`
	TTFTSplit   *TTFTSplit   `json:"ttft_split,omitempty"`
	DecodeLimit *DecodeLimit `json:"decode_limit,omitempty"`
}

// SubWindows are a cell's figures over each of the equal, consecutive
// parts of its window (METHOD §9).
type SubWindows struct {
	// TokS is each part's output tokens over its seconds.
	TokS []float64 `json:"tok_s"`
	// TBTms is each part's median time between tokens, 0 where no gap
	// ended in it; nil in a merged cell (medians of shards do not merge).
	TBTms []float64 `json:"tbt_ms,omitempty"`
}

// Unannounced is a cell whose output tokens are counted short: see
// Cell.Unannounced.
type Unannounced struct {
	// TokensPerEvent is the completed requests' usage tokens per event.
	TokensPerEvent float64 `json:"tokens_per_event"`
	// OneEachTokens are the window's tokens counted one per event, of
	// requests without usage.
	OneEachTokens int `json:"one_each_tokens"`
	// ScaledTokPerSec is Total tok/s with those counted TokensPerEvent
	// per event instead: the estimate.
	ScaledTokPerSec float64 `json:"scaled_tok_s"`
}

// What Cell.TTFTKind says.
const (
	// TTFTWarm: the prompt was in the engine's prefix cache (warmed just
	// before the window), so TTFT mostly excludes prefill.
	TTFTWarm = "warm_prefix"
	// TTFTCacheMissed: the prompts were warmed, but the cache did not hold
	// them: TTFT includes prefill.
	TTFTCacheMissed = "cache_missed"
	// TTFTCold: prompts no request had sent before (arrival-rate cells):
	// TTFT includes prefill, as in vLLM's and GuideLLM's benchmarks.
	TTFTCold = "cold"
)

// TTFTOf is what c's TTFT holds, for documents that predate TTFTKind too.
func (c *Cell) TTFTOf() string {
	switch {
	case c.TTFTKind != "":
		return c.TTFTKind
	case c.Status == CacheMissed:
		return TTFTCacheMissed
	}
	return TTFTWarm
}

// What Cell.AvgActiveSource says.
const (
	ActiveEngine = "engine running gauge"
	ActiveClient = "requests decoding (client)"
)

// Cache is a decode cell's prefix-cache figures (METHOD.md §3).
type Cache struct {
	// HitRate is the share of the window's prompt tokens the engine served
	// from its prefix cache, 0 to 1.
	HitRate float64 `json:"hit_rate"`
	// Requests are the requests the rate counts (those whose usage said;
	// 0 for engine counters), Misses those that found less than 95% of
	// their prompt cached.
	Requests int `json:"requests,omitempty"`
	Misses   int `json:"misses,omitempty"`
	// CachedTokens and PromptTokens are the counted requests' cached and
	// prompt tokens (usage and running sources), so the rates of several
	// shards merge exactly.
	CachedTokens int64 `json:"cached_tokens,omitempty"`
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	// Source is CacheUsage, CacheRunning or CacheCounters.
	Source string `json:"source"`
}

// What Cache.Source says.
const (
	CacheUsage    = "usage cached_tokens"
	CacheRunning  = "engine's running requests (GET /slots)"
	CacheCounters = "engine prefix-cache counters"
)

// Write encodes r as indented JSON. Prefill rows and decode cells are
// always arrays, empty rather than null, so jq's .prefill[] never fails.
func (r *Result) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if r.Prefill == nil || r.Decode == nil {
		cp := *r
		if cp.Prefill == nil {
			cp.Prefill = []Prefill{}
		}
		if cp.Decode == nil {
			cp.Decode = []Cell{}
		}
		r = &cp
	}
	return enc.Encode(r)
}

// requiredFields are what a document needs besides "schema" to be read as
// a run: what it ran and what it measured.
var requiredFields = []string{"settings", "decode"}

// Read decodes a result document, refusing a newer schema and a document
// without requiredFields.
func Read(rd io.Reader) (*Result, error) {
	var raw json.RawMessage
	if err := json.NewDecoder(rd).Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a tokentap result document: %w", err)
	}
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("not a tokentap result document: %w", err)
	}
	switch {
	case r.Schema == 0:
		return nil, errors.New("not a tokentap result document: it has no \"schema\" field (a result is the JSON file tokentap matrix writes with --out)")
	case r.Schema < 0 || r.Schema > SchemaVersion:
		return nil, fmt.Errorf("result schema %d; this tokentap reads 1 to %d (a newer tokentap wrote it?)", r.Schema, SchemaVersion)
	}
	// A "schema" alone does not make a run: one without the settings it
	// ran and its table of cells would render as an empty, unknown run.
	var top map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top) // it decoded as an object above
	for _, k := range requiredFields {
		if v, ok := top[k]; !ok || string(v) == "null" {
			return nil, fmt.Errorf("not a tokentap result document: it has no %q field (a result is the JSON file tokentap matrix writes with --out)", k)
		}
	}
	r.oldSLO()
	return &r, nil
}

// ReadFile reads a result document from path.
func ReadFile(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Cell returns the decode cell (c, n), or nil.
func (r *Result) Cell(c, n int) *Cell {
	return r.CellAt(c, Column{N: n})
}

// Column is a column of the decode grid: a concurrency level N (closed
// loop), or a request rate per second (open loop, N 0).
type Column struct {
	N    int
	Rate float64
}

// Column is the column c sits in.
func (c *Cell) Column() Column { return Column{N: c.Concurrency, Rate: c.Rate} }

// Label is "4" for a concurrency level, "2/s" for a request rate.
func (c Column) Label() string {
	if c.Rate > 0 {
		return strconv.FormatFloat(c.Rate, 'f', -1, 64) + "/s"
	}
	return strconv.Itoa(c.N)
}

// Less orders columns: concurrency levels ascending, then rates ascending.
func (c Column) Less(o Column) bool {
	if (c.Rate > 0) != (o.Rate > 0) {
		return o.Rate > 0
	}
	if c.Rate > 0 {
		return c.Rate < o.Rate
	}
	return c.N < o.N
}

// CellAt returns the decode cell of context c in column col, or nil.
func (r *Result) CellAt(c int, col Column) *Cell {
	for i := range r.Decode {
		if r.Decode[i].Context == c && r.Decode[i].Column() == col {
			return &r.Decode[i]
		}
	}
	return nil
}

// RateRun reports whether the run's columns are request rates.
func (r *Result) RateRun() bool {
	if len(r.Settings.Rates) > 0 {
		return true
	}
	for _, c := range r.Decode {
		if c.Rate > 0 {
			return true
		}
	}
	return false
}

// JSONSchema is the JSON Schema (draft 2020-12) of the result document,
// result/schema.json in the repository; tests hold every document tokentap
// writes to it.
//
//go:embed schema.json
var JSONSchema []byte

// oldSLO reads the SLO figures of a document written before cut requests
// were judged: its "excluded" requests (every request cut) were all left
// undecided.
func (r *Result) oldSLO() {
	move := func(s *SLO) {
		if s != nil && s.Excluded > 0 && s.Undecided == 0 {
			s.Undecided, s.Excluded = s.Excluded, 0
		}
	}
	if r.SLO != nil {
		move(&r.SLO.Overall)
		move(r.SLO.FailedCells)
	}
	for i := range r.Decode {
		move(r.Decode[i].SLO)
	}
}
