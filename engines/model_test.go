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
	if !ok || m.Layers != 6 || m.KVHeads != 2 || m.HeadDim != 64 || m.WeightBytes != 22_040_064 {
		t.Errorf("ollama show: %+v, %v", m, ok)
	}
	if m, ok := parseOllamaModel([]byte(`{"model_info":{"general.architecture":"llama","llama.block_count":2},"tensors":[{"type":"Q9_X","shape":[4]}]}`)); !ok || m.WeightBytes != 0 {
		t.Errorf("unknown tensor type: %+v, want no weight bytes", m)
	}
	if got := describeShape(32, 8, 128, 0, 0); got != "32 layers × 8 KV heads × 128 head dim" {
		t.Errorf("describeShape = %q", got)
	}
	m2, _ := ParseMetrics([]byte(`vllm:cache_config_info{block_size="16",cache_dtype="fp8_e4m3",num_gpu_blocks="10"} 1`))
	if c, _ := parseCacheConfig(m2); c.DType != "fp8_e4m3" {
		t.Errorf("cache dtype %q", c.DType)
	}
}
