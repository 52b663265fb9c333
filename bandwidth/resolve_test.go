package bandwidth

import (
	"math"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// llama3Config is Meta-Llama-3-8B's config.json (the fields that matter).
const llama3Config = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
 "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"torch_dtype":"bfloat16",
 "max_position_embeddings":131072,"tie_word_embeddings":false,"model_type":"llama"}`

func TestResolve(t *testing.T) {
	cfg, _ := FromHFConfig([]byte(llama3Config))
	flags := Told{Shape: Shape{WeightBytes: 4_900_000_000}, WeightFrom: "flag --weight-bytes"}
	conf := Told{Shape: cfg, WeightFrom: "--model-config c.json", ShapeFrom: "--model-config c.json"}
	engine := Told{KeyDType: "auto", DTypeFrom: "GET /metrics vllm:cache_config_info cache_dtype"}
	doc, in, ok := Resolve(GPUBandwidth{GBPerSec: 360, From: "flag --gpu-bandwidth"}, flags, conf, engine)
	if !ok || doc.WeightBytes != 4_900_000_000 || doc.WeightSource != "flag --weight-bytes" || doc.Layers != 32 ||
		doc.KVDType != "bfloat16" || doc.KVBytesPerToken != llama3KV || !strings.Contains(doc.KVDTypeSource, "the model's dtype") {
		t.Fatalf("resolved %+v, %v", doc, ok)
	}
	if got := in.Limit(1, 0); math.Abs(got-360/4.9) > 1e-9 {
		t.Errorf("limit %v", got)
	}
	// Nothing known: every input is missing, each with what would give it.
	doc, _, ok = Resolve(GPUBandwidth{Missing: "no GPU was detected or given"}, Told{KeyDType: "auto", DTypeFrom: "the engine"})
	if ok || len(doc.Missing) != 4 {
		t.Fatalf("resolved %+v with nothing known", doc)
	}
	for i, want := range []string{"no GPU was detected", "--weight-bytes", "--layers", "the model's own dtype"} {
		if !strings.Contains(doc.Missing[i], want) {
			t.Errorf("missing[%d] = %q, want it to say %q", i, doc.Missing[i], want)
		}
	}
	if _, ok := FromResult(&doc); ok {
		t.Error("FromResult of incomplete inputs is ok")
	}
	// A quantized config says why it gives no weight bytes.
	q, _ := FromHFConfig([]byte(`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"intermediate_size":14336,"vocab_size":128256,"torch_dtype":"float16","quantization_config":{"quant_method":"gptq","bits":4}}`))
	doc, _, _ = Resolve(GPUBandwidth{GBPerSec: 360}, Told{Shape: q, ShapeFrom: "cfg", KeyDType: "f16", DTypeFrom: "flag"})
	if len(doc.Missing) != 1 || !strings.Contains(doc.Missing[0], "quantized (gptq 4-bit)") {
		t.Errorf("quantized config: missing %q", doc.Missing)
	}
}

// TestResolveMoE: the weights' source brings its experts and input table
// along; a --weight-bytes before it is taken as what every step reads; a
// class default the config's reader took is said in the note.
func TestResolveMoE(t *testing.T) {
	s, _ := configInputs(t, "qwen3-30b-a3b.json", 360e9)
	conf := Told{Shape: s, WeightFrom: "cfg", ShapeFrom: "cfg", KeyDType: "bf16", DTypeFrom: "flag"}
	doc, in, ok := Resolve(GPUBandwidth{GBPerSec: 360}, conf)
	if !ok || doc.MoE == nil || *doc.MoE != (result.MoELimit{Experts: 128, ExpertsPerToken: 8, Layers: 48, ExpertBytes: 57_982_058_496}) ||
		doc.InputEmbeddingBytes != 622_329_856 || in.StepWeightBytes(1) != 6_083_735_552 {
		t.Errorf("Qwen3-30B-A3B: %+v, %+v", doc, in)
	}
	// --weight-bytes 6GB wins: a step reads 6 GB whatever its batch.
	doc, in, _ = Resolve(GPUBandwidth{GBPerSec: 360}, Told{Shape: Shape{WeightBytes: 6e9}, WeightFrom: "flag"}, conf)
	if doc.MoE != nil || doc.InputEmbeddingBytes != 0 || in.StepWeightBytes(64) != 6e9 {
		t.Errorf("--weight-bytes before a MoE config: %+v", doc)
	}
	l2, _ := FromHFConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":32,"vocab_size":32000,"torch_dtype":"float16"}`))
	doc, _, _ = Resolve(GPUBandwidth{GBPerSec: 360}, Told{Shape: l2, WeightFrom: "cfg", ShapeFrom: "cfg", KeyDType: "f16", DTypeFrom: "flag"})
	if !strings.Contains(doc.Note, "num_key_value_heads absent") || doc.KVHeads != 32 {
		t.Errorf("class default not said: %+v", doc)
	}
}
