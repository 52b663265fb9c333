package engines

import (
	"os"
	"testing"
)

func TestModelFactsParsers(t *testing.T) {
	b, err := os.ReadFile("testdata/llamacpp/models.json")
	if err != nil {
		t.Fatal(err)
	}
	if size, ok := parseLlamaModelMeta(b); !ok || size != 20_000_000 {
		t.Errorf("llama.cpp meta.size = %d, %v; want 20000000", size, ok)
	}
	for _, bad := range []string{`{"data":[]}`, `{"data":[{"meta":{"size":-1}}]}`, `{"data":[{"meta":{"size":1.5}}]}`, `[]`} {
		if _, ok := parseLlamaModelMeta([]byte(bad)); ok {
			t.Errorf("parseLlamaModelMeta(%s) ok", bad)
		}
	}
	b, err = os.ReadFile("testdata/ollama/show_tensors.json")
	if err != nil {
		t.Fatal(err)
	}
	// Ollama 0.17.4's answer for a 6-layer model with 6 heads over 2 KV
	// heads of 64 (embedding 384): 11,015,040 weights, F16 matrices and F32
	// norms, 22,040,064 bytes (the tensors' shapes × 2 or 4, by hand).
	m, ok := parseOllamaModel(b)
	if !ok || m.KV.Layers != 6 || m.KV.KVHeads != 2 || m.KV.HeadDim != 64 || m.WeightBytes != 22_040_064 {
		t.Errorf("ollama show: %+v, %v", m, ok)
	}
	if m, ok := parseOllamaModel([]byte(`{"model_info":{"general.architecture":"llama","llama.block_count":2},"tensors":[{"name":"x","type":"Q9_X","shape":[4]}]}`)); !ok || m.WeightBytes != 0 {
		t.Errorf("unknown tensor type: %+v, want no weight bytes", m)
	}
	// A mixture of experts (testdata/ollama/show_moe.json: Qwen3-30B-A3B's
	// keys and tensors at Q4_K, cut to two layers): expert_count and expert_used_count flow through
	// with the expert tensors' bytes: 3 × 2048 × 768 × 128 × 144/256 =
	// 339,738,624 per layer; a per-layer head_count_kv array reads as
	// the heads of each layer (4 and 4 of 128: 1,024 key elements per
	// token over the 2 layers).
	b, err = os.ReadFile("testdata/ollama/show_moe.json")
	if err != nil {
		t.Fatal(err)
	}
	m, ok = parseOllamaModel(b)
	if !ok || m.MoE.Experts != 128 || m.MoE.Used != 8 || m.MoE.Layers != 2 || m.MoE.Bytes != 2*339_738_624 || m.KV.FullKeys != 1_024 {
		t.Errorf("ollama show, MoE: %+v, %v", m, ok)
	}
	m2, _ := ParseMetrics([]byte(`vllm:cache_config_info{block_size="16",cache_dtype="fp8_e4m3",num_gpu_blocks="10"} 1`))
	if c, _ := parseCacheConfig(m2); c.DType != "fp8_e4m3" {
		t.Errorf("cache dtype %q", c.DType)
	}
}
