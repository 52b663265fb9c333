package matrix

import (
	"context"
	"fmt"
	"slices"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/result"
)

// What a cell's requests can hold of the KV cache at once (METHOD §3 rule
// 1), where lengths are not the row's context and --max-output for all:
// drawn per slot (length spreads), or the user's dataset.

// maxCounted is the most dataset prompts counted with the engine to find
// the largest a cell can have in flight; past it, the bound of the rest
// stands in (which can only overstate).
const maxCounted = 256

// fitKV is what the plan knows of the engine's KV cache: its allocation
// rule, the capacity (kv, or within kvMax), and, for vLLM where the
// model's layer layout is known, its blocks and KV cache groups. A vLLM
// that gave only blocks × block size (no group-aware label) has its
// capacity recomputed by its groups here, and the fact says so.
func (r *runner) fitKV(kv, kvMax int, engineKV bool) kvFit {
	fit := kvFit{Alloc: engines.AllocationOf(r.info.Kind), Tokens: kv, Max: kvMax}
	in := r.info
	if !engineKV || in.Kind != engines.KindVLLM || in.KVBlocks <= 0 || in.KVBlockSize <= 0 {
		return fit
	}
	fit.Blocks, fit.Block, fit.NullBlock = in.KVBlocks, in.KVBlockSize, true // whole blocks of one pool, the null block kept back
	layout, from := r.kvLayout()
	g := vllmGroups(layout)
	if g.count() == 0 {
		return fit
	}
	fit.Groups = g
	if in.KVFromBlocks && g.count() > 1 {
		fit.Tokens = g.tokensFromBlocks(in.KVBlocks, in.KVBlockSize)
		r.res.Probes = append(r.res.Probes, result.Fact{Name: engines.FactKVCapacity, Value: fmt.Sprint(fit.Tokens), Source: fmt.Sprintf(
			"num_gpu_blocks %d // %d KV cache groups × block_size %d (vLLM's num_blocks // len(kv_cache_groups) × block size; groups from the layer layout of %s: %s)",
			in.KVBlocks, g.count(), in.KVBlockSize, from, g)})
	}
	return fit
}

// kvLayout is the model's KV layout from the first source that gives one
// (the flags, a config.json, then the engine), and where it came from.
func (r *runner) kvLayout() (kv bandwidth.KV, from string) {
	for _, t := range r.cfg.Limits.Told {
		if t.HasKV() {
			return t.KV, t.ShapeFrom
		}
	}
	if t := r.engineTold(); t.HasKV() {
		return t.KV, t.ShapeFrom
	}
	return bandwidth.KV{}, ""
}

// cellLoad is what the requests of a cell of row c with n requests at
// once can hold together: slot by slot where lengths are drawn, the n
// largest of a dataset's (largest, counted before the plan), else n ×
// (c, --max-output). n 0: the largest one request of the row may be.
func (r *runner) loadOf(largestDS []reqLen) cellLoad {
	sc := r.sc
	return func(c, n int) []reqLen {
		switch {
		case largestDS != nil:
			return largestDS[:min(max(n, 1), len(largestDS))]
		case !sc.PromptLengths.Varies() && !sc.OutputLengths.Varies():
			return constLoad(sc.MaxOutput)(c, n)
		case n == 0:
			p, o := c, sc.MaxOutput
			if c > 0 {
				_, p = sc.PromptLengths.Bounds(c)
			}
			if sc.OutputLengths.Varies() {
				_, o = sc.OutputLengths.Bounds(sc.MaxOutput)
			}
			return []reqLen{{p, o}}
		}
		reqs := make([]reqLen, n)
		for slot := range reqs {
			reqs[slot] = reqLen{r.promptLength(c, slot), r.outputLength(c, slot)}
		}
		return reqs
	}
}

// datasetLargest is the n entries of d that ask for the most (prompt
// tokens and max_tokens; withOutput false: prompt tokens and one token),
// largest first. A prompt of B bytes has at most B + datasetSlack tokens:
// entries are counted with the engine in the order of that bound until n
// counted ones ask for at least the next one's bound, when no other can
// ask for more; past maxCounted counts the bounds stand in.
func (r *runner) datasetLargest(ctx context.Context, d *dataset.Dataset, n int, withOutput bool) ([]reqLen, error) {
	type cand struct {
		bound  int
		output int
		text   string
	}
	out := func(e dataset.Entry) int {
		if e.MaxTokens > 0 {
			return e.MaxTokens
		}
		return r.sc.MaxOutput
	}
	cands := make([]cand, len(d.Entries))
	for i, e := range d.Entries {
		cands[i] = cand{bound: len(e.Text) + datasetSlack, output: out(e), text: e.Text}
	}
	key := func(prompt, output int) int {
		if withOutput {
			return prompt + output
		}
		return prompt + 1
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return key(b.bound, b.output) - key(a.bound, a.output) })
	var got []reqLen // kept largest first
	counted := 0
	for _, c := range cands {
		if len(got) >= n && key(got[n-1].prompt, got[n-1].output) >= key(c.bound, c.output) {
			break
		}
		p := c.bound
		if counted < maxCounted {
			k, err := r.info.CountTokens(ctx, string(r.tgt.API), c.text)
			if err != nil {
				return nil, fmt.Errorf("%w %s: counting a prompt's tokens for the KV capacity rule: %v", ErrDataset, d.Name, err)
			}
			p, counted = k, counted+1
		}
		rl := reqLen{p, c.output}
		i, _ := slices.BinarySearchFunc(got, rl, func(a, b reqLen) int { return key(b.prompt, b.output) - key(a.prompt, a.output) })
		got = slices.Insert(got, i, rl)
	}
	return got[:min(n, len(got))], nil
}
