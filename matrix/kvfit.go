package matrix

import (
	"fmt"
	"slices"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/engines"
)

// This file is METHOD.md §3 rule 1's arithmetic: how much of the engine's
// KV cache a cell's requests can hold at once, by how the engine allocates
// (engines.Allocation) and, on vLLM, by the model's layer layout, whose
// sliding-window and linear-attention layers do not keep every token.

// kvFit is what the plan knows of the engine's KV cache.
type kvFit struct {
	// Alloc is how the engine gives requests their cache.
	Alloc engines.Allocation
	// Tokens is the capacity in tokens (0: unknown); Max, where it is
	// unknown, the most the engine's answers allow (0: none).
	Tokens, Max int
	// Blocks and Block are the cache's blocks and their tokens (vLLM), and
	// Groups the model's KV cache groups as vLLM forms them: with all
	// three known, a request's need is counted in blocks, group by group.
	Blocks, Block int
	Groups        kvGroups
	// NullBlock: one of the blocks is vLLM's null block, which its block
	// pool keeps back from every request (BlockPool, vllm/v1/core/
	// block_pool.py 0.32.0), though num_gpu_blocks and
	// kv_cache_size_tokens count it.
	NullBlock bool
}

// reqLen is one request's prompt and max_tokens.
type reqLen struct{ prompt, output int }

// kvGroups are a model's KV cache groups as vLLM 0.32 forms them
// (_get_kv_cache_groups_uniform_page_size in vllm/v1/core/kv_cache_utils.py):
// its layers bucketed by kind, each bucket split into groups of the same
// number of layers. Every group gives a request its own blocks out of one
// shared pool.
type kvGroups struct {
	Full, Window, State int // groups of full-attention, sliding-window and linear-attention (SSM) layers
	WindowTokens        int // the sliding window
}

// count is the number of groups.
func (g kvGroups) count() int { return g.Full + g.Window + g.State }

// vllmGroups groups a layout's layers as vLLM 0.32 does: one group when all
// layers are of one kind (_get_kv_cache_groups_uniform_type); otherwise the
// group size is the fewest layers of a kind (the "1" of an n:1 pattern:
// Gemma 3's 5 sliding-window layers to 1 full), or the most where that is
// under 1.5 times the fewest, and each kind has ⌈layers ÷ size⌉ groups
// (the last padded). A layout tokentap does not know gives no groups.
func vllmGroups(kv bandwidth.KV) kvGroups {
	counts := []int{kv.FullLayers, kv.WindowLayers, kv.StateLayers}
	var kinds []int
	for _, n := range counts {
		if n > 0 {
			kinds = append(kinds, n)
		}
	}
	switch len(kinds) {
	case 0:
		return kvGroups{}
	case 1:
		return kvGroups{Full: min(kv.FullLayers, 1), Window: min(kv.WindowLayers, 1), State: min(kv.StateLayers, 1), WindowTokens: kv.Window}
	}
	size, most := slices.Min(kinds), slices.Max(kinds)
	if float64(most) < 1.5*float64(size) {
		size = most
	}
	groups := func(n int) int { return (n + size - 1) / size }
	return kvGroups{Full: groups(kv.FullLayers), Window: groups(kv.WindowLayers), State: groups(kv.StateLayers), WindowTokens: kv.Window}
}

// blocks is what one request of length tokens holds while it decodes,
// over every group: a full-attention group a block for every block of
// tokens; a sliding-window group only the window's, ⌈(window − 1) ÷
// block⌉ + 1 (SlidingWindowSpec in vllm/v1/kv_cache_interface.py: the
// window need not start at a block's start; SlidingWindowManager frees
// the blocks behind it); a linear-attention group one block of state
// (MambaSpec, without prefix caching's extra blocks).
func (g kvGroups) blocks(tokens, block int) int {
	full := cdiv(tokens, block)
	win := full
	if g.WindowTokens > 0 {
		win = min(full, cdiv(g.WindowTokens-1, block)+1)
	}
	return g.Full*full + g.Window*win + g.State
}

func cdiv(a, b int) int { return (a + b - 1) / b }

// tokensFromBlocks is vLLM's capacity in tokens from its blocks where it
// gives no kv_cache_size_tokens label (the versions before 0.32's
// group-aware figure, _report_kv_cache_config): the pool split evenly
// among the groups, num_blocks // len(kv_cache_groups) × block size. For
// one group it is num_gpu_blocks × block_size.
func (g kvGroups) tokensFromBlocks(blocks, block int) int {
	n := max(g.count(), 1)
	return blocks / n * block
}

// layered reports whether needs are counted in blocks by group.
func (f kvFit) layered() bool { return f.Blocks > 0 && f.Block > 0 && f.Groups.count() > 0 }

// inBlocks reports whether needs are counted in whole blocks of one pool,
// the model's layout unknown: vLLM's, whose requests take whole blocks.
func (f kvFit) inBlocks() bool { return !f.layered() && f.NullBlock && f.Blocks > 0 && f.Block > 0 }

// limit is the capacity a cell's need is held against: the engine's, else
// the most its answers allow.
func (f kvFit) limit() int { return max(f.Tokens, f.Max) }

// hold is what requests of these lengths hold together at the given
// number of output tokens each (all of max_tokens: out < 0), in tokens or,
// layered, in blocks.
func (f kvFit) hold(reqs []reqLen, out int) int {
	n := 0
	for _, r := range reqs {
		o := r.output
		if out >= 0 {
			o = min(out, r.output)
		}
		switch {
		case f.layered():
			n += f.Groups.blocks(r.prompt+o, f.Block)
		case f.inBlocks():
			n += cdiv(r.prompt+o, f.Block)
		default:
			n += r.prompt + o
		}
	}
	return n
}

// room is what hold is held against: the blocks (layered) or tokens,
// vLLM's null block left out.
func (f kvFit) room() int {
	switch {
	case (f.layered() || f.inBlocks()) && f.NullBlock:
		return f.Blocks - 1
	case f.layered():
		return f.Blocks
	}
	return f.limit()
}

// nullNote says what room leaves out, if anything.
func (f kvFit) nullNote() string {
	switch {
	case !f.NullBlock:
		return ""
	case f.layered():
		return fmt.Sprintf("%d for requests beside vLLM's null block; ", f.Blocks-1)
	case f.inBlocks():
		return fmt.Sprintf("%d for requests beside vLLM's null block", f.Blocks-1)
	}
	return ""
}

// unit names hold's unit.
func (f kvFit) unit() string {
	if f.layered() || f.inBlocks() {
		return "blocks"
	}
	return "tokens"
}

// over decides whether requests of these lengths, in flight together,
// cannot fit before any load: on an engine that reserves (TGI, and any
// tokentap does not know) when their prompts and max_tokens together
// exceed the capacity (the seed pages' rule), as on one of fixed slots
// (llama.cpp, Ollama: against the most its answers allow, METHOD §3);
// on one that allocates per step (vLLM) or against a new-token ratio
// (SGLang) only when their prompts and one token each do not, as then
// they can never run together: how much they grow in a window is the
// engine's to show (preemptions, retractions, refusals). why says the
// arithmetic.
func (f kvFit) over(reqs []reqLen) (over bool, why string) {
	return f.overAs(reqs, f.Alloc.Reserves() || f.Alloc == engines.AllocSlots)
}

// overOne decides whether one request, alone, cannot fit: its prompt and
// all of its max_tokens, however the engine allocates (an open loop's
// least).
func (f kvFit) overOne(r reqLen) (over bool, why string) {
	over, why = f.overAs([]reqLen{r}, true)
	if over && !f.layered() {
		why = fmt.Sprintf("one request needs %d + %d = %d tokens > KV cache capacity %d tokens", r.prompt, r.output, r.prompt+r.output, f.limit())
	}
	return over, why
}

func (f kvFit) overAs(reqs []reqLen, reserve bool) (over bool, why string) {
	room := f.room()
	if room <= 0 || len(reqs) == 0 {
		return false, ""
	}
	out := 1
	if reserve {
		out = -1
	}
	need := f.hold(reqs, out)
	if need <= room {
		return false, ""
	}
	what := fmt.Sprintf("%d × (%d + %d)", len(reqs), reqs[0].prompt, reqs[0].output)
	if !reserve {
		what = fmt.Sprintf("%d × (%d + 1)", len(reqs), reqs[0].prompt)
	}
	if !uniform(reqs) {
		what = fmt.Sprintf("%d requests' prompts + %s", len(reqs), map[bool]string{true: "max_tokens", false: "one token each"}[reserve])
	}
	against := fmt.Sprintf("KV cache capacity %d tokens", f.limit())
	switch {
	case f.layered():
		against = fmt.Sprintf("the KV cache's %d blocks of %d (%s%s)", f.Blocks, f.Block, f.nullNote(), f.Groups)
	case f.inBlocks():
		against = fmt.Sprintf("the KV cache's %d blocks of %d (%s)", f.Blocks, f.Block, f.nullNote())
	case f.Tokens == 0:
		against = fmt.Sprintf("%d tokens, the most KV cache the engine's answers allow", f.Max)
	}
	why = fmt.Sprintf("%s = %d %s > %s", what, need, f.unit(), against)
	if !reserve {
		why += fmt.Sprintf(": the prompts cannot be held together however the engine allocates (%s)", f.Alloc)
	}
	return true, why
}

func uniform(reqs []reqLen) bool {
	for _, r := range reqs {
		if r != reqs[0] {
			return false
		}
	}
	return true
}

// String says the groups as a reason shows them.
func (g kvGroups) String() string {
	s := fmt.Sprintf("KV cache groups: %d full-attention", g.Full)
	if g.Window > 0 {
		s += fmt.Sprintf(", %d sliding-window of %d tokens", g.Window, g.WindowTokens)
	}
	if g.State > 0 {
		s += fmt.Sprintf(", %d linear-attention", g.State)
	}
	return s
}

// largest is the request of reqs that asks for the most.
func largest(reqs []reqLen) reqLen {
	var l reqLen
	for _, r := range reqs {
		if r.prompt+r.output > l.prompt+l.output {
			l = r
		}
	}
	return l
}
