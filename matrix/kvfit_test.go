package matrix

import (
	"strings"
	"testing"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/result"
)

// Layouts for the hand-computed cases below.
var (
	// Gemma-3-12B-like: 48 layers, 5 sliding-window (1,024 tokens) to 1
	// full: 40 window layers, 8 full.
	// (Elements per token: 8 KV heads of 256, keys and values.)
	gemma3 = bandwidth.KV{FullLayers: 8, WindowLayers: 40, Window: 1024,
		FullKeys: 8 * 8 * 256, FullValues: 8 * 8 * 256, WindowKeys: 40 * 8 * 256, WindowVal: 40 * 8 * 256}
	// A hybrid state-space model: 12 full-attention layers and 36
	// linear-attention (Mamba-like) ones, 1:3.
	hybridSSM = bandwidth.KV{FullLayers: 12, StateLayers: 36}
	// gpt-oss-20b-like: 12 sliding-window (128) and 12 full; with a
	// drafter's extra full layer, 13.
	gptOSS = bandwidth.KV{FullLayers: 13, WindowLayers: 12, Window: 128}
	llama  = bandwidth.KV{FullLayers: 32}
)

func TestVLLMGroups(t *testing.T) {
	tests := []struct {
		name string
		kv   bandwidth.KV
		want kvGroups
	}{
		// One kind: one group (_get_kv_cache_groups_uniform_type).
		{"uniform full attention", llama, kvGroups{Full: 1}},
		// Group size 8 (the fewest, the "1" of 5:1): 8 ÷ 8 = 1 full
		// group, 40 ÷ 8 = 5 sliding-window groups: 6 in all.
		{"Gemma-3-like", gemma3, kvGroups{Full: 1, Window: 5, WindowTokens: 1024}},
		// Size 12: 1 full group, 36 ÷ 12 = 3 state groups.
		{"hybrid SSM", hybridSSM, kvGroups{Full: 1, State: 3}},
		// 13 < 1.5 × 12: size 13, the window layers padded to one group.
		{"gpt-oss-like, padded", gptOSS, kvGroups{Full: 1, Window: 1, WindowTokens: 128}},
		{"unknown", bandwidth.KV{}, kvGroups{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vllmGroups(tt.kv); got != tt.want {
				t.Errorf("groups %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGroupBlocks(t *testing.T) {
	tests := []struct {
		name           string
		g              kvGroups
		tokens, block  int
		blocks         int
		poolBlocks     int
		tokensOfBlocks int
	}{
		// Gemma-3-like, 8,192 + 512 = 8,704 tokens, blocks of 16: the
		// full group ⌈8,704 ÷ 16⌉ = 544; each window group ⌈1,023 ÷ 16⌉
		// + 1 = 65, five of them 325: 869 blocks, where every group
		// keeping every token would be 6 × 544 = 3,264. A pool of 30,000
		// blocks is 30,000 // 6 × 16 = 80,000 tokens by vLLM's older
		// figure (num_gpu_blocks × block_size would say 480,000: 6×).
		{"Gemma-3-like, long", vllmGroups(gemma3), 8704, 16, 869, 30000, 80000},
		// Within the window every group keeps every token: 600 tokens
		// are ⌈600 ÷ 16⌉ = 38 blocks in each of the 6 groups.
		{"Gemma-3-like, inside the window", vllmGroups(gemma3), 600, 16, 6 * 38, 30000, 80000},
		// Hybrid SSM, 4,097 tokens, blocks of 256: ⌈4,097 ÷ 256⌉ = 17 for
		// the full group, 1 of state for each of the 3 others: 20. A
		// pool of 2,000 blocks: 2,000 // 4 × 256 = 128,000 tokens.
		{"hybrid SSM", vllmGroups(hybridSSM), 4097, 256, 20, 2000, 128000},
		// One group: blocks × block size, as num_gpu_blocks × block_size.
		{"uniform", vllmGroups(llama), 1000, 16, 63, 5120, 81920},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.blocks(tt.tokens, tt.block); got != tt.blocks {
				t.Errorf("blocks(%d) = %d, want %d", tt.tokens, got, tt.blocks)
			}
			if got := tt.g.tokensFromBlocks(tt.poolBlocks, tt.block); got != tt.tokensOfBlocks {
				t.Errorf("tokensFromBlocks(%d) = %d, want %d", tt.poolBlocks, got, tt.tokensOfBlocks)
			}
		})
	}
}

// TestKVFitOver: whether a cell is ruled out before any load, by the
// engine's allocation and, for vLLM, its groups.
func TestKVFitOver(t *testing.T) {
	gemma := kvFit{Alloc: engines.AllocPerStep, Tokens: 80000, Blocks: 30000, Block: 16, Groups: vllmGroups(gemma3)}
	ssm := kvFit{Alloc: engines.AllocPerStep, Tokens: 128000, Blocks: 2000, Block: 256, Groups: vllmGroups(hybridSSM)}
	n := func(k, c, out int) []reqLen { return constLoad(out)(c, k) }
	withNull := func(f kvFit) kvFit { f.NullBlock = true; return f }
	tests := []struct {
		name string
		fit  kvFit
		reqs []reqLen
		over bool
		why  string
	}{
		// Per step, 8K × 32 on the Gemma-3-like model: each request's
		// prompt and first token, 8,193 tokens, hold ⌈8,193 ÷ 16⌉ = 513
		// full blocks + 5 × 65 window blocks = 838; 32 × 838 = 26,816 ≤
		// 30,000. Counted as tokens against 80,000 it would be 32 × 8,193
		// = 262,176: skipped.
		{"Gemma-3-like 8K × 32 runs", gemma, n(32, 8192, 512), false, ""},
		// 36 × 838 = 30,168 > 30,000.
		{"Gemma-3-like 8K × 36 cannot hold its prompts", gemma, n(36, 8192, 512), true, "36 × (8192 + 1) = 30168 blocks > the KV cache's 30000 blocks of 16 (KV cache groups: 1 full-attention, 5 sliding-window of 1024 tokens)"},
		// Hybrid SSM, 4K × 100: 100 × (17 + 3) = 2,000 blocks, the pool.
		{"hybrid SSM 4K × 100 fits exactly", ssm, n(100, 4096, 1024), false, ""},
		{"hybrid SSM 4K × 101", ssm, n(101, 4096, 1024), true, "101 × (4096 + 1) = 2020 blocks"},
		// vLLM's null block: the pool of 2,000 holds 1,999 for requests,
		// so the 100 that fill it exactly cannot run together there.
		{"hybrid SSM 4K × 100 beside vLLM's null block", withNull(ssm), n(100, 4096, 1024), true,
			"100 × (4096 + 1) = 2000 blocks > the KV cache's 2000 blocks of 256 (1999 for requests beside vLLM's null block; KV cache groups: 1 full-attention, 3 linear-attention)"},
		{"hybrid SSM 4K × 99 beside vLLM's null block", withNull(ssm), n(99, 4096, 1024), false, ""},
		// Without the layout, vLLM's requests in whole blocks of one pool:
		// 5,120 blocks of 16, 5,119 beside the null block. 20 × (4,094 +
		// 1) takes 20 × 256 = 5,120 blocks (in tokens, 81,900, it would
		// have seemed to fit); 19 × (4,096 + 1) takes 19 × 257 = 4,883.
		{"20 × (4,094 + 1) in vLLM's blocks", kvFit{Alloc: engines.AllocPerStep, Tokens: 81920, Blocks: 5120, Block: 16, NullBlock: true}, n(20, 4094, 2048), true,
			"20 × (4094 + 1) = 5120 blocks > the KV cache's 5120 blocks of 16 (5119 for requests beside vLLM's null block)"},
		{"19 × (4,096 + 1) in vLLM's blocks", kvFit{Alloc: engines.AllocPerStep, Tokens: 81920, Blocks: 5120, Block: 16, NullBlock: true}, n(19, 4096, 2048), false, ""},
		// TGI reserves: 16 × (4,096 + 2,048) = 98,304 > 81,920 (the
		// seed pages' rule); vLLM, per step, runs it: 16 × 4,097 fits.
		{"reserving 4K × 16", kvFit{Alloc: engines.AllocReserve, Tokens: 81920}, n(16, 4096, 2048), true, "16 × (4096 + 2048) = 98304 tokens > KV cache capacity 81920 tokens"},
		{"per step 4K × 16", kvFit{Alloc: engines.AllocPerStep, Tokens: 81920}, n(16, 4096, 2048), false, ""},
		{"per step 4K × 20", kvFit{Alloc: engines.AllocPerStep, Tokens: 81920}, n(20, 4096, 2048), true, "20 × (4096 + 1) = 81940 tokens > KV cache capacity 81920 tokens: the prompts cannot be held together"},
		// llama.cpp between its bounds keeps the reservation arithmetic
		// against the upper bound.
		{"slots above the upper bound", kvFit{Alloc: engines.AllocSlots, Max: 8192}, n(4, 2048, 64), true, "the most KV cache the engine's answers allow"},
		// Drawn lengths: slot by slot, whatever their mean.
		{"reserving, drawn lengths", kvFit{Alloc: engines.AllocReserve, Tokens: 10000}, []reqLen{{4000, 1000}, {3000, 2500}}, true, "2 requests' prompts + max_tokens = 10500 tokens"},
		{"unknown capacity", kvFit{Alloc: engines.AllocReserve}, n(128, 100000, 1), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			over, why := tt.fit.over(tt.reqs)
			if over != tt.over || !strings.Contains(why, tt.why) {
				t.Errorf("over %v (%s), want %v (%s)", over, why, tt.over, tt.why)
			}
		})
	}
}

// TestFitKVFromBlocks: a vLLM without the group-aware label (blocks ×
// block size: 30,000 × 16 = 480,000) serving a Gemma-3-like model, whose
// layout a config.json gives: the capacity is vLLM's own older figure,
// 30,000 // 6 groups × 16 = 80,000, the fact says how, and the plan
// counts blocks by group. With the label, vLLM's figure stands.
func TestFitKVFromBlocks(t *testing.T) {
	for _, labelled := range []bool{false, true} {
		r := &runner{
			info: &engines.Info{Kind: engines.KindVLLM, KVCapacity: 480000, KVBlocks: 30000, KVBlockSize: 16, KVFromBlocks: !labelled},
			cfg:  Config{Limits: Limits{Told: []bandwidth.Told{{Shape: bandwidth.Shape{KV: gemma3}, ShapeFrom: "config.json"}}}},
			res:  &result.Result{},
		}
		fit := r.fitKV(480000, 0, true)
		want := 80000
		if labelled {
			want = 480000
		}
		if fit.Tokens != want || !fit.layered() || fit.Groups.count() != 6 {
			t.Errorf("labelled %v: %+v, want %d tokens counted in blocks by 6 groups", labelled, fit, want)
		}
		if got := len(r.res.Probes); labelled && got != 0 || !labelled && (got != 1 || !strings.Contains(r.res.Probes[0].Source, "num_gpu_blocks 30000 // 6 KV cache groups × block_size 16")) {
			t.Errorf("labelled %v: facts %+v", labelled, r.res.Probes)
		}
		// A flag's capacity is the user's: no blocks.
		if f := r.fitKV(1000, 0, false); f.layered() || f.Tokens != 1000 {
			t.Errorf("flag: %+v", f)
		}
	}
}
