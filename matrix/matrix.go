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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/shard"
	"github.com/tokentap/tokentap/slo"
)

// ErrInterrupted is returned with a partial result when the run's context
// was cancelled before every cell ran.
var ErrInterrupted = errors.New("matrix run interrupted; the result holds the cells finished so far")

// ErrNothingToMeasure is returned, with a nil result and before any load,
// when the plan leaves no decode cell to run: every context dropped for
// the engine's max model length, or every cell over its KV capacity. The
// settings asked for are wrong for this engine; the error says why.
var ErrNothingToMeasure = errors.New("nothing to measure")

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
	// salt, when empty, derives from StartAt, so all shards share it.
	Shard   shard.Spec
	StartAt time.Time
	Gap     time.Duration
	// Host names this load generator in a sharded run's result; empty:
	// the host name.
	Host string
}

// CellRun is a measured cell with what it was judged from.
type CellRun struct {
	Cell       result.Cell
	Window     cell.Window
	Clock      record.Clock
	Records    []record.Record
	MaxWaiting int // highest waiting gauge in the window, -1: no gauge
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

	bey *beyond // SLO, TTFT split and decode limit (figures.go)
	// rateRefused is, per context, the lowest request rate whose cell the
	// engine refused for not fitting: higher rates are not run.
	rateRefused map[int]float64
}

func (r *runner) run(ctx context.Context) (*result.Result, error) {
	cfg := r.cfg
	r.sc = cfg.Scenario
	sc := &r.sc
	if sc.Window <= 0 {
		sc.Window = 30 * time.Second
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
	salt := cfg.Salt
	if salt == "" && r.sharded() {
		salt = shard.RunID(cfg.StartAt)
	}
	if salt == "" {
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
	r.plan = makePlan(sc.Contexts, sc.Concurrency, sc.Rates, sc.Prefill, sc.MaxOutput, maxLen, kv, kvMax)
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
			ErrNothingToMeasure, strings.Join(r.plan.whyNothing(maxLen, kv, kvMax), " "))
	}
	decodeTest := "Fixed duration"
	if len(r.plan.rates) > 0 {
		decodeTest = "Fixed duration, Poisson arrivals (open loop)"
	}
	res.Settings = result.Settings{
		DecodeTest:    decodeTest,
		PrefillMode:   r.plan.prefillMode(),
		WindowSeconds: sc.Window.Seconds(),
		MaxOutput:     sc.MaxOutput,
		Contexts:      r.plan.contexts,
		Concurrency:   r.plan.concurrency,
		Rates:         r.plan.rates,
		PrefillAt:     sc.Prefill,
		API:           string(r.tgt.API),
		Dropped:       r.plan.dropped,
		KVCapacity:    kv,
		MaxModelLen:   maxLen,
		Scenario:      sc.Name,
		By:            cfg.By,
		SharedPrefix:  sc.SharedPrefix,

		FinishRequests: cfg.FinishRequests,
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
	res.Decode = r.plan.cells
	res.Prefill = r.plan.prefill
	res.Notes = append(res.Notes, r.plan.notes...)
	r.setupBeyond()

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
	r.prog = newProgress(cfg.Progress, cfg.Terminal, r.plan.steps(sc.Window, r.warmSlots))
	for _, n := range r.plan.notes {
		r.prog.note(n)
	}
	r.startShard(ctx, salt)
	r.log.Info().Str("engine", info.Kind).Str("version", info.Version).Str("model", r.tgt.Model).
		Int("max_model_len", maxLen).Int("kv_capacity", kv).Int("cells", r.plan.runnableCells()).Msg("matrix: plan ready")

	err = r.execute(ctx)
	r.prog.close()
	r.finishBeyond()
	res.Ended = time.Now()
	res.Notes = append(res.Notes, cfg.Notes...)
	res.SetPercentiles(cfg.Percentiles)
	// The report says what stopped the run (once: from these fields).
	defer r.endShard()
	if err != nil && ctx.Err() != nil {
		res.Interrupted = true
		return res, ErrInterrupted
	}
	if err != nil {
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
		if ns := r.plan.runnable(c); len(ns) > 0 {
			if err := r.row(ctx, c, ns); err != nil {
				return err
			}
		}
		if rates := r.plan.runnableRates(c); len(rates) > 0 {
			if err := r.rateRow(ctx, c, rates); err != nil {
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

// slotBodies builds the prompts of context c for slots 0 … n-1 (in
// parallel) and returns the decode and warm-up bodies for them; the two
// bodies of a slot share its prompt's bytes, and the prompt text itself is
// dropped once encoded.
func (r *runner) slotBodies(ctx context.Context, c, n int) (decode, warm []replay.Body, err error) {
	if err := r.primeEstimate(ctx, c); err != nil {
		return nil, nil, err
	}
	// A shard builds only its own slots' prompts (all of them otherwise).
	ps, err := r.builder(c).Slots(ctx, c, r.cfg.Shard.Slots(n))
	if err != nil {
		return nil, nil, fmt.Errorf("build the %s-token prompts of %d slots: %w", TokenLabel(c), n, err)
	}
	for i := range ps {
		d, w, err := r.bodies(ps[i])
		if err != nil {
			return nil, nil, err
		}
		ps[i].Text = ""
		decode = append(decode, d)
		warm = append(warm, w)
	}
	return decode, warm, nil
}

// builder is the prompt builder of context c's prompts: the run's, which
// starts every prompt with the shared prefix when there is one, or, for a
// context no longer than that prefix (which could not hold it and stay
// its length: context 0 would send 257-token prompts under a 256-token
// prefix), one without it.
func (r *runner) builder(c int) *prompts.Builder {
	if r.plain != nil && c <= r.sc.SharedPrefix {
		return r.plain
	}
	return r.build
}

// Slots no decode row uses: the cold prefill prompt, and the throwaway
// prompt primeEstimate counts.
const (
	coldSlot  = 1 << 20
	primeSlot = 1<<20 + 1
)

// primeEstimate: where the engine has no /tokenize, every count is a real
// max_tokens:1 request, so a counted prompt is in the engine's prefix cache
// afterwards. Counting a throwaway prompt of context c first lets every
// prompt that is measured reuse its count (Builder.Estimate) and reach the
// engine for the first time when it is measured: a prefill measurement
// shares no prefix with anything sent before (METHOD §3).
func (r *runner) primeEstimate(ctx context.Context, c int) error {
	if !r.build.Estimate {
		return nil
	}
	if _, err := r.builder(c).Prompt(ctx, c, primeSlot); err != nil {
		return fmt.Errorf("count a %s-token prompt: %w", TokenLabel(c), err)
	}
	return nil
}

// bodies encodes one prompt as its decode and warm-up bodies. The decode
// max_tokens is capped so prompt + max_tokens fits the model length: a
// prompt a few tokens over its target (within METHOD §4's tolerance) at a
// context right at the limit would otherwise be refused by the engine.
func (r *runner) bodies(p prompts.Prompt) (decode, warm replay.Body, err error) {
	maxOut := r.sc.MaxOutput
	if ml := r.res.Settings.MaxModelLen; ml > 0 && p.Tokens > 0 && p.Tokens+maxOut > ml {
		maxOut = max(1, ml-p.Tokens)
	}
	d, err := r.tgt.Body(r.request(p.Text, maxOut))
	if err != nil {
		return d, d, err
	}
	d.PromptTokens = p.Tokens
	w, err := r.tgt.Reshape(d, r.request("", 1))
	return d, w, err
}

func (r *runner) request(prompt string, maxTokens int) replay.Request {
	extra := map[string]any{}
	for k, v := range r.sc.Extra {
		extra[k] = v
	}
	for k, v := range r.sc.SamplingFields() {
		extra[k] = v
	}
	return replay.Request{
		Prompt:    prompt,
		MaxTokens: maxTokens,
		Stream:    true,
		IgnoreEOS: true,
		MinTokens: maxTokens > 1 && (r.info.Kind == "vllm" || r.info.Kind == "sglang"),
		// vLLM says per event how many tokens it carried; SGLang does so
		// in meta_info without being asked.
		ContinuousUsage: r.info.Kind == "vllm",
		Extra:           extra,
	}
}

// coldPrefill measures prefill context pc with one request of its own.
func (r *runner) coldPrefill(ctx context.Context, pc int) error {
	r.prog.begin(stepPrefill, pc, result.Column{}, "cold prefill, context "+TokenLabel(pc))
	var capped *prompts.CappedError
	err := r.primeEstimate(ctx, pc)
	// A slot number no decode row uses keeps this prompt distinct from all.
	var p prompts.Prompt
	if err == nil {
		p, err = r.builder(pc).Prompt(ctx, pc, coldSlot)
	}
	if errors.As(err, &capped) {
		r.failPrefill(pc, capped.Max, r.cutShort(pc, capped.Target, capped.Max))
		return nil
	}
	if err != nil {
		return fmt.Errorf("build the %s-token prefill prompt: %w", TokenLabel(pc), err)
	}
	_, w, err := r.bodies(p)
	if err != nil {
		return err
	}
	warm := []replay.Body{w}
	r.drain(ctx) // the measurement must not share the engine with streams still winding down
	recs := replay.RunClosed(ctx, replay.Closed{
		Target: r.tgt, Clock: r.clock, Bodies: warm, MaxTokens: 1, Stream: true,
		Tag: "prefill C=" + TokenLabel(pc), IDs: &r.ids, Once: true,
	}).Records
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.emit(recs)
	if len(recs) == 1 {
		r.setPrefill(pc, &recs[0], p.Tokens)
	}
	return nil
}

func (r *runner) setPrefill(pc int, rec *record.Record, target int) {
	for i := range r.res.Prefill {
		row := &r.res.Prefill[i]
		if row.Context != pc {
			continue
		}
		row.Requests = 1
		row.PromptTokens = rec.PromptTokens
		fail := func(msg string) {
			row.Status, row.Error = result.Failed, msg
			r.prog.note(fmt.Sprintf("prefill %s: failed: %s", TokenLabel(pc), clip(msg, 160)))
		}
		switch {
		case rec.Outcome.Failed() || len(rec.Arrivals) == 0:
			msg := rec.Error
			if msg == "" {
				msg = "no token arrived"
			}
			fail(msg)
			return
		case r.cut(rec, target):
			fail(fmt.Sprintf("the engine shortened the %d-token prompt to %d tokens without an error: its context is shorter than it said", target, rec.PromptTokens))
			return
		}
		tps, ttft, ok := cell.Prefill(rec)
		if ok {
			r.prog.prefillMeasured(rec.PromptTokens, ttft)
		}
		if !ok {
			row.Status = result.Failed
			row.Error = "the engine reported no prompt token count"
			return
		}
		row.Status = result.Valid
		row.TokPerSec = tps
		row.TTFTms = float64(ttft) / float64(time.Millisecond)
		r.prog.note(fmt.Sprintf("prefill %-6s %9.1f tok/s  TTFT %s", TokenLabel(pc), tps, ttft.Round(time.Millisecond)))
	}
}

// truncated reports whether the engine counted fewer prompt tokens than
// the prompt had (target, as the builder counted it) beyond METHOD §4's
// tolerance: an engine that cuts a prompt to its context without an error
// (Ollama) must not have the shorter prompt reported as the one asked for.
func truncated(rec *record.Record, target int) bool {
	return truncatedBy(rec, target, prompts.Tolerance(target))
}

// estimateSlack is how far an estimated prompt length (Builder.Estimate:
// another slot's count of as many words) may be from the engine's count
// before a shorter count is taken for a cut: different words tokenize
// differently (seen on Ollama with the live tier's model: 1,943 tokens for
// an estimated 2,046). Where counts are estimated they come from the same
// engine, so a prompt it cuts shows first as counts that stop growing
// (prompts.CappedError); this catches what is left, a cut of more than a
// tenth.
const estimateSlack = 0.10

// truncatedBy is truncated with the tolerance given.
func truncatedBy(rec *record.Record, target, tol int) bool {
	return target > 0 && rec.PromptSource == record.SourceUsage && rec.PromptTokens > 0 &&
		rec.PromptTokens < target-tol
}

// cut reports whether the engine cut the prompt of rec, whose length the
// builder counted as target: counted exactly, beyond METHOD §4's tolerance;
// estimated, beyond estimateSlack.
func (r *runner) cut(rec *record.Record, target int) bool {
	tol := prompts.Tolerance(target)
	if r.build.Estimate {
		tol = max(tol, int(estimateSlack*float64(target)))
	}
	return truncatedBy(rec, target, tol)
}

func (r *runner) isPrefillRow(c int) bool {
	for _, p := range r.res.Prefill {
		if p.Context == c {
			return true
		}
	}
	return false
}

// drain waits, where the engine has gauges, until it runs and queues
// nothing: streams cancelled at the last window's end may still hold slots
// and KV cache for a moment, and would read as queueing in the next cell.
func (r *runner) drain(ctx context.Context) {
	r.drainUntil(ctx, time.Now().Add(10*time.Second))
}

// drainUntil drains, giving up at deadline (a shard must keep its
// schedule) or 10 s from now, whichever comes first.
func (r *runner) drainUntil(ctx context.Context, deadline time.Time) {
	if !r.info.Gauges {
		return
	}
	deadline = minTime(deadline, time.Now().Add(10*time.Second))
	for {
		running, waiting, ok, err := r.info.Load(ctx)
		if err != nil || !ok || (running == 0 && waiting == 0) || ctx.Err() != nil {
			return
		}
		if time.Now().After(deadline) {
			r.log.Warn().Int("running", running).Int("waiting", waiting).Msg("matrix: the engine still runs requests at the end of the drain (10 s, or a shard's schedule); going on to the next step anyway")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// row runs decode context c: it builds one prompt per slot, sends slot 0's
// alone and cold (the row's prefill measurement), then warms each cell's
// prompts just before that cell runs (METHOD §3 warm-up).
func (r *runner) row(ctx context.Context, c int, ns []int) error {
	maxN := 0
	cols := make([]result.Column, len(ns))
	for i, n := range ns {
		maxN = max(maxN, n)
		cols[i] = result.Column{N: n}
	}
	rw, ok, err := r.rowStart(ctx, c, maxN, cols)
	if err != nil || !ok {
		return err
	}
	for _, n := range ns {
		if r.kvBelow > 0 && need(c, n, r.sc.MaxOutput) >= r.kvBelow {
			r.skip(c, result.Column{N: n}, result.OverCapacity, fmt.Sprintf("%d × (%d + %d) = %d tokens: the engine already refused %s",
				n, c, r.sc.MaxOutput, need(c, n, r.sc.MaxOutput), r.kvBelowAt))
			continue
		}
		if err := r.cell(ctx, rw, n); err != nil {
			return err
		}
	}
	return nil
}

// rowStart builds the prompts of slots 0 … n-1 of context c and sends
// slot 0's alone and cold: the row's prefill measurement, and its cold
// TTFT. When the engine refuses or cuts that prompt, no cell of the row
// can run: cols are decided (ok false).
func (r *runner) rowStart(ctx context.Context, c, n int, cols []result.Column) (rw *rowRun, ok bool, err error) {
	r.prog.begin(stepPrompts, c, result.Column{}, fmt.Sprintf("prompts for context %s (%d)", TokenLabel(c), n))
	decode, warm, err := r.slotBodies(ctx, c, n)
	var capped *prompts.CappedError
	if errors.As(err, &capped) {
		msg := r.cutShort(c, capped.Target, capped.Max)
		for _, col := range cols {
			r.skip(c, col, result.Failed, msg)
		}
		r.failPrefill(c, capped.Max, msg)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if r.sharded() && (r.cfg.Shard.Index != 0 || len(warm) == 0) {
		// Slot 0 is shard 0's: it alone measures the row's cold prefill.
		return &rowRun{c: c, decode: decode, warm: warm}, true, nil
	}
	r.prog.begin(stepRowCold, c, result.Column{}, "cold prefill, context "+TokenLabel(c)+" (the row's first warm-up)")
	// The first warm-up request is the row's prefill measurement: let the
	// previous row's cancelled streams leave the engine first.
	r.drainUntil(ctx, r.prepareEnd(c, []int{cols[0].N}))
	tag := "warmup C=" + TokenLabel(c)
	first := replay.RunClosed(ctx, replay.Closed{Target: r.tgt, Clock: r.clock, Bodies: warm[:1], MaxTokens: 1, Stream: true, Tag: tag, IDs: &r.ids, Once: true}).Records
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	r.emit(first)
	rw = &rowRun{c: c, decode: decode, warm: warm, warmed: 1}
	if len(first) == 1 {
		rec := &first[0]
		r.setPrefill(c, rec, decode[0].PromptTokens)
		switch {
		case engines.ContextExceeded(rec):
			// One prompt of C does not fit: no cell of the row can.
			for _, col := range cols {
				r.skip(c, col, result.OverCapacity, fmt.Sprintf("the engine refused one %s-token prompt: %s", TokenLabel(c), rec.Error))
			}
			return nil, false, nil
		case r.cut(rec, decode[0].PromptTokens):
			msg := r.cutShort(c, decode[0].PromptTokens, rec.PromptTokens)
			for _, col := range cols {
				r.skip(c, col, result.Failed, msg)
			}
			return nil, false, nil
		case rec.Outcome.Failed():
			r.log.Info().Int("context", c).Str("error", rec.Error).Msg("matrix: warm-up failed")
			if !r.isPrefillRow(c) {
				r.prog.note(fmt.Sprintf("warm-up %s: failed: %s", TokenLabel(c), clip(rec.Error, 160)))
			}
		}
		if ttft, ok := rec.TTFT(); ok && !rec.Outcome.Failed() {
			rw.cold = ttft
		}
	}
	return rw, true, nil
}

// cutShort notes that the engine cut prompts of context c (sent tokens) to
// got tokens without an error, and returns the reason its cells get.
func (r *runner) cutShort(c, sent, got int) string {
	msg := fmt.Sprintf("the engine shortened a %d-token prompt to %d tokens without an error: its context is shorter than it said, so this context was not measured", sent, got)
	// An engine may keep less of a cut prompt than its context (Ollama
	// from 0.30.11 keeps about half, leaving room to generate): where it
	// said its context, that is the length to give.
	give, why := got, ""
	if e := r.info.EngineMaxModelLen; e > got && e < sent {
		give, why = e, ": the context the engine says it runs; it keeps less of a cut prompt"
	}
	r.res.Notes = append(r.res.Notes, fmt.Sprintf("Context %s: %s (give --max-model-len %d%s, or run the engine with a longer context).", TokenLabel(c), msg, give, why))
	return msg
}

// failPrefill fails the prefill row of context c, if there is one, with
// the reason given (no request of it was measured).
func (r *runner) failPrefill(c, promptTokens int, msg string) {
	for i := range r.res.Prefill {
		if row := &r.res.Prefill[i]; row.Context == c {
			row.Status, row.Error, row.PromptTokens = result.Failed, msg, promptTokens
			r.prog.note(fmt.Sprintf("prefill %s: failed: %s", TokenLabel(c), clip(msg, 160)))
		}
	}
}

// rowRun is what the cells of one context row share.
type rowRun struct {
	c            int
	decode, warm []replay.Body // per slot
	cold         time.Duration // the row's cold prefill TTFT; 0 unknown
	warmed       int           // slots whose prompts a warm-up has sent
}

// cellLabel names cell (c, col) in progress lines: "decode context 16K,
// N=4" or "decode context 16K, 2 requests/s" ("C=" read as concurrency).
func cellLabel(c int, col result.Column) string {
	if col.Rate > 0 {
		return fmt.Sprintf("decode context %s, %s requests/s", TokenLabel(c), strconv.FormatFloat(col.Rate, 'f', -1, 64))
	}
	return fmt.Sprintf("decode context %s, N=%d", TokenLabel(c), col.N)
}

// skip decides cell (c, col) without running it and shows it as done.
func (r *runner) skip(c int, col result.Column, st result.Status, reason string) {
	out := r.res.CellAt(c, col)
	out.Status, out.Reason = st, reason
	r.prog.cellDone(c, col, cellLabel(c, col), st.Label()+": "+clip(reason, 160))
}

// learn keeps the engine's verdict that cell (c, n) does not fit: no cell
// needing as much or more is run afterwards.
func (r *runner) learn(c, n int) {
	nd := need(c, n, r.sc.MaxOutput)
	if r.kvBelow == 0 || nd < r.kvBelow {
		r.kvBelow = nd
		r.kvBelowAt = fmt.Sprintf("%d tokens at %s × %d", nd, TokenLabel(c), n)
	}
}

// warmSlots is how many of a cell's prompts its warm-up sends: all n,
// except on an engine with fixed slots (llama.cpp, Ollama), whose caches
// hold one prompt per slot: warming more would evict what was warmed.
func (r *runner) warmSlots(n int) int {
	if r.info.Slots > 0 {
		n = min(n, r.info.Slots)
	}
	return r.share(n) // a shard warms its own of those slots
}

// warmUp sends, all at once, the warm-up request of each of the cell's
// first k prompts, just before its window: each finds its prompt in the
// prefix cache, or computes it and leaves it there. It returns the first
// record whose request the engine refused for not fitting, if any.
func (r *runner) warmUp(ctx context.Context, rw *rowRun, n int) (*record.Record, error) {
	k := r.warmSlots(n)
	r.prog.begin(stepWarm, rw.c, result.Column{N: n}, fmt.Sprintf("warm-up context %s, %s", TokenLabel(rw.c), english.Count(k, "prompt", "prompts")))
	defer func() { rw.warmed = max(rw.warmed, k) }()
	if r.sharded() {
		// Drained already; every shard sends its warm-up now, at once.
		if err := waitUntil(ctx, r.sched.Warm(r.slotOf(rw.c, n), r.rowFirst(rw.c, n))); err != nil {
			return nil, err
		}
	} else {
		r.drain(ctx)
	}
	recs := replay.RunClosed(ctx, replay.Closed{Target: r.tgt, Clock: r.clock, Bodies: rw.warm[:k], MaxTokens: 1, Stream: true,
		Tag: "warmup C=" + TokenLabel(rw.c), IDs: &r.ids, Once: true}).Records
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.emit(recs)
	for i := range recs {
		if engines.ContextExceeded(&recs[i]) {
			return &recs[i], nil
		}
	}
	return nil, nil
}

// sampler scrapes the engine's gauges during a window.
type sampler struct {
	mu         sync.Mutex
	maxWaiting int       // -1 until a scrape succeeded
	lastOK     time.Time // when the last good scrape came in
	running    float64
	samples    int
	err        error
	// slots holds, per task, the last prefix-cache figures the engine
	// gave for a request while it ran (llama.cpp GET /slots), told from
	// a slot's leftovers by watch.
	slots map[int]engines.SlotCache
	watch engines.SlotWatch
}

// sample reads the engine's gauges every Config.LoadEvery until ctx
// ends; done closes when the last reading is in.
func (r *runner) sample(ctx context.Context) (smp *sampler, done <-chan struct{}) {
	smp = &sampler{maxWaiting: -1}
	// The slots' figures before the window's requests take them: what
	// a slot shows of a request that took it, until its prompt starts.
	if sc, ok, _ := r.info.SlotCaches(ctx); ok {
		smp.watch.Seed(sc)
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		smp.run(ctx, r.info, r.cfg.LoadEvery)
	}()
	return smp, d
}

// run scrapes every every until ctx ends: the first scrape soon after the
// window opens, when the requests have reached the engine.
func (s *sampler) run(ctx context.Context, in *engines.Info, every time.Duration) {
	first := time.NewTimer(min(every, 100*time.Millisecond))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		running, waiting, ok, err := in.Load(ctx)
		s.mu.Lock()
		if err != nil && ctx.Err() == nil {
			s.err = err
		}
		if ok && ctx.Err() == nil {
			s.maxWaiting = max(s.maxWaiting, waiting) // from -1 on the first good scrape
			s.lastOK = time.Now()
			s.running += float64(running)
			s.samples++
		}
		s.mu.Unlock()
		if sc, ok, _ := in.SlotCaches(ctx); ok && ctx.Err() == nil {
			s.mu.Lock()
			for _, c := range s.watch.Own(sc) {
				if s.slots == nil {
					s.slots = map[int]engines.SlotCache{}
				}
				s.slots[c.Task] = c
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// cell warms up and runs decode cell (rw.c, n) for one window.
func (r *runner) cell(ctx context.Context, rw *rowRun, n int) error {
	c := rw.c
	col := result.Column{N: n}
	label := cellLabel(c, col)
	slot, share := r.slotOf(c, n), r.share(n)
	var startAt time.Time // a shard's window opens on the schedule
	if r.sharded() {
		if share == 0 {
			r.noShare(c, n)
			return nil
		}
		startAt = r.sched.Open(slot)
		// The previous window's cancelled streams leave the engine before
		// the warm-up, which starts on the schedule. A shard that had no
		// share of the previous cell waits for its window to close first:
		// polling the engine's gauges through another shard's window
		// would load the engine it measures.
		if slot > 0 {
			if err := waitUntil(ctx, r.sched.Close(slot-1)); err != nil {
				return err
			}
		}
		r.drainUntil(ctx, r.sched.Warm(slot, r.rowFirst(c, n)))
	}
	refused, err := r.warmUp(ctx, rw, n)
	if err != nil {
		return err
	}
	if refused != nil {
		r.learn(c, n)
		r.skip(c, col, result.OverCapacity, "the engine refused a warm-up request: "+refused.Error)
		return nil
	}
	r.prog.begin(stepWindow, c, col, label)
	win := r.sc.Window
	if r.sharded() {
		// Leave time for the prefix-cache reading and the connections'
		// dialling before the window opens.
		r.drainUntil(ctx, startAt.Add(-r.openMargin()))
	} else {
		r.drain(ctx)
	}
	hits0, queries0, cacheOK, _ := r.info.PrefixCache(ctx)
	timings0 := r.beyondStart(ctx)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The gauges and slots are read during the window only: a cell that
	// goes on to hear the engine's answer is judged on the window.
	sctx, stopScrape := context.WithCancel(wctx)
	defer stopScrape()
	smp, scrapeDone := r.sample(sctx)
	hearFor := r.hearFor(rw, n)
	run := replay.RunClosed(wctx, replay.Closed{
		Target: r.tgt, Clock: r.clock, Bodies: rw.decode[:share], MaxTokens: r.sc.MaxOutput, Stream: true,
		Tag: fmt.Sprintf("C=%d N=%d", c, n), IDs: &r.ids, Window: win, StopOnFailure: true, Tokens: r.prog.counter(),
		StartAt: startAt, Ending: r.ending(c, col), Hear: hearFor,
		OnWindow: func() {
			stopScrape()
			if hearFor > 0 {
				r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: waiting up to %v for the engine to answer every request (its KV cache may not hold the cell)",
					label, hearFor.Round(time.Second)))
			}
		},
	})
	cancel()
	<-scrapeDone
	recs := run.Records
	r.emit(recs) // --records keeps them even when the run was interrupted mid-cell
	if ctx.Err() != nil {
		return ctx.Err() // interrupted mid-cell: the cell stays Not run
	}
	w := cell.Window{Start: run.Start, End: run.End}
	figs := cell.DecodeAll([]cell.Part{{Records: recs, Window: w, CacheBlock: r.info.CacheBlock}})
	smp.mu.Lock()
	j := cell.Judge{N: share, CacheBlock: r.info.CacheBlock, MaxWaiting: smp.maxWaiting, AvgRunning: -1, CacheCheck: c >= cell.CacheCheckFrom, ColdTTFT: rw.cold,
		Between: r.between(c, n) && r.warmSlots(n) >= share,
		// Still answering its gauges in the window's second half: an
		// engine that stopped answering is not merely slow.
		Answering: !smp.lastOK.IsZero() && r.clock.At(smp.lastOK) >= w.Start+(w.End-w.Start)/2}
	if !r.sharded() {
		j.Slots = r.info.SlotsAtMost() // a shard's share is not the engine's load
	}
	engineRunning := 0.0
	if smp.samples > 0 {
		engineRunning = smp.running / float64(smp.samples)
		if !r.sharded() {
			// A shard's average active requests are its own: the gauge
			// counts every shard's, and is kept as EngineRunning.
			j.AvgRunning = engineRunning
		}
	}
	j.Running.Block = r.info.CacheBlock
	for _, sc := range smp.slots {
		j.Running.Add(sc.Processed+sc.Cached, sc.Cached)
	}
	lerr := smp.err
	smp.mu.Unlock()
	if lerr != nil {
		r.log.Warn().Err(lerr).Msg("matrix: scraping the engine's gauges failed; queueing judged from the requests decoding at once")
	}
	if cacheOK {
		if hits1, queries1, ok, _ := r.info.PrefixCache(ctx); ok && queries1 > queries0 {
			j.EngineHits, j.EngineQueries = hits1-hits0, queries1-queries0
		}
	}
	r.judgeRecords(&j, recs, w, run.Heard, rw.decode[:share])
	out := r.res.Cell(c, n)
	out.Status = cell.Status(figs, j)
	figs.Fill(out, j) // explains a status other than Valid in Reason
	if r.sharded() {
		out.EngineRunning = engineRunning
		r.shardCell(out, slot, share, w, figs)
	}
	if out.Status == result.OverCapacity {
		r.learn(c, n)
	}
	if heard := run.Heard - run.End; hearFor > 0 && heard > 10*time.Millisecond {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("Cell %s × %d lies between the KV capacity's bounds: it went on %.1f s after its window to hear the engine's answer to every request (METHOD §3), and is %s.",
			TokenLabel(c), n, heard.Seconds(), out.Status.Label()))
	}
	r.beyondCell(ctx, out, recs, w, w.End, timings0)
	summary := out.Status.Label() + ": " + clip(out.Reason, 160)
	if out.ShowsFigures() {
		summary = fmt.Sprintf("%-16s %8.1f tok/s  TTFT %.0f ms  TBT %.1f ms", out.Status.Label(), out.TotalTokPerSec, out.TTFTms, out.TBTms)
		if out.Cache != nil {
			summary += fmt.Sprintf("  cache %.0f%%", 100*out.Cache.HitRate)
		}
		summary += beyondSummary(out)
	}
	r.prog.cellDone(c, col, label, summary)
	r.log.Debug().Int("context", c).Int("concurrency", n).Str("status", string(out.Status)).
		Float64("tok_s", out.TotalTokPerSec).Int("max_waiting", j.MaxWaiting).Msg("matrix: cell done")
	if r.cfg.OnCell != nil {
		r.cfg.OnCell(CellRun{Cell: *out, Window: w, Clock: r.clock, Records: recs, MaxWaiting: j.MaxWaiting})
	}
	return nil
}

// ending is how the requests still running at a window's end end (METHOD.md
// §3): cancelled, or on an engine that a cut stream can leave stuck, the
// ones it runs left to end by themselves, with the progress line saying so.
func (r *runner) ending(c int, col result.Column) replay.Ending {
	if r.cfg.FinishRequests {
		return replay.Ending{LetRun: true, OnStop: func(running int) {
			if running > 0 {
				r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: letting %s end (--finish-requests)",
					cellLabel(c, col), english.Count(running, "request", "requests")))
			}
		}}
	}
	if !r.info.CutStreamsStick() {
		return replay.Ending{}
	}
	return replay.Ending{LetRun: true, Slots: r.info.Slots, OnStop: func(running int) {
		if running > 0 {
			r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: letting %s end (a cut stream can leave %s stuck)",
				cellLabel(c, col), english.Count(running, "request", "requests"), r.info.Kind))
		}
	}}
}

// hearMargin is how many times the prefill of a cell's N prompts, at the
// row's cold prefill rate, a cell between the KV capacity's bounds waits
// after its window for the engine's answer; minHear is the least.
const (
	hearMargin = 2
	minHear    = time.Second
)

// between reports whether cell (c, n) lies between the bounds of a KV
// capacity the engine tells only within bounds (llama.cpp: one slot's
// n_ctx to n_ctx × slots): whether it fits is the engine's to say.
func (r *runner) between(c, n int) bool {
	s := r.res.Settings
	return s.KVCapacity == 0 && s.KVCapacityMin > 0 && s.KVCapacityMax > 0 && need(c, n, r.sc.MaxOutput) > s.KVCapacityMin
}

// hearFor is how long after its window cell (rw.c, n) waits for the
// engine's own answer to every request (METHOD.md §3, hearing the engine):
// 0 for a cell whose fit is known. An engine with a unified KV cache finds
// that a cell's prompts do not fit only when its cache fills, N prompts of
// C tokens into the prefill: hearMargin times that at the row's measured
// cold prefill rate (or the prefill rows'), at least minHear, at most the
// idle timeout. A shard keeps its schedule and does not wait.
func (r *runner) hearFor(rw *rowRun, n int) time.Duration {
	if r.sharded() || !r.between(rw.c, n) {
		return 0
	}
	d := time.Duration(hearMargin * float64(n) * float64(rw.cold))
	if d <= 0 {
		for _, p := range r.res.Prefill {
			if p.Status == result.Valid && p.TokPerSec > 0 {
				d = max(d, time.Duration(hearMargin*float64(n*rw.c)/p.TokPerSec*float64(time.Second)))
			}
		}
	}
	idle := r.tgt.Idle()
	if d <= 0 {
		d = idle
	}
	if idle > 0 {
		d = min(d, idle)
	}
	if d <= 0 {
		d = replay.DefaultIdleTimeout
	}
	return max(d, minHear)
}

// judgeRecords adds to j what the cell's requests say beyond figures: which
// the engine refused for not fitting its context or KV cache (in the
// window, or after it until heard, while the cell waited for its answer),
// and which it answered with a shorter prompt than was sent.
func (r *runner) judgeRecords(j *cell.Judge, recs []record.Record, w cell.Window, heard time.Duration, bodies []replay.Body) {
	target := 0
	for _, b := range bodies {
		if b.PromptTokens > 0 && (target == 0 || b.PromptTokens < target) {
			target = b.PromptTokens
		}
	}
	for i := range recs {
		rec := &recs[i]
		inFlight := rec.Sent < max(w.End, heard) && rec.End >= w.Start
		if inFlight && engines.ContextExceeded(rec) {
			if j.ContextExceeded == 0 {
				j.ContextError = rec.Error
			}
			j.ContextExceeded++
		}
		if w.Contains(rec.Sent) && r.cut(rec, target) {
			j.Truncated++
			j.TruncatedTo = max(j.TruncatedTo, rec.PromptTokens)
		}
	}
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
