// Package prompts makes the prompts a matrix run sends (METHOD.md §3):
// deterministic text of an exact length in the engine's own tokens, salted
// per run so a rerun never finds them in the engine's prefix cache, and
// distinct per concurrency slot from the start so slots share no cached
// prefix (unless a shared prefix is asked for).
//
// A prompt is laid out as
//
//	<salt> s<slot> c<context>\n<words…>
//
// or, with a shared prefix of N tokens,
//
//	<salt> shared\n<N tokens of words, the same for every slot>\n s<slot> c<context>\n<words…>
//
// The words come from a fixed list, drawn by a PRNG seeded with the salt,
// slot and context, so the same (salt, slot, context) always gives the same
// text and anything else gives different text. The length is checked with
// the engine's count (a TokenCounter: engines.Info does /tokenize or
// usage.prompt_tokens), so it holds for any tokenizer.
package prompts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The request APIs, as engines.Info.CountTokens spells them. A chat prompt
// is sent as one user message: {"messages":[{"role":"user","content":Text}]};
// a completions prompt as {"prompt": Text}.
const (
	APIChat        = "chat"
	APICompletions = "completions"
)

// TokenCounter counts the prompt tokens the engine will report in
// usage.prompt_tokens for text sent with api. *engines.Info is one.
type TokenCounter interface {
	CountTokens(ctx context.Context, api, text string) (int, error)
}

// CounterFunc makes a function a TokenCounter.
type CounterFunc func(ctx context.Context, api, text string) (int, error)

// CountTokens calls f.
func (f CounterFunc) CountTokens(ctx context.Context, api, text string) (int, error) {
	return f(ctx, api, text)
}

// MaxCounts bounds the count calls one prompt's length search spends (the
// first prompt of a builder also pays the builder's calibration: two calls,
// plus a search for the shared prefix when there is one).
const MaxCounts = 8

// Tolerance is how far a prompt of target tokens may be from it:
// ±0.5%, or ±16 tokens for small targets (METHOD.md §4).
func Tolerance(target int) int {
	return max(16, target/200)
}

// aim is how close Prompt tries to get while count calls remain, before
// settling for Tolerance.
func aim(target int) int {
	return max(2, target/8192)
}

// Prompt is one built prompt.
type Prompt struct {
	Text    string // the prompt text (chat: the user message's content)
	Tokens  int    // its length as the counter counted it (what usage.prompt_tokens will say)
	Context int    // the target length asked for
	Slot    int    // the concurrency slot it is for
	API     string // chat or completions
	// Shared is the length of the shared prefix it starts with, counted as a
	// prompt of its own (salt line and any chat template included); 0
	// without one.
	Shared int
	// Counts is how many count calls building it took (the builder's
	// one-off calibration included in the first prompt's).
	Counts int
	// Estimated is set when Tokens was not counted for this text but taken
	// from another slot's prompt of the same context (Builder.Estimate).
	Estimated bool
}

// Builder makes prompts for one run. Set API and SharedPrefix before the
// first Prompt call. Safe for concurrent use.
type Builder struct {
	// API is APIChat (the default when empty) or APICompletions.
	API string
	// SharedPrefix, when > 0, starts every slot's prompt with the same
	// text of this many tokens, after the salt line and before the slot id.
	SharedPrefix int

	// Estimate, when set, spends counts only on the first prompt of each
	// context (a full search); later prompts of that context, for other
	// slots, take the same number of words and report that prompt's count
	// with Estimated set. Use it when every count is a prefill
	// (engines.Info.Tokenize false); the warm-up's usage.prompt_tokens then
	// says each prompt's real length.
	Estimate bool

	// Length, when set, is the length slot's prompt of a context row aims
	// at, in place of the row's context: a row whose requests' lengths are
	// drawn around it (the caller draws, deterministically per slot). The
	// prompt stays the row's and the slot's (its slot line names both);
	// with Estimate, a length is searched once and reused by the slots
	// that drew it.
	Length func(contextTokens, slot int) int

	salt    string
	counter TokenCounter

	mu   sync.Mutex
	cal  map[string]*calibration // per API
	rows map[rowKey]built        // with Estimate: the first prompt of each context
}

// calibration is what a builder learned about the engine's tokenizer.
type calibration struct {
	head       int     // tokens of a salt line alone (chat template included)
	perWord    float64 // tokens per generated word
	wordBytes  float64 // bytes per generated word (sizes the text buffer)
	shared     string  // the shared prefix text (salt line included); "" without one
	sharedToks int     // its count, as a prompt of its own
}

// NewBuilder returns a builder for a run salted with salt (see NewSalt)
// whose lengths are counted by counter.
func NewBuilder(salt string, counter TokenCounter) *Builder {
	return &Builder{salt: salt, counter: counter}
}

// NewSalt returns a fresh random run salt (8 hex digits).
func NewSalt() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b[:])
}

// Salt is the run salt every prompt starts with.
func (b *Builder) Salt() string { return b.salt }

func (b *Builder) api() string {
	if b.API == "" {
		return APIChat
	}
	return b.API
}

// Prompt builds the prompt of contextTokens tokens for slot. Context 0 is
// the minimal prompt: the salt line alone (a few tokens). A target shorter
// than the minimal prompt also gets the minimal prompt, with its real
// length in Tokens. Otherwise Tokens is within Tolerance(contextTokens) of
// the target, or Prompt returns an error.
func (b *Builder) Prompt(ctx context.Context, contextTokens, slot int) (Prompt, error) {
	api := b.api()
	if api != APIChat && api != APICompletions {
		return Prompt{}, fmt.Errorf("prompts: API %q: want %q or %q", api, APIChat, APICompletions)
	}
	if b.counter == nil {
		return Prompt{}, errors.New("prompts: no token counter")
	}
	if contextTokens < 0 {
		return Prompt{}, fmt.Errorf("prompts: negative context %d", contextTokens)
	}
	cal, calls, err := b.calibrate(ctx, api)
	if err != nil {
		return Prompt{}, err
	}
	head := cal.shared + slotLine(b.salt, slot, contextTokens, cal.shared != "")
	g := newGen(b.salt, slot, contextTokens)
	target := contextTokens
	if b.Length != nil {
		target = b.Length(contextTokens, slot)
	}
	p := Prompt{Context: target, Slot: slot, API: api, Shared: cal.sharedToks, Counts: calls}
	if b.Estimate {
		if r, ok := b.row(api, target); ok {
			p.Text, p.Tokens, p.Estimated = withWords(head, g, r.words, cal.wordBytes), r.tokens, true
			return p, nil
		}
	}
	r, err := b.build(ctx, api, cal, head, cal.head+cal.sharedToks, g, target)
	if err != nil {
		return Prompt{}, err
	}
	if b.Estimate {
		b.setRow(api, target, r)
	}
	p.Text, p.Tokens, p.Counts = r.text, r.tokens, p.Counts+r.counts
	return p, nil
}

// built is what build made: the text, its count, the count calls spent,
// and how many words follow the head.
type built struct {
	text                  string
	tokens, counts, words int
}

func (b *Builder) row(api string, context int) (built, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.rows[rowKey{api, context}]
	return r, ok
}

func (b *Builder) setRow(api string, context int, r built) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rows == nil {
		b.rows = map[rowKey]built{}
	}
	r.text = "" // keep the numbers, not the prompt
	b.rows[rowKey{api, context}] = r
}

type rowKey struct {
	api     string
	context int
}

// withWords is head followed by n words of g, in a buffer of its own size.
func withWords(head string, g *gen, n int, wordBytes float64) string {
	var sb strings.Builder
	sb.Grow(len(head) + int(float64(n)*wordBytes*1.01) + 16)
	sb.WriteString(head)
	for range n {
		g.appendWord(&sb)
	}
	return sb.String()
}

// build appends words from g to head until the whole counts target tokens
// (within Tolerance; aiming closer while count calls remain). It holds one
// copy of the text: every candidate is a prefix of the same buffer.
func (b *Builder) build(ctx context.Context, api string, cal *calibration, head string, headEst int, g *gen, target int) (built, error) {
	perWord := cal.perWord
	counts := 0
	count := func(text string) (int, error) {
		counts++
		n, err := b.counter.CountTokens(ctx, api, text)
		if err != nil {
			return 0, fmt.Errorf("prompts: counting a %d-token prompt: %w", target, err)
		}
		return n, nil
	}
	// The head's length is only counted when the target is near it (is the
	// minimal prompt the answer?); otherwise the estimate serves as the
	// search's starting point, saving a count (a request, when counting
	// goes through usage.prompt_tokens).
	headToks := headEst
	if target < headEst+64 {
		var err error
		if headToks, err = count(head); err != nil {
			return built{counts: counts}, err
		}
		if target <= headToks+int(math.Ceil(perWord)) {
			return built{text: head, tokens: headToks, counts: counts}, nil
		}
	}

	var sb strings.Builder
	est := int(float64(target-headToks)/perWord*1.01) + 64
	sb.Grow(len(head) + int(float64(est)*cal.wordBytes*1.01))
	sb.WriteString(head)
	// Where the text of n words ends: a checkpoint of the stream every
	// checkEvery words, from which the few words up to n are replayed, so
	// no per-word index as large as the text itself is kept.
	type checkpoint struct {
		g   gen
		off int
	}
	cps := make([]checkpoint, 0, est/checkEvery+2)
	words := 0
	grow := func(n int) {
		for words < n {
			if words%checkEvery == 0 {
				cps = append(cps, checkpoint{*g, sb.Len()})
			}
			g.appendWord(&sb)
			words++
		}
	}
	textOf := func(n int) string {
		if n == 0 {
			return head
		}
		cp := cps[(n-1)/checkEvery]
		r, off := cp.g, cp.off
		for i := (n - 1) / checkEvery * checkEvery; i < n; i++ {
			off += r.skipWord()
		}
		return sb.String()[:off]
	}

	// Secant steps from the calibrated slope, inside a bracket (lo, hi) of
	// word counts known to fall short of and overshoot the target,
	// bisecting when a step would leave it.
	lo, loT := 0, headToks
	hi := -1
	best, bestT := -1, 0               // no counted candidate yet
	topN, topT, capped := -1, 0, false // the longest count, and whether a longer text counted no more
	slope := perWord
	n := int(math.Round(float64(target-headToks) / perWord))
	for counts < MaxCounts {
		if hi >= 0 && lo+1 >= hi {
			break // adjacent word counts straddle the target: best is as close as words get
		}
		n = max(n, lo+1)
		if hi >= 0 {
			n = min(n, hi-1)
		}
		grow(n)
		got, err := count(textOf(n))
		if err != nil {
			return built{counts: counts}, err
		}
		if best < 0 || abs(got-target) < abs(bestT-target) {
			best, bestT = n, got
		}
		switch {
		case got > topT:
			topN, topT, capped = n, got, false
		case got == topT && n > topN:
			capped = true // more text, no more tokens: the engine cut it
		}
		diff := target - got
		if abs(diff) <= aim(target) {
			break
		}
		slope = secant(lo, loT, n, got, slope)
		if diff > 0 {
			lo, loT = n, got
		} else {
			hi = n
		}
		next := n + int(math.Round(float64(diff)/slope))
		if next == n {
			next = n + sign(diff)
		}
		if next <= lo || (hi >= 0 && next >= hi) {
			if hi >= 0 {
				next = (lo + hi) / 2
			} else {
				next = max(lo+1, 2*n)
			}
		}
		n = next
	}
	if capped && topT < target-Tolerance(target) {
		return built{counts: counts}, &CappedError{Target: target, Max: topT}
	}
	if best < 0 || abs(bestT-target) > Tolerance(target) {
		return built{counts: counts}, fmt.Errorf("prompts: could not reach %d tokens within ±%d in %d counts (closest: %d); the counter's counts do not follow the text", target, Tolerance(target), counts, bestT)
	}
	return built{text: textOf(best), tokens: bestT, counts: counts, words: best}, nil
}

// CappedError says the engine's counts stopped growing below the target:
// however much text was added, it counted at most Max prompt tokens. An
// engine that cuts long prompts to its context without an error (Ollama)
// answers so; the context asked for cannot be measured there.
type CappedError struct{ Target, Max int }

func (e *CappedError) Error() string {
	return fmt.Sprintf("prompts: the engine counted at most %d prompt tokens however long the text, so no prompt of %d tokens can be built: it cuts longer prompts to %d tokens", e.Max, e.Target, e.Max)
}

// secant is the tokens-per-word slope between two measurements, keeping prev
// when they are too close together to say.
func secant(n0, t0, n1, t1 int, prev float64) float64 {
	if abs(n1-n0) < 16 {
		return prev
	}
	s := float64(t1-t0) / float64(n1-n0)
	if s <= 0.05 || math.IsNaN(s) || math.IsInf(s, 0) {
		return prev
	}
	return s
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	if x < 0 {
		return -1
	}
	return 1
}

// slotLine is the line that makes a prompt this slot's and this context's.
// Without a shared prefix it starts the prompt, right after the salt.
func slotLine(salt string, slot, context int, shared bool) string {
	var b strings.Builder
	if shared {
		b.WriteString("\ns")
	} else {
		b.WriteString(salt)
		b.WriteString(" s")
	}
	b.WriteString(strconv.Itoa(slot))
	b.WriteString(" c")
	b.WriteString(strconv.Itoa(context))
	b.WriteByte('\n')
	return b.String()
}

// checkEvery is how many words apart build keeps a checkpoint of the word
// stream.
const checkEvery = 64

// calibrationWords is how many words the tokens-per-word estimate counts.
const calibrationWords = 2048

// calibrate learns, once per API, the tokens per word of the engine's
// tokenizer on this text, and builds the shared prefix. It returns the count
// calls it spent on this call (0 once learned).
func (b *Builder) calibrate(ctx context.Context, api string) (*calibration, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.cal[api]; ok {
		return c, 0, nil
	}
	calls := 0
	count := func(text string) (int, error) {
		calls++
		n, err := b.counter.CountTokens(ctx, api, text)
		if err != nil {
			return 0, fmt.Errorf("prompts: calibrating token counts: %w", err)
		}
		return n, nil
	}
	head := slotLine(b.salt, -1, -1, false)
	h, err := count(head)
	if err != nil {
		return nil, calls, err
	}
	g := newGen(b.salt, -1, -1)
	var sb strings.Builder
	sb.WriteString(head)
	for range calibrationWords {
		g.appendWord(&sb)
	}
	t, err := count(sb.String())
	if err != nil {
		return nil, calls, err
	}
	c := &calibration{head: h, perWord: float64(t-h) / calibrationWords,
		wordBytes: float64(sb.Len()-len(head)) / calibrationWords}
	if c.perWord <= 0.05 {
		return nil, calls, fmt.Errorf("prompts: the counter says %d words add %d tokens: it does not count this text", calibrationWords, t-h)
	}
	if b.SharedPrefix > 0 {
		r, err := b.build(ctx, api, c, b.salt+" shared\n", h, newGen(b.salt, -2, b.SharedPrefix), b.SharedPrefix)
		calls += r.counts
		if err != nil {
			return nil, calls, fmt.Errorf("prompts: building the %d-token shared prefix: %w", b.SharedPrefix, err)
		}
		c.shared, c.sharedToks = r.text, r.tokens
	}
	if b.cal == nil {
		b.cal = map[string]*calibration{}
	}
	b.cal[api] = c
	return c, calls, nil
}

// Prompts builds the prompts of slots 0 … n-1 for one context row, on as
// many goroutines as GOMAXPROCS (counting calls run in parallel too). It
// returns the first error, if any.
func (b *Builder) Prompts(ctx context.Context, contextTokens, n int) ([]Prompt, error) {
	return b.PromptsFrom(ctx, contextTokens, 0, n)
}

// PromptsFrom builds the prompts of slots first … first+n-1 as Prompts
// does: prompts no other slot of the run shares, e.g. fresh cold prompts
// for each request of an arrival-rate cell.
func (b *Builder) PromptsFrom(ctx context.Context, contextTokens, first, n int) ([]Prompt, error) {
	slots := make([]int, n)
	for i := range slots {
		slots[i] = first + i
	}
	return b.Slots(ctx, contextTokens, slots)
}

// Slots builds the prompts of the slots given, in that order, for one
// context row, as Prompts does: a shard of a sharded run builds only its
// own slots' prompts, and each is the prompt its global slot would have in
// a single-process run.
func (b *Builder) Slots(ctx context.Context, contextTokens int, slots []int) ([]Prompt, error) {
	n := len(slots)
	out := make([]Prompt, n)
	if n == 0 {
		return out, nil
	}
	// Calibrate once before fanning out, so workers do not queue on it;
	// with Estimate, slot 0 makes the row's one full search.
	if api := b.api(); api != APIChat && api != APICompletions {
		return nil, fmt.Errorf("prompts: API %q: want %q or %q", api, APIChat, APICompletions)
	}
	if b.counter == nil {
		return nil, errors.New("prompts: no token counter")
	}
	if _, _, err := b.calibrate(ctx, b.api()); err != nil {
		return nil, err
	}
	start := 0
	if b.Estimate {
		p, err := b.Prompt(ctx, contextTokens, slots[0])
		if err != nil {
			return nil, err
		}
		out[0], start = p, 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := start + int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				p, err := b.Prompt(ctx, contextTokens, slots[i])
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				out[i] = p
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}
