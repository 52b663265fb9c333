package matrix

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
)

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
		d, w, err := r.bodies(c, ps[i])
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
func (r *runner) bodies(c int, p prompts.Prompt) (decode, warm replay.Body, err error) {
	maxOut := r.outputLength(c, p.Slot)
	if ml := r.res.Settings.MaxModelLen; ml > 0 && p.Tokens > 0 && p.Tokens+maxOut > ml {
		maxOut = max(1, ml-p.Tokens)
	}
	d, err := r.tgt.Body(r.request(p.Text, maxOut))
	if err != nil {
		return d, d, err
	}
	d.PromptTokens = p.Tokens
	if maxOut != r.sc.MaxOutput {
		d.MaxTokens = maxOut
	}
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
		// Per-event token counts from every engine that gives them: vLLM and
		// SGLang (continuous_usage_stats, METHOD §2).
		ContinuousUsage: r.info.Kind == "vllm" || r.info.Kind == "sglang",
		Extra:           extra,
	}
}

// coldPrefill measures prefill context pc with requests of its own: the
// run's repeats, each a prompt of its own, so each is cold (METHOD §3).
func (r *runner) coldPrefill(ctx context.Context, pc int) error {
	r.prog.begin(stepPrefill, pc, result.Column{}, fmt.Sprintf("cold prefill, context %s (%s)", TokenLabel(pc), english.Count(r.repeats(), "request", "requests")))
	if err := r.primeEstimate(ctx, pc); err != nil {
		return r.prefillPromptFailed(pc, err)
	}
	r.drain(ctx) // the measurement must not share the engine with streams still winding down
	for k := range r.repeats() {
		stop, err := r.coldRepeat(ctx, pc, k, "prefill C="+TokenLabel(pc))
		if stop || err != nil {
			return err
		}
	}
	return nil
}

// prefillPromptFailed handles a failure to build a prefill prompt of
// context pc: an engine that truncates it fails the row (nil error),
// anything else stops the run.
func (r *runner) prefillPromptFailed(pc int, err error) error {
	var capped *prompts.CappedError
	if errors.As(err, &capped) {
		r.failPrefill(pc, capped.Max, r.noteTruncated(pc, capped.Target, capped.Max))
		return nil
	}
	return fmt.Errorf("build the %s-token prefill prompt: %w", TokenLabel(pc), err)
}

// repeats is how many cold requests each prefill row sends.
func (r *runner) repeats() int { return r.sc.PrefillRepeatsOrDefault() }

// repeatSlot is the prompt slot of a prefill row's repeat k sent on its
// own: slot numbers no decode row uses (nor primeEstimate's), one per
// repeat, so each repeat's prompt differs from every other from its first
// line and none finds another's in the prefix cache.
func repeatSlot(k int) int {
	if k == 0 {
		return coldSlot
	}
	return primeSlot + k
}

// coldRepeat sends repeat k of prefill context pc alone, with a prompt of
// its own (repeatSlot), and adds it to the row. stop: the rest of the
// row's repeats would fail as this one did (the engine refused or
// truncated the prompt's length), or the prompt could not be built.
func (r *runner) coldRepeat(ctx context.Context, pc, k int, tag string) (stop bool, err error) {
	p, err := r.builder(pc).Prompt(ctx, pc, repeatSlot(k))
	if err != nil {
		return true, r.prefillPromptFailed(pc, err)
	}
	_, w, err := r.bodies(pc, p)
	if err != nil {
		return true, err
	}
	recs := replay.Run(ctx, replay.Closed{Options: replay.Options{Target: r.tgt, Clock: r.clock, MaxTokens: 1, Stream: true, Tag: tag, IDs: &r.ids}, Bodies: []replay.Body{w}, Once: true}).Records
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	r.emit(recs)
	if len(recs) != 1 {
		return false, nil
	}
	rec := &recs[0]
	r.setPrefill(pc, rec, p.Tokens)
	if engines.ContextExceeded(rec) || truncated(rec, p.Tokens, r.build.Estimate) {
		return true, nil
	}
	if rec.Outcome.Failed() {
		return false, r.stillThere(ctx, result.Failed, "the "+TokenLabel(pc)+" prefill row")
	}
	return false, nil
}

// setPrefill adds one cold request (rec, its prompt target tokens as the
// builder counted them) to prefill row pc as a repeat, and sets the row's
// figures from all its repeats so far (cell.SummarizePrefill).
func (r *runner) setPrefill(pc int, rec *record.Record, target int) {
	for i := range r.res.Prefill {
		row := &r.res.Prefill[i]
		if row.Context != pc {
			continue
		}
		row.Repeats = r.repeats()
		rp := r.prefillRepeat(rec, target)
		row.Each = append(row.Each, rp)
		cell.SummarizePrefill(row)
		n := fmt.Sprintf("%d/%d", len(row.Each), row.Repeats)
		if !rp.Measured() {
			r.prog.note(fmt.Sprintf("prefill %s %s: no figure: %s", TokenLabel(pc), n, clip(rp.Error, 160)))
			return
		}
		r.prog.note(fmt.Sprintf("prefill %-6s %s %9.1f tok/s  TTFT %s", TokenLabel(pc), n, rp.TokPerSec, time.Duration(rp.TTFTms*float64(time.Millisecond)).Round(time.Millisecond)))
	}
}

// prefillRepeat is one cold request as a prefill repeat: its figure, or
// why it has none (it failed, the engine truncated its prompt, counted no
// prompt tokens, or served it from its prefix cache: not cold).
func (r *runner) prefillRepeat(rec *record.Record, target int) result.PrefillRepeat {
	rp := result.PrefillRepeat{PromptTokens: rec.PromptTokens}
	if rec.CachedSource == record.SourceUsage {
		c := rec.CachedTokens
		rp.CachedTokens = &c
	}
	switch {
	case rec.Outcome.Failed() || len(rec.Arrivals) == 0:
		rp.Error = rec.Error
		if rp.Error == "" {
			rp.Error = "no token arrived"
		}
		return rp
	case truncated(rec, target, r.build.Estimate):
		rp.Error = fmt.Sprintf("the engine truncated the %d-token prompt to %d tokens without an error: its context is shorter than it said", target, rec.PromptTokens)
		return rp
	case rp.CachedTokens != nil && cell.ColdCached(*rp.CachedTokens, prompts.Tolerance(rec.PromptTokens)):
		rp.Error = fmt.Sprintf("the engine served %d of its %d prompt tokens from its prefix cache: not a cold prefill", *rp.CachedTokens, rec.PromptTokens)
		return rp
	}
	tps, ttft, ok := cell.Prefill(rec)
	if !ok {
		rp.Error = "the engine reported no prompt token count"
		return rp
	}
	r.prog.prefillMeasured(rec.PromptTokens, ttft)
	rp.TokPerSec = tps
	rp.TTFTms = float64(ttft) / float64(time.Millisecond)
	return rp
}

// estimateSlack is how far an estimated prompt length (Builder.Estimate:
// another slot's count of as many words) may be from the engine's count
// before a shorter count is taken for a truncation: different words
// tokenize differently (seen on Ollama with the live tier's model: 1,943
// tokens for an estimated 2,046). Where counts are estimated they come
// from the same engine, so a prompt it truncates shows first as counts
// that stop growing (prompts.CappedError); this catches what is left, a
// truncation of more than a tenth.
const estimateSlack = 0.10

// truncated reports whether the engine counted fewer prompt tokens than
// the prompt had (target, as the builder counted it): counted exactly,
// beyond METHOD §4's tolerance; estimated (Builder.Estimate), beyond
// estimateSlack. An engine that truncates a prompt to its context without
// an error (Ollama) must not have the shorter prompt reported as the one
// asked for.
func truncated(rec *record.Record, target int, estimated bool) bool {
	tol := prompts.Tolerance(target)
	if estimated {
		tol = max(tol, int(estimateSlack*float64(target)))
	}
	return target > 0 && rec.PromptSource == record.SourceUsage && rec.PromptTokens > 0 &&
		rec.PromptTokens < target-tol
}

func (r *runner) isPrefillRow(c int) bool {
	for _, p := range r.res.Prefill {
		if p.Context == c {
			return true
		}
	}
	return false
}

// rowStart builds the prompts of slots 0 … n-1 of context c and sends
// slot 0's alone and cold: the row's prefill measurement, and its cold
// TTFT. When the engine refuses or truncates that prompt, no cell of the row
// can run: cols are decided (ok false).
func (r *runner) rowStart(ctx context.Context, c, n int, cols []result.Column) (rw *rowRun, ok bool, err error) {
	r.prog.begin(stepPrompts, c, result.Column{}, fmt.Sprintf("prompts for context %s (%d)", TokenLabel(c), n))
	decode, warm, err := r.slotBodies(ctx, c, n)
	var capped *prompts.CappedError
	if errors.As(err, &capped) {
		msg := r.noteTruncated(c, capped.Target, capped.Max)
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
	first := replay.Run(ctx, replay.Closed{Options: replay.Options{Target: r.tgt, Clock: r.clock, MaxTokens: 1, Stream: true, Tag: tag, IDs: &r.ids}, Bodies: warm[:1], Once: true}).Records
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
		case truncated(rec, decode[0].PromptTokens, r.build.Estimate):
			msg := r.noteTruncated(c, decode[0].PromptTokens, rec.PromptTokens)
			for _, col := range cols {
				r.skip(c, col, result.Failed, msg)
			}
			return nil, false, nil
		case rec.Outcome.Failed():
			if err := r.stillThere(ctx, result.Failed, "the "+TokenLabel(c)+" row's cold prefill"); err != nil {
				return nil, false, err // its cells stay Not run
			}
			r.log.Info().Int("context", c).Str("error", rec.Error).Msg("matrix: warm-up failed")
			if !r.isPrefillRow(c) {
				r.prog.note(fmt.Sprintf("warm-up %s: failed: %s", TokenLabel(c), clip(rec.Error, 160)))
			}
		}
		if ttft, ok := rec.TTFT(); ok && !rec.Outcome.Failed() {
			rw.cold = ttft
		}
	}
	if r.isPrefillRow(c) {
		// The row's prefill repeats after the first: prompts of their own,
		// each cold and alone, before any cell warms its prompts.
		for k := 1; k < r.repeats(); k++ {
			if stop, err := r.coldRepeat(ctx, c, k, "prefill C="+TokenLabel(c)); stop || err != nil {
				return rw, err == nil, err
			}
		}
	}
	return rw, true, nil
}

// noteTruncated notes that the engine truncated prompts of context c
// (sent tokens) to got tokens without an error, and returns the reason its
// cells get.
func (r *runner) noteTruncated(c, sent, got int) string {
	msg := fmt.Sprintf("the engine truncated a %d-token prompt to %d tokens without an error: its context is shorter than it said, so this context was not measured", sent, got)
	// An engine may keep less of a truncated prompt than its context (Ollama
	// from 0.30.11 keeps about half, leaving room to generate): where it
	// said its context, that is the length to give.
	give, why := got, ""
	if e := r.info.EngineMaxModelLen; e > got && e < sent {
		give, why = e, ": the context the engine says it runs; it keeps less of a truncated prompt"
	}
	r.note(fmt.Sprintf("Context %s: %s (give --max-model-len %d%s, or run the engine with a longer context).", TokenLabel(c), msg, give, why))
	return msg
}

// failPrefill fails the prefill row of context c, if there is one, with
// the reason given: the row where none of its requests was sent, else the
// repeat whose prompt could not be built.
func (r *runner) failPrefill(c, promptTokens int, msg string) {
	for i := range r.res.Prefill {
		if row := &r.res.Prefill[i]; row.Context == c {
			if len(row.Each) > 0 {
				// A later repeat's prompt: counted as a repeat without a figure.
				row.Each = append(row.Each, result.PrefillRepeat{PromptTokens: promptTokens, Error: msg})
				cell.SummarizePrefill(row)
				r.prog.note(fmt.Sprintf("prefill %s %d/%d: no figure: %s", TokenLabel(c), len(row.Each), row.Repeats, clip(msg, 160)))
				continue
			}
			row.Repeats = r.repeats()
			row.Status, row.Error, row.PromptTokens = result.Failed, msg, promptTokens
			r.prog.note(fmt.Sprintf("prefill %s: failed: %s", TokenLabel(c), clip(msg, 160)))
		}
	}
}

// shortestPrompt is the fewest prompt tokens of bodies, as the builder
// counted them; 0 when none was counted.
func shortestPrompt(bodies []replay.Body) int {
	target := 0
	for _, b := range bodies {
		if b.PromptTokens > 0 && (target == 0 || b.PromptTokens < target) {
			target = b.PromptTokens
		}
	}
	return target
}
