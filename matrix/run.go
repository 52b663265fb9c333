// Package matrix runs the speed test matrix of METHOD.md §3 against an
// engine and assembles the run's result document (METHOD.md §5).
//
// A run goes in this order: probe the engine (engines.Probe; an unreachable
// or wrong target fails here, before any load); decide the plan (contexts
// that do not fit the max model length are dropped and said so, cells with
// N × (C + max output) above the KV capacity, or above its upper bound where
// the engine tells only bounds, are Over capacity and never run); send the
// cold prefill requests of prefill contexts that are not decode rows; then
// row by row: build one salted prompt per concurrency slot, send slot 0's
// alone and cold (the row's prefill measurement and cold TTFT), and for
// each cell warm its prompts at once (at most one per engine slot) just
// before its window, run it for a fixed window through the closed-loop load
// generator, scraping the engine's gauges (and prefix-cache counters)
// during the window, cancelling what still runs at the window's end, and
// judging the status from the records with package cell. The engine's own
// "does not fit" answer, in a warm-up or a window, makes a cell Over
// capacity and rules out every larger cell.
//
// When ctx is cancelled (Ctrl-C) Run stops at once and returns the result
// with the cells finished so far, the rest Not run, Interrupted set, and
// ErrInterrupted.
package matrix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/shard"
	"github.com/tokentap/tokentap/slo"
	"github.com/tokentap/tokentap/sweep"
)

// ErrInterrupted is returned with a partial result when the run's context
// was cancelled before every cell ran.
var ErrInterrupted = errors.New("matrix run interrupted; the result holds the cells finished so far")

// ErrNothingToMeasure is returned, with a nil result and before any load,
// when the plan leaves no decode cell to run: every context dropped for
// the engine's max model length, or every cell over its KV capacity. The
// settings asked for are wrong for this engine; the error says why.
var ErrNothingToMeasure = errors.New("nothing to measure")

// ErrEngineGone is returned with the result of the cells finished so far
// when the engine stopped answering in the middle of the run (killed,
// crashed, restarted): after a failed step the engine no longer answered
// its model list. The step it broke off stays Failed, the rest Not run.
var ErrEngineGone = errors.New("the engine broke off the run")

// Config is one matrix run. Zero values mean defaults.
type Config struct {
	// Target is the engine. Target.Model empty: the model the engine serves
	// (probed). Target.API empty: the scenario's API, else chat.
	Target replay.Target
	// Scenario holds the run settings (contexts, concurrency, prefill,
	// window, max output, sampling, extra request fields).
	Scenario scenarios.Scenario
	// KVCapacity and MaxModelLen override what the probe found (flags);
	// the scenario's own overrides apply when these are 0.
	KVCapacity  int
	MaxModelLen int

	// Percentiles are read off every cell's histograms into the result as
	// numbers (result.Cell.Percentiles); nil: result.DefaultPercentiles.
	Percentiles []float64
	// Notes are added to the result's notes (the demo says its failure is
	// injected).
	Notes []string

	// Descriptive facts for the report; what is given here wins over what
	// the probe found.
	Tool     result.Tool
	Hardware result.Hardware
	Engine   result.Engine
	Model    result.Model
	By       string

	// Salt starts every prompt of the run so no rerun finds them in the
	// engine's prefix cache; empty: random.
	Salt string
	// Progress receives the live display (stderr); nil shows nothing.
	Progress io.Writer
	// Notices receives what a user must see even with the display off
	// (--quiet): a run planned to take over an hour says so once, before
	// its first request. Nil says nothing.
	Notices io.Writer
	// Terminal draws a redrawn bar instead of plain lines.
	Terminal bool
	// Log gets structured events (debug: every step).
	Log zerolog.Logger
	// LoadEvery is how often the engine's waiting gauge is scraped during a
	// window; default 250 ms.
	LoadEvery time.Duration
	// WarmupParallel bounds the warm-up requests sent at once; default 4.
	WarmupParallel int
	// HTTPClient is used for probes and gauges; nil: a default client.
	HTTPClient *http.Client
	// OnCell, when set, is called after every measured cell with its records.
	OnCell func(CellRun)
	// OnRecords, when set, is called with the records of every step
	// (warm-up, prefill, cells), e.g. to write them as JSONL.
	OnRecords func(recs []record.Record)

	// SLO, when set, judges every cell's requests against these
	// objectives (METHOD.md §6); Limits are the decode limit's inputs
	// besides the engine's (§8). See figures.go, limit.go.
	SLO    slo.Spec
	Limits Limits
	// FinishRequests lets the requests still running when a window closes
	// (an open loop's grace ends) run to their end instead of cutting
	// them, so every request is judged against the SLOs and the engine's
	// TTFT figures count them all (METHOD.md §6, §7). Their tokens after
	// the window count nowhere.
	FinishRequests bool

	// Shard, when set, runs one shard of a sharded run (METHOD §10): its
	// share of every cell's requests, each window opening on the schedule
	// from StartAt with Gap (default DefaultGap) before each window. The
	// salt, when empty, derives from the start, so all shards share it.
	Shard   shard.Spec
	StartAt time.Time
	Gap     time.Duration
	// Rendezvous, instead of StartAt, fixes the common start once every
	// shard has probed the engine and made its plan (rendezvous.go).
	Rendezvous *Rendezvous
	// Host names this load generator in a sharded run's result; empty:
	// the host name.
	Host string
	// Dataset, when set, holds the prompts the run sends in place of
	// synthetic ones (Scenario.Dataset, read by the caller): one decode
	// row, its columns the scenario's, its requests sampled by
	// Scenario.Seed (workload.go).
	Dataset *dataset.Dataset
}

// CellRun is a measured cell with what it was judged from.
type CellRun struct {
	Cell       result.Cell
	Window     cell.Window
	Clock      record.Clock
	Records    []record.Record
	MaxWaiting int // highest waiting gauge in the window, -1: no gauge
	// Scheduled is an arrival-rate cell's requests due in its window;
	// Unsent those of them not sent (the loop stopped, or woke past the
	// window's end later than replay.SendLateTolerance), UnsentLate how
	// late it then woke (replay.Result).
	Scheduled, Unsent int
	UnsentLate        time.Duration
}

// Run runs the matrix. On an error before load (probe, prompt building) it
// returns a nil result. On interruption it returns the partial result and
// ErrInterrupted.
func Run(ctx context.Context, cfg Config) (*result.Result, error) {
	r := &runner{cfg: cfg, log: cfg.Log, rateRefused: map[int]float64{}}
	return r.run(ctx)
}

type runner struct {
	cfg   Config
	log   zerolog.Logger
	sc    scenarios.Scenario
	info  *engines.Info
	tgt   replay.Target
	clock record.Clock
	ids   atomic.Int64
	prog  *progress
	build *prompts.Builder
	plain *prompts.Builder // with a shared prefix: the builder of rows too short for it (builder)
	res   *result.Result
	plan  plan
	sched shard.Schedule // a sharded run's schedule

	// kvBelow, once the engine refused a cell for not fitting its context
	// or KV cache, is that cell's need (N × (C + max output)): the capacity
	// is below it, so no larger cell is run. 0: not learned.
	kvBelow int
	// kvBelowAt says which cell taught it, for the reason of the cells it
	// rules out.
	kvBelowAt string

	beyond *beyond // SLO, TTFT split and decode limit (figures.go)
	// rateRefused is, per context, the lowest request rate whose cell the
	// engine refused for not fitting: higher rates are not run.
	rateRefused map[int]float64
	// ds is a dataset run's sample (workload.go); nil: synthetic prompts.
	ds *datasetRun
	// fit is what the plan knew of the KV cache (kvfit.go).
	fit kvFit
}

// note adds notes to the run's result: every note of a run, the cells'
// judged ones (judge) and the run's own, comes in here, and one already
// there (a context whose prompts the engine truncated may be met by its
// prefill row and by its decode row) is not said twice.
func (r *runner) note(notes ...string) {
	for _, n := range notes {
		if !slices.Contains(r.res.Notes, n) {
			r.res.Notes = append(r.res.Notes, n)
		}
	}
}

func (r *runner) run(ctx context.Context) (*result.Result, error) {
	cfg := r.cfg
	r.sc = cfg.Scenario
	sc := &r.sc
	if sc.Window <= 0 && sc.Requests == 0 {
		sc.Window = 30 * time.Second // a request count alone ends a cell
	}
	if sc.MaxOutput <= 0 {
		sc.MaxOutput = 8192
	}
	if cfg.LoadEvery <= 0 {
		cfg.LoadEvery = 250 * time.Millisecond
		r.cfg.LoadEvery = cfg.LoadEvery
	}
	if cfg.WarmupParallel <= 0 {
		r.cfg.WarmupParallel = 4
	}
	r.tgt = cfg.Target
	if base, _, err := engines.NormalizeBase(r.tgt.BaseURL); err == nil {
		r.tgt.BaseURL = base // the probe's URL, so a bare host:port works for the load too
	}
	if r.tgt.API == "" {
		r.tgt.API = record.API(sc.API)
	}
	if r.tgt.API == "" {
		r.tgt.API = record.Chat
	}
	if r.tgt.API != record.Chat && r.tgt.API != record.Completions {
		return nil, fmt.Errorf("unknown API %q: use chat or completions", r.tgt.API)
	}
	if r.tgt.Model == "" {
		r.tgt.Model = sc.Model
	}
	if err := r.checkShard(); err != nil {
		return nil, err
	}
	// A sharded run's salt derives from its common start: at once from
	// --start-at, or once the rendezvous has fixed it (below).
	salt := cfg.Salt
	if salt == "" && r.sharded() && cfg.Rendezvous == nil {
		salt = shard.RunID(cfg.StartAt)
	}
	if salt == "" && !r.sharded() {
		salt = prompts.NewSalt()
	}

	started := time.Now()
	// 1. Probe: a wrong or unreachable target stops here, before any load.
	info, err := engines.Probe(ctx, engines.Target{BaseURL: r.tgt.BaseURL, APIKey: r.tgt.APIKey, Model: r.tgt.Model,
		HTTPClient: cfg.HTTPClient, KVCapacity: cfg.KVCapacity, MaxModelLen: cfg.MaxModelLen})
	if err != nil {
		return nil, err
	}
	r.info = info
	if r.tgt.Model == "" {
		r.tgt.Model = info.Model
	}

	res := &result.Result{
		Schema:   result.SchemaVersion,
		Tool:     cfg.Tool,
		Started:  started,
		Hardware: cfg.Hardware,
		Engine:   cfg.Engine,
		Model:    cfg.Model,
		Probes:   append([]result.Fact(nil), info.Facts...),
	}
	r.res = res
	if res.Tool.Name == "" {
		res.Tool.Name = "tokentap"
	}
	if res.Engine.Name == "" {
		res.Engine.Name = info.Kind
	}
	if res.Engine.Version == "" {
		res.Engine.Version = info.Version
	}
	if res.Engine.URL == "" {
		res.Engine.URL = info.BaseURL // credentials redacted
	}
	if res.Model.Served == "" {
		res.Model.Served = r.tgt.Model
	}
	if res.Model.Name == "" {
		res.Model.Name = r.tgt.Model
	}

	// The probe applied the flags; a scenario's own overrides come next.
	maxLen, kv := info.MaxModelLen, info.KVCapacity
	if cfg.MaxModelLen == 0 && sc.MaxModelLen > 0 {
		maxLen = sc.MaxModelLen
		res.Probes = append(res.Probes, result.Fact{Name: engines.FactMaxModelLen, Value: fmt.Sprint(maxLen), Source: "scenario max_model_len"})
	}
	if cfg.KVCapacity == 0 && sc.KVCapacity > 0 {
		kv = sc.KVCapacity
		res.Probes = append(res.Probes, result.Fact{Name: engines.FactKVCapacity, Value: fmt.Sprint(kv), Source: "scenario kv_capacity"})
	}

	kvMax := 0
	if kv == 0 {
		kvMax = info.KVMax
	}
	fit := r.fitKV(kv, kvMax, cfg.KVCapacity == 0 && sc.KVCapacity == 0)
	kv = fit.Tokens
	var largestDS []reqLen
	if cfg.Dataset != nil && fit.room() > 0 {
		most := slices.Max(append([]int{1}, sc.Concurrency...))
		if largestDS, err = r.datasetLargest(ctx, cfg.Dataset, most, fit.Alloc.Reserves() || fit.Alloc == engines.AllocSlots); err != nil {
			return nil, err
		}
	}
	r.plan = makePlan(sc.Contexts, sc.Concurrency, sc.Rates, sc.Prefill, sc.MaxOutput, maxLen, fit, r.loadOf(largestDS))
	r.fit = fit
	r.plan.repeats = sc.PrefillRepeatsOrDefault()
	switch {
	case kv == 0 && info.KVMin > 0 && info.KVMax > 0:
		r.plan.notes = append(r.plan.notes, fmt.Sprintf(
			"The engine's KV cache holds between %s and %s tokens; it does not say which (give --kv-capacity). Cells needing more than %s were not run; cells in between were tried, and where the engine answered that a request did not fit, the cell is Over capacity and larger cells were not run.",
			fmtInt(info.KVMin), fmtInt(info.KVMax), fmtInt(info.KVMax)))
	case kv == 0:
		r.plan.notes = append(r.plan.notes, "The engine's KV cache capacity is unknown (give --kv-capacity): every cell was tried; where the engine answered that a request did not fit, the cell is Over capacity and larger cells were not run.")
	}
	if r.plan.runnableCells() == 0 {
		return nil, fmt.Errorf("%w: no decode cell of the run fits this engine. %s Give smaller --contexts or --max-output, or an engine with more room",
			ErrNothingToMeasure, strings.Join(r.plan.whyNothing(fit), " "))
	}
	decodeTest := "Fixed duration"
	switch {
	case sc.Requests > 0 && sc.Window > 0:
		decodeTest = fmt.Sprintf("Fixed duration or %d requests, whichever ends first", sc.Requests)
	case sc.Requests > 0:
		decodeTest = fmt.Sprintf("%d requests", sc.Requests)
	}
	arrivals := "Poisson arrivals"
	if sc.Burstiness > 0 && sc.Burstiness != 1 {
		arrivals = "gamma arrivals of burstiness " + strconv.FormatFloat(sc.Burstiness, 'g', -1, 64)
	}
	switch {
	case sc.Sweep:
		decodeTest += ", sweep (one at a time, throughput, then " + arrivals + " at rates between)"
	case len(r.plan.rates) > 0:
		decodeTest += ", " + arrivals + " (open loop)"
	}
	if cfg.Dataset != nil {
		if err := r.loadDataset(ctx, cfg.Dataset, maxLen); err != nil {
			return nil, err
		}
	}
	res.Settings = result.Settings{
		DecodeTest:     decodeTest,
		PrefillMode:    r.plan.prefillMode(),
		WindowSeconds:  sc.Window.Seconds(),
		MaxOutput:      sc.MaxOutput,
		Contexts:       r.plan.contexts,
		Concurrency:    r.plan.concurrency,
		Rates:          r.plan.rates,
		PrefillAt:      sc.Prefill,
		PrefillRepeats: sc.PrefillRepeatsOrDefault(),
		API:            string(r.tgt.API),
		Dropped:        r.plan.dropped,
		KVCapacity:     kv,
		MaxModelLen:    maxLen,
		Scenario:       sc.Name,
		By:             cfg.By,
		SharedPrefix:   sc.SharedPrefix,

		FinishRequests: cfg.FinishRequests,

		Requests:   sc.Requests,
		Burstiness: sc.Burstiness,
		Sweep:      sc.Sweep,
		Seed:       sc.Seed,

		PromptLengths: lengthSettings(sc.PromptLengths),
		OutputLengths: lengthSettings(sc.OutputLengths),
	}
	if cfg.Dataset != nil {
		res.Settings.Dataset = datasetSettings(cfg.Dataset)
		res.Settings.Contexts = nil // the dataset's prompts, not contexts
	}
	if f := sc.SamplingFields(); len(f) > 0 {
		res.Settings.Sampling = f
	}
	if len(sc.Extra) > 0 {
		res.Settings.RequestFields = maps.Clone(sc.Extra)
	}
	if short := r.plan.upTo(sc.SharedPrefix); sc.SharedPrefix > 0 && len(short) > 0 {
		r.plan.notes = append(r.plan.notes, fmt.Sprintf("Shared prefix of %s tokens: the prompts of %s share nothing, as a context no longer than the prefix cannot hold it and stay that long.",
			fmtInt(sc.SharedPrefix), english.List(short)))
	}
	if kv == 0 {
		res.Settings.KVCapacityMin, res.Settings.KVCapacityMax = info.KVMin, info.KVMax
	}
	if over := fewerRequests(sc.Requests, r.plan.cells, sc.Sweep); len(over) > 0 {
		r.plan.notes = append(r.plan.notes, fmt.Sprintf("A request count of %d per cell is fewer than the streams of %s: those cells never had more than %d requests in flight, and their figures are those of %d streams.",
			sc.Requests, english.List(over), sc.Requests, sc.Requests))
	}
	res.Decode = r.plan.cells
	res.Prefill = r.plan.prefill
	r.note(r.plan.notes...)
	r.setupBeyond()

	steps := r.plan.steps(sc.Window, r.warmSlots, sc.Sweep)
	if cfg.Notices != nil {
		if msg := longRun(steps, sc.Window); msg != "" {
			fmt.Fprintln(cfg.Notices, msg)
		}
	}
	r.prog = newProgress(cfg.Progress, cfg.Terminal, steps)
	for _, n := range r.plan.notes {
		r.prog.note(n)
	}
	// Ready: probed and planned. With a rendezvous, the start is fixed
	// once every shard is.
	stop, err := r.rendezvous(ctx)
	if err != nil {
		r.prog.close()
		return nil, err
	}
	defer stop()
	if salt == "" {
		salt = shard.RunID(r.cfg.StartAt)
	}

	r.clock = record.NewClock()
	r.build = prompts.NewBuilder(salt, countWithin{info, r.tgt.Idle(), info.CutStreamsStick()})
	r.build.API = string(r.tgt.API)
	r.build.SharedPrefix = sc.SharedPrefix
	if sc.SharedPrefix > 0 {
		// Rows too short to hold the shared prefix get prompts of their
		// own length, sharing nothing (builder).
		r.plain = prompts.NewBuilder(salt, countWithin{info, r.tgt.Idle(), info.CutStreamsStick()})
		r.plain.API = r.build.API
	}
	// Where every count is a real prefill (no /tokenize), count one prompt
	// per row and give the other slots as many words; their warm-up usage
	// says their real length.
	r.build.Estimate = !info.Tokenize
	if r.plain != nil {
		r.plain.Estimate = r.build.Estimate
	}
	if sc.PromptLengths.Varies() {
		r.build.Length = r.promptLength
		if r.plain != nil {
			r.plain.Length = r.promptLength
		}
	}
	r.startShard(ctx, salt)
	r.log.Info().Str("engine", info.Kind).Str("version", info.Version).Str("model", r.tgt.Model).
		Int("max_model_len", maxLen).Int("kv_capacity", kv).Int("cells", r.plan.runnableCells()).Msg("matrix: plan ready")

	err = r.execute(ctx)
	if r.ds != nil && r.ds.taken > len(r.ds.bodies) {
		r.note(fmt.Sprintf("The cells took %d prompts from a sample of %d: %d requests sent a prompt sent before (the windows outlasted the dataset), which the engine's prefix cache may have held.",
			r.ds.taken, len(r.ds.bodies), r.ds.taken-len(r.ds.bodies)))
	}
	r.prog.close()
	r.finishBeyond()
	res.Ended = time.Now()
	r.note(cfg.Notes...)
	res.SetPercentiles(cfg.Percentiles)
	res.Sweeps = sweep.Rows(res) // read off the cells, at their percentiles
	// The report says what stopped the run (once: from these fields).
	defer r.endShard()
	if err != nil && ctx.Err() != nil {
		res.Interrupted = true
		return res, ErrInterrupted
	}
	if err != nil {
		if errors.Is(err, engines.ErrUnreachable) && !errors.Is(err, ErrEngineGone) {
			// A step that needed the engine (a token count) found it gone.
			err = fmt.Errorf("%w: %w", ErrEngineGone, err)
		}
		res.StoppedEarly = err.Error()
		return res, err
	}
	return res, nil
}

// execute sends the load: cold prefill rows, then every decode row. A
// shard of a sharded run starts at the common start, and its shard 0
// measures the cold prefill rows last, once every shard's last window has
// closed, alone on the engine.
func (r *runner) execute(ctx context.Context) error {
	if r.sharded() {
		r.prog.begin(stepWait, 0, result.Column{}, "waiting for the start at "+r.cfg.StartAt.Local().Format("15:04:05.000"))
		if err := waitUntil(ctx, r.cfg.StartAt); err != nil {
			return err
		}
	} else if err := r.coldRows(ctx); err != nil {
		return err
	}
	for _, c := range r.plan.contexts {
		if r.sc.Sweep {
			if err := r.sweepRow(ctx, c); err != nil {
				return err
			}
			continue
		}
		if ns := r.plan.runnable(c); len(ns) > 0 {
			if err := r.row(ctx, c, ns); err != nil {
				return err
			}
		}
		if rates := r.plan.runnableRates(c); len(rates) > 0 {
			if err := r.rateRow(ctx, c, rates, false); err != nil {
				return err
			}
		}
	}
	if r.sharded() && len(r.plan.coldPrefill) > 0 {
		r.prog.begin(stepWait, 0, result.Column{}, "prefill (cold): waiting for every shard's last window to close")
		if err := waitUntil(ctx, r.sched.After(r.plan.runnableCells())); err != nil {
			return err
		}
		return r.coldRows(ctx)
	}
	return nil
}

// coldRows measures the prefill contexts that are not decode rows.
func (r *runner) coldRows(ctx context.Context) error {
	for _, pc := range r.plan.coldPrefill {
		if err := r.coldPrefill(ctx, pc); err != nil {
			return err
		}
	}
	return nil
}

// stillThere, after a step whose status is st, asks whether the engine
// still answers when the step Failed: an engine gone (killed, crashed)
// broke off the run, and measuring the cells left would only fail them
// all (ErrEngineGone; exit 1, not the failed cells' 3).
func (r *runner) stillThere(ctx context.Context, st result.Status, step string) error {
	if st != result.Failed || ctx.Err() != nil {
		return nil
	}
	err := r.info.Reachable(ctx)
	if err == nil || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w during %s: %v", ErrEngineGone, step, err)
}

// clip shortens s to at most n bytes for a progress line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (r *runner) emit(recs []record.Record) {
	r.ownIDs(recs)
	if r.cfg.OnRecords != nil && len(recs) > 0 {
		r.cfg.OnRecords(recs)
	}
}

// countWithin bounds every token count by the idle timeout the run's
// requests have. Without /tokenize a count is a max_tokens:1 request, and
// an engine that takes it and never answers (seen on Ollama 0.17.4 with one
// slot, stuck by a stream cut at a window's end: engines.Info.CutStreamsStick)
// would hold the matrix forever, saying nothing.
type countWithin struct {
	c     prompts.TokenCounter
	limit time.Duration // 0: none
	stick bool          // a cut stream can leave the engine stuck
}

func (b countWithin) CountTokens(ctx context.Context, api, text string) (int, error) {
	if b.limit <= 0 {
		return b.c.CountTokens(ctx, api, text)
	}
	cctx, cancel := context.WithTimeout(ctx, b.limit)
	defer cancel()
	n, err := b.c.CountTokens(cctx, api, text)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		// The engine's client calls a timeout "unreachable"; it was
		// reached, and took the request.
		why := "it may be stuck, and a restart of the engine usually clears it"
		if b.stick {
			why = "it may be stuck: a stream cut while this engine generates it can keep a slot for good (tokentap lets its own end; another client's may have been cut), and only a restart of the engine frees it"
		}
		return 0, fmt.Errorf("the engine took a token count and did not answer it in %v (--idle-timeout): %s", b.limit, why)
	}
	return n, err
}
