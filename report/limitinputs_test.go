package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
)

// TestLimitInputsMoE: the limit's inputs of a mixture of experts with
// sliding-window layers (gpt-oss-20b's) say what a step does not read
// whole: the input table and the routed experts, and the window.
func TestLimitInputsMoE(t *testing.T) {
	r := syntheticBeyond()
	r.Bandwidth = &result.Bandwidth{GBPerSec: 360, GBPerSecSource: "flag --gpu-bandwidth 360GB/s", WeightBytes: 13_761_264_768,
		WeightSource: "--model-config gpt-oss-20b.json", InputEmbeddingBytes: 1_158_266_880,
		MoE:         &result.MoELimit{Experts: 32, ExpertsPerToken: 4, Layers: 24, ExpertBytes: 10_165_616_640},
		KVLayout:    "12 full-attention layers, 6144 key + 6144 value elements per token; 12 sliding-window layers (128 tokens), 6144 + 6144 per token",
		ShapeSource: "--model-config gpt-oss-20b.json", KVDType: "bfloat16", KVBytesPerElem: 2, KVDTypeSource: "flag --kv-dtype",
		KVBytesPerToken: 24_576, SlidingWindow: 128, WindowKVBytesPerToken: 24_576}
	if err := schematest.Result(r); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Input embeddings (not read per step)", "1.16 GB", "Routed experts", "10.2 GB: 32 per layer in 24 layers, 4 per token",
		"KV cache per token, full-attention layers", "Sliding-window layers", "24,576 bytes per token, up to 128 tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q", want)
		}
	}
}
