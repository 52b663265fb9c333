package engines

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tokentap/tokentap/record"
)

// llamaCapacity records what llama-server's slots say about its KV cache.
// Each slot's n_ctx is the context one request can use. Whether the slots
// share one unified KV cache (-kvu; llama-server's default when --parallel
// is not given) is not in any answer: with it, all slots together hold
// n_ctx tokens; without it, each slot holds its own n_ctx. So the capacity
// is known only between the two, and cells in between are tried: the
// engine's own "context exceeded" answer then decides (METHOD.md §3).
func (in *Info) llamaCapacity(nctx, slots int, src string) {
	if slots <= 1 {
		in.KVCapacity = nctx
		in.addInt(FactKVCapacity, nctx, src+" (one slot)")
		return
	}
	in.KVMin, in.KVMax = nctx, nctx*slots
	in.add(FactKVCapacity, fmt.Sprintf("%d to %d", in.KVMin, in.KVMax),
		fmt.Sprintf("%s × GET /props total_slots %d: %d if the slots share one unified KV cache (-kvu, the default without --parallel), %d if not; llama-server does not say which (give --kv-capacity)",
			src, slots, in.KVMin, in.KVMax))
}

// ollamaCapacity: Ollama gives its runner a KV cache of num_ctx × its
// parallel setting (OLLAMA_NUM_PARALLEL), and each request num_ctx of it.
func (in *Info) ollamaCapacity() {
	if in.MaxModelLen <= 0 || in.Slots <= 0 {
		return
	}
	if in.slotsAtLeast {
		in.KVMin = in.MaxModelLen * in.Slots
		in.add(FactKVCapacity, fmt.Sprintf("at least %d", in.KVMin),
			fmt.Sprintf("context length %d × at least %d parallel slots (measured)", in.MaxModelLen, in.Slots))
		return
	}
	in.KVCapacity = in.MaxModelLen * in.Slots
	in.add(FactKVCapacity, fmt.Sprint(in.KVCapacity),
		fmt.Sprintf("context length %d × %d parallel slots (measured): Ollama's KV cache is num_ctx × OLLAMA_NUM_PARALLEL", in.MaxModelLen, in.Slots))
}

// Slot measurement: slotProbes streams at once, each asking for
// slotProbeTokens tokens; the most that were streaming at the same moment
// is the number of slots (or a lower bound when all were). Streams of a
// fast engine last milliseconds, no longer than a busy machine's jitter in
// reading them, which can both hide and invent overlap: then the streams
// are sent again, longer, until the shortest lasts slotProbeSpan (at most
// slotProbeMaxTokens tokens).
const (
	slotProbes         = 4
	slotProbeTokens    = 16
	slotProbeMaxTokens = 1024
	slotProbeSpan      = 200 * time.Millisecond
	slotProbeTime      = 60 * time.Second
)

// measureSlots finds how many requests the engine runs at once, for an
// engine that does not say (Ollama: OLLAMA_NUM_PARALLEL is in no answer).
// It sends slotProbes short streams at once and counts how many streamed
// tokens at the same moment: an engine with fewer slots makes the others
// wait for a free one. Short prompts and a few tokens each keep it cheap; it
// also loads the model, as any first request does. Where it cannot tell
// (errors, no tokens), Slots stays 0 and the capacity unknown.
func (in *Info) measureSlots(ctx context.Context) {
	if in.Model == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, slotProbeTime)
	defer cancel()
	tokens := slotProbeTokens
	var spans []span
	for {
		spans = make([]span, slotProbes)
		var wg sync.WaitGroup
		for i := range spans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spans[i] = in.streamSpan(ctx, fmt.Sprintf("tokentap slot probe %d: say anything.", i), tokens)
			}()
		}
		wg.Wait()
		shortest, ok := shortestSpan(spans)
		if !ok {
			in.add(FactSlots, "unknown", fmt.Sprintf("%d concurrent streams of %d tokens did not all stream tokens", slotProbes, tokens))
			return
		}
		if shortest >= slotProbeSpan || tokens >= slotProbeMaxTokens {
			break
		}
		tokens = min(slotProbeMaxTokens, tokens*int(slotProbeSpan/max(shortest, time.Millisecond)+1))
	}
	peak, _ := peakOverlap(spans)
	in.Slots = peak
	in.slotsAtLeast = peak == slotProbes
	value := fmt.Sprint(peak)
	if in.slotsAtLeast {
		value = fmt.Sprintf("at least %d", peak)
	}
	in.add(FactSlots, value, fmt.Sprintf("measured: of %d streams sent at once (%d tokens each), at most %d streamed at the same time",
		slotProbes, tokens, peak))
}

// span is when one stream's first and last token events arrived.
type span struct {
	first, last time.Time
	ok          bool
}

// streamSpan sends one short chat stream and times its token events.
func (in *Info) streamSpan(ctx context.Context, prompt string, tokens int) span {
	body, _ := json.Marshal(map[string]any{
		"model":      in.Model,
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": tokens,
		"stream":     true,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.c.base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return span{}
	}
	req.Header.Set("Content-Type", "application/json")
	if in.c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+in.c.apiKey)
	}
	resp, err := in.c.hc.Do(req)
	if err != nil {
		return span{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return span{}
	}
	var sp span
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, found := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !found || !hasContent(data) {
			continue
		}
		now := time.Now()
		if !sp.ok {
			sp.first, sp.ok = now, true
		}
		sp.last = now
	}
	return sp
}

// shortestSpan is the shortest stream's first-to-last time; ok is false
// when a stream streamed no tokens.
func shortestSpan(spans []span) (time.Duration, bool) {
	var d time.Duration
	for i, s := range spans {
		if !s.ok {
			return 0, false
		}
		if l := s.last.Sub(s.first); i == 0 || l < d {
			d = l
		}
	}
	return d, true
}

// hasContent reports whether a chunk's first choice carries output text.
func hasContent(data []byte) bool {
	var c struct {
		Choices []struct {
			Delta struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
				Reasoning        string `json:"reasoning"`
			} `json:"delta"`
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &c) != nil || len(c.Choices) == 0 {
		return false
	}
	d := c.Choices[0]
	return d.Delta.Content != "" || d.Delta.ReasoningContent != "" || d.Delta.Reasoning != "" || d.Text != ""
}

// peakOverlap is the most spans that cover one instant; ok is false unless
// every span has tokens.
func peakOverlap(spans []span) (int, bool) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		if !s.ok {
			return 0, false
		}
		// Only the middle half of a stream counts. Where the engine runs
		// streams one after the other, the next one's first tokens can
		// still be read before the last ones of the stream it follows:
		// the engine gives the slot back as the last token goes out, and
		// on a busy machine the goroutine reading that stream may run
		// milliseconds late (seen on Ollama with one slot: 2 counted).
		// Streams that share the engine overlap through their middles.
		q := s.last.Sub(s.first) / 4
		edges = append(edges, edge{s.first.Add(q), +1}, edge{s.last.Add(-q), -1})
	}
	// At equal times a start counts before an end: two streams whose
	// middles touch did stream at the same moment.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak, true
}

// contextPhrases are how engines say a request does not fit their context
// or KV cache (lower case).
var contextPhrases = []string{
	"exceed_context_size_error",              // llama.cpp, 400 before streaming
	"context size has been exceeded",         // llama.cpp, error event mid-stream (unified KV cache full)
	"exceeds the available context size",     // llama.cpp
	"larger than the max context size",       // llama.cpp
	"maximum context length",                 // vLLM, OpenAI
	"longer than the model's context length", // SGLang
	"kv cache capacity",                      // tokentap's fake engine
	"must be <= ",                            // TGI: inputs tokens + max_new_tokens must be <= N
}

// ContextExceeded reports whether a failed request failed because the
// engine said it does not fit its context or KV cache: the engine's own
// verdict that a cell is over capacity (METHOD.md §3).
func ContextExceeded(r *record.Record) bool {
	if !r.Outcome.Failed() || r.Blame != record.BlameEngine || r.Error == "" {
		return false
	}
	e := strings.ToLower(r.Error)
	for _, p := range contextPhrases {
		if strings.Contains(e, p) {
			return true
		}
	}
	return false
}

// SlotsAtMost is how many requests the engine runs at once where that is
// known as a number it does not exceed: the slots it says (llama.cpp), or
// measured where fewer than every probe stream ran at once (Ollama). 0:
// unknown, or only a lower bound.
func (in *Info) SlotsAtMost() int {
	if in.slotsAtLeast {
		return 0
	}
	return in.Slots
}
