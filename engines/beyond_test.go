package engines

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestReadTimings: each engine's TTFT parts come from _sum and _count
// (summed over label sets), TGI's prefill only from its prefill batches,
// llama.cpp's as a counter of seconds without a count.
func TestReadTimings(t *testing.T) {
	vllm, err := os.ReadFile("testdata/vllm/metrics_timings.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind, page string
		want       map[string]Timing
	}{
		{KindVLLM, string(vllm), map[string]Timing{
			result.PartEngineTTFT: {Seconds: 2, Count: 16},
			result.PartQueue:      {Seconds: 0.25, Count: 16},
			result.PartPrefill:    {Seconds: 1, Count: 16},
		}},
		{KindSGLang, "sglang:queue_time_seconds_sum 3\nsglang:queue_time_seconds_count 6\nsglang:time_to_first_token_seconds_sum 9\nsglang:time_to_first_token_seconds_count 6\n",
			map[string]Timing{result.PartQueue: {Seconds: 3, Count: 6}, result.PartEngineTTFT: {Seconds: 9, Count: 6}}},
		{KindTGI, `tgi_request_queue_duration_sum 0.5
tgi_request_queue_duration_count 5
tgi_batch_inference_duration_sum{method="prefill"} 2
tgi_batch_inference_duration_count{method="prefill"} 4
tgi_batch_inference_duration_sum{method="decode"} 90
tgi_batch_inference_duration_count{method="decode"} 900
`, map[string]Timing{result.PartQueue: {Seconds: 0.5, Count: 5}, result.PartPrefill: {Seconds: 2, Count: 4}}},
		{KindLlamaCpp, "llamacpp:prompt_seconds_total 0.121368\nllamacpp:requests_deferred 0\n",
			map[string]Timing{result.PartPrefill: {Seconds: 0.121368, Counter: true}}},
		{KindOllama, "anything 1\n", map[string]Timing{}},
		{KindVLLM, "vllm:num_requests_waiting 0\nvllm:time_to_first_token_seconds_sum 1\n", map[string]Timing{}}, // no _count: no figure
	}
	for _, tt := range tests {
		m, _ := ParseMetrics([]byte(tt.page))
		got := readTimings(tt.kind, m)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %d parts %+v, want %d", tt.kind, len(got), got, len(tt.want))
		}
		for part, w := range tt.want {
			g := got[part]
			if math.Abs(g.Seconds-w.Seconds) > 1e-12 || g.Count != w.Count || g.Counter != w.Counter || !strings.HasPrefix(g.Source, "GET /metrics ") {
				t.Errorf("%s %s: %+v, want %+v", tt.kind, part, g, w)
			}
		}
	}
	if s := readTimings(KindTGI, mustMetrics(t, "tgi_batch_inference_duration_sum{method=\"prefill\"} 1\ntgi_batch_inference_duration_count{method=\"prefill\"} 1\n"))[result.PartPrefill].Source; !strings.Contains(s, `{method="prefill"}`) || !strings.Contains(s, "per prefill batch") {
		t.Errorf("TGI prefill source %q: should name the label and say it is per batch", s)
	}
}

func mustMetrics(t *testing.T, s string) Metrics {
	t.Helper()
	m, err := ParseMetrics([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTimingsSince(t *testing.T) {
	before := Timings{result.PartQueue: {Seconds: 1, Count: 10, Source: "q"}, result.PartPrefill: {Seconds: 5, Count: 10}, result.PartEngineTTFT: {Seconds: 9, Count: 10}}
	after := Timings{result.PartQueue: {Seconds: 1.5, Count: 14, Source: "q"}, result.PartPrefill: {Seconds: 1, Count: 2}, "new": {Seconds: 1, Count: 1}}
	d := after.Since(before)
	if q := d[result.PartQueue]; math.Abs(q.Seconds-0.5) > 1e-12 || q.Count != 4 || q.Source != "q" {
		t.Errorf("queue delta %+v", q)
	}
	if _, ok := d[result.PartPrefill]; ok {
		t.Error("a part that went backwards (engine restart) has a delta")
	}
	if _, ok := d["new"]; ok {
		t.Error("a part missing from the first reading has a delta")
	}
	if _, ok := d[result.PartEngineTTFT]; ok {
		t.Error("a part missing from the second reading has a delta")
	}
}

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
