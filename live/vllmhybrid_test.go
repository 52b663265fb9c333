//go:build live

package live

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// hybridWindow is the sliding window of the hybrid tiny model: its first
// three layers keep the last 128 tokens, its fourth every token (a
// Gemma-3-like pattern on four layers), as vLLM's llama reads a config's
// layer_types and sliding_window (vllm/model_executor/models/llama.py).
const (
	hybridWindow = 128
	hybridBlocks = 80
)

// writeHybrid writes the tiny model again with the hybrid layer layout:
// the same weights, a config.json that says layer_types and
// sliding_window.
func writeHybrid(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-hf-swa")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(hfDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(hfDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			var c map[string]any
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			c["layer_types"] = []string{"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}
			c["sliding_window"] = hybridWindow
			if b, err = json.MarshalIndent(c, "", "  "); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestVLLMHybrid: the expert's KV cache group findings against the real
// engine, on the tiny model with 3 sliding-window layers and 1 full. vLLM
// forms 4 KV cache groups of one layer (the fewest of a kind: 1), 1 full
// and 3 sliding-window, from one pool of blocks of 128: 80 here, as the
// 40 of TestVLLM do not hold one request of 2,048 tokens (vLLM refuses
// to start: "the estimated maximum model length is 1152", 4 × ⌈1,152 ÷
// 128⌉ + 3 = 39 blocks, by the arithmetic below).
//
//   - Its capacity: vLLM 0.32's kv_cache_size_tokens is group-aware
//     (get_kv_cache_capacity in vllm/v1/core/kv_cache_utils.py): 80 ÷ the
//     blocks a request of 2,048 tokens may take, ⌈2,048 ÷ 128⌉ = 16 full
//     and, per window group, ⌈min(127 + 2,048 in flight, 2,048) ÷ 128⌉ + 1
//     = 17 (SlidingWindowSpec's admission cap, --max-num-batched-tokens
//     2048), 16 + 3 × 17 = 67, × 2,048 = 2,445 tokens; num_gpu_blocks ×
//     block_size would say 10,240.
//   - Its allocation: per step, a window group keeps ⌈127 ÷ 128⌉ + 1 = 2
//     blocks of a request once it decodes, so 640 × 4 with 32 tokens of
//     output holds at most 4 × (⌈672 ÷ 128⌉ + 3 × 2) = 48 blocks (a new
//     request's prefill, its window groups holding up to 6 blocks each
//     for a moment, fits the rest): it runs without a preemption, where
//     counting tokens against 2,445 would have skipped it (4 × 641 =
//     2,564). 1792 × 4 cannot hold its prompts: 4 × (⌈1,793 ÷ 128⌉ + 3 ×
//     2) = 84 blocks > 80.
func TestVLLMHybrid(t *testing.T) {
	py := vllmPython(t)
	dir := writeHybrid(t)
	s := startVLLM(t, py, "--model", dir, "--max-model-len", strconv.Itoa(vllmMaxLen), "--max-num-seqs", strconv.Itoa(vllmSeqs),
		"--num-gpu-blocks-override", strconv.Itoa(hybridBlocks), "--enable-prefix-caching", "--max-num-batched-tokens", "2048")
	ctx := context.Background()
	in, err := engines.Probe(ctx, engines.Target{BaseURL: s.url})
	if err != nil {
		t.Fatal(err)
	}
	shape := modelShape(t, dir)
	check(t, vllm, "hybrid layers: vLLM's KV capacity is group-aware, and tokentap's probe is vLLM's", func(t *testing.T) {
		cc, _ := scrape(t, s.url).First("vllm:cache_config_info")
		t.Logf("%s", cc)
		label, _ := cc.Label("kv_cache_size_tokens")
		if label != "2445" || in.KVCapacity != 2445 || in.KVBlocks != hybridBlocks || in.KVFromBlocks {
			t.Errorf("label kv_cache_size_tokens %q, probe %d tokens of %d blocks: want 2,445, vLLM's own (not 80 × 128 = 10,240)", label, in.KVCapacity, in.KVBlocks)
		}
		if kv := shape.KV; kv.FullLayers != 1 || kv.WindowLayers != 3 || kv.Window != hybridWindow {
			t.Errorf("layout read from config.json: %+v", kv)
		}
	})
	before := sum(scrape(t, s.url), "vllm:num_preemptions_total")
	sc := scenarios.Scenario{Name: "live-vllm-hybrid", Contexts: []int{640, 1792}, Concurrency: []int{4},
		Window: 4 * time.Second, MaxOutput: 32, API: "chat"}
	res, err := matrix.Run(ctx, matrix.Config{Target: replay.Target{BaseURL: s.url, IdleTimeout: idle}, Scenario: sc,
		FinishRequests: true, Limits: matrix.Limits{Told: []bandwidth.Told{{Shape: shape, ShapeFrom: "config.json of the hybrid tiny model"}}}})
	if err != nil {
		t.Fatal(err)
	}
	logMatrix(t, res)
	grew := sum(scrape(t, s.url), "vllm:num_preemptions_total") - before
	t.Logf("vllm:num_preemptions_total grew by %.0f", grew)
	check(t, vllm, "hybrid layers: a cell is counted in vLLM's blocks by group, and runs where tokens would have skipped it", func(t *testing.T) {
		c := res.Cell(640, 4)
		if c == nil || !c.Measured || (c.Status != result.Valid && c.Status != result.RequestsQueued) || grew != 0 {
			t.Errorf("640 × 4: %+v; preemptions grew %.0f: want it run within vLLM's cache, no preemption", c, grew)
		}
		if c := res.Cell(1792, 4); c == nil || c.Measured ||
			!strings.Contains(c.Reason, "4 × (1792 + 1) = 84 blocks > the KV cache's 80 blocks of 128 (79 for requests beside vLLM's null block; KV cache groups: 1 full-attention, 3 sliding-window of 128 tokens)") {
			t.Errorf("1792 × 4: %+v; want it not run, by vLLM's groups", c)
		}
	})
}
