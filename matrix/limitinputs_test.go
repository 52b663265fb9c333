package matrix

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/internal/test/tinygguf"
	"github.com/tokentap/tokentap/result"
)

// TestEngineToldMoEGGUF: llama-server's meta.size is split by the GGUF
// its /props names: a mixture of experts' routed experts and the untied
// input table come from the file's tensors; without the file, the
// weights are missing, since only it says what a step reads.
func TestEngineToldMoEGGUF(t *testing.T) {
	// Two layers, 4 experts of which 2 per token, F16 (norms and router
	// F32): per layer q 8×8, k and v 8×4, o 8×8 at 2 bytes = 384, norms
	// 2 × 8 × 4 = 64, router 8×4×4 = 128: 576; experts 3 × 8×6×4 × 2 =
	// 1,152. Input table and output 8×10×2 = 160 each, output norm 32.
	// All: 160 + 160 + 32 + 2 × (576 + 1,152) = 3,808. A step of one:
	// 3,808 − 160 − 2,304 = 1,344 dense + 2 × 576 (one expert over both
	// layers, 2,304 / 4) = 2,496.
	meta := []tinygguf.KV{{Key: "general.architecture", Val: "qwen3moe"}, {Key: "qwen3moe.block_count", Val: uint32(2)},
		{Key: "qwen3moe.embedding_length", Val: uint32(8)}, {Key: "qwen3moe.attention.head_count", Val: uint32(2)},
		{Key: "qwen3moe.attention.head_count_kv", Val: uint32(1)}, {Key: "qwen3moe.attention.key_length", Val: uint32(4)},
		{Key: "qwen3moe.attention.value_length", Val: uint32(4)}, {Key: "qwen3moe.expert_count", Val: uint32(4)},
		{Key: "qwen3moe.expert_used_count", Val: uint32(2)}}
	f16 := func(name string, dims ...int64) tinygguf.Tensor {
		n := int64(2)
		for _, d := range dims {
			n *= d
		}
		return tinygguf.Tensor{Name: name, Dims: dims, Type: 1, Bytes: n}
	}
	f32 := func(name string, dims ...int64) tinygguf.Tensor {
		t := f16(name, dims...)
		t.Type, t.Bytes = 0, 2*t.Bytes
		return t
	}
	ts := []tinygguf.Tensor{f16("token_embd.weight", 8, 10), f16("output.weight", 8, 10), f32("output_norm.weight", 8)}
	for _, p := range []string{"blk.0.", "blk.1."} {
		ts = append(ts, f16(p+"attn_q.weight", 8, 8), f16(p+"attn_k.weight", 8, 4), f16(p+"attn_v.weight", 8, 4),
			f16(p+"attn_output.weight", 8, 8), f32(p+"attn_norm.weight", 8), f32(p+"ffn_norm.weight", 8),
			f32(p+"ffn_gate_inp.weight", 8, 4), f16(p+"ffn_gate_exps.weight", 8, 6, 4), f16(p+"ffn_up_exps.weight", 8, 6, 4),
			f16(p+"ffn_down_exps.weight", 6, 8, 4))
	}
	var buf bytes.Buffer
	if err := tinygguf.WriteHeader(&buf, meta, ts); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "moe.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	facts := engines.ModelFacts{WeightBytes: 3_808, WeightSource: "GET /v1/models data[0].meta.size", Path: path, PathSource: "GET /props model_path"}
	r := &runner{cfg: Config{Limits: Limits{ReadModelFile: true}}, info: &engines.Info{Kind: engines.KindLlamaCpp, ModelFacts: facts}, res: &result.Result{Engine: result.Engine{LaunchCommand: "llama-server -m moe.gguf"}}}
	told := r.engineTold()
	doc, in, ok := bandwidth.Resolve(bandwidth.GPUBandwidth{GBPerSec: 1}, told)
	if !ok || doc.WeightBytes != 3_808 || doc.InputEmbeddingBytes != 160 || doc.MoE == nil || doc.MoE.ExpertBytes != 2_304 ||
		in.StepWeightBytes(1) != 2_496 || doc.KVBytesPerToken != 32 || !strings.Contains(doc.WeightSource, "meta.size") ||
		!strings.Contains(doc.WeightSource, "GGUF metadata of "+path) {
		t.Errorf("inputs %+v, %+v (missing %q)", doc, in, doc.Missing)
	}
	r.cfg.Limits.ReadModelFile = false
	doc, _, ok = bandwidth.Resolve(bandwidth.GPUBandwidth{GBPerSec: 1}, r.engineTold())
	if ok || len(doc.Missing) < 2 || !strings.Contains(doc.Missing[0], "mixture of experts") {
		t.Errorf("without the file: %+v", doc.Missing)
	}
}
