package bandwidth

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/internal/tinygguf"
)

// llama3KV is Llama-3-8B's KV cache per token at float16, by hand:
// 2 (key, value) × 32 layers × 8 KV heads × 128 dims × 2 bytes.
const llama3KV = 2 * 32 * 8 * 128 * 2 // 131,072 bytes

// TestLimitHandComputed checks the arithmetic against cases worked by
// hand: an 8B model quantized to 4.9 GB on a 360 GB/s card (RTX 3060).
func TestLimitHandComputed(t *testing.T) {
	in := Inputs{BytesPerSec: 360e9, WeightBytes: 4.9e9, KVBytesPerToken: llama3KV}
	tests := []struct {
		name       string
		batch, seq float64
		want       float64 // worked by hand
	}{
		// 360 / 4.9 = 73.469…: at most 73 tok/s for one stream.
		{"one stream, empty context", 1, 0, 360.0 / 4.9},
		// 8,192 × 131,072 = 1,073,741,824 bytes of KV: 360 / (4.9 + 1.0737) = 60.26…
		{"one stream at 8K", 1, 8192, 360e9 / (4.9e9 + 1073741824)},
		// 8 streams at 8K: 360 × 8 / (4.9 + 8 × 1.0737) = 213.49…
		{"8 streams at 8K", 8, 8192, 2880e9 / (4.9e9 + 8*1073741824)},
		// 16 streams, empty: the weights are read once per step for all 16.
		{"16 streams, empty", 16, 0, 360 * 16 / 4.9},
		// A fractional average batch.
		{"2.5 active at 1K", 2.5, 1024, 360e9 * 2.5 / (4.9e9 + 2.5*1024*llama3KV)},
	}
	for _, tt := range tests {
		got := in.Limit(tt.batch, tt.seq)
		if math.Abs(got-tt.want) > 1e-9*tt.want {
			t.Errorf("%s: limit %.6f tok/s, want %.6f", tt.name, got, tt.want)
		}
	}
	if got := in.Limit(1, 0); math.Floor(got) != 73 {
		t.Errorf("8B at 4.9 GB on 360 GB/s: %.2f tok/s, want ≤ 73 (73.47)", got)
	}
	if got := in.Limit(1, 8192); math.Floor(got) != 60 {
		t.Errorf("… with 8K of KV: %.2f tok/s, want 60.26", got)
	}
	// Missing or meaningless inputs give no limit, never a guess.
	for _, bad := range []struct {
		in         Inputs
		batch, seq float64
	}{{Inputs{WeightBytes: 1e9}, 1, 0}, {Inputs{BytesPerSec: 1e9}, 1, 0}, {in, 0, 0}, {in, 1, -1}} {
		if got := bad.in.Limit(bad.batch, bad.seq); got != 0 {
			t.Errorf("Limit(%+v, %v, %v) = %v, want 0", bad.in, bad.batch, bad.seq, got)
		}
	}
	f := in.Figures(50, 1, 0)
	if f == nil || math.Abs(f.ShareOfBandwidthLimit-50/(360/4.9)) > 1e-12 || f.Batch != 1 || f.SeqTokens != 0 {
		t.Errorf("Figures = %+v", f)
	}
	if KVBytesPerToken(32, 8, 128, 2, 2) != llama3KV {
		t.Errorf("KVBytesPerToken(32, 8, 128, f16) = %v, want %d", KVBytesPerToken(32, 8, 128, 2, 2), llama3KV)
	}
}

func TestParseBandwidthAndBytes(t *testing.T) {
	bw := []struct {
		in   string
		want float64
	}{{"360GB/s", 360e9}, {"3.35 TB/s", 3.35e12}, {"1 GiB/s", 1 << 30}, {"936gbps", 936e9}}
	for _, tt := range bw {
		got, err := ParseBandwidth(tt.in)
		if err != nil || math.Abs(got-tt.want) > 1 {
			t.Errorf("ParseBandwidth(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"360", "fast", "-1GB/s", "0GB/s", "360XB/s", ""} {
		if _, err := ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q) accepted", in)
		}
	}
	by := []struct {
		in   string
		want int64
	}{{"4.9GB", 4_900_000_000}, {"4.9 G", 4_900_000_000}, {"8 GiB", 8 << 30}, {"4900000000", 4_900_000_000}, {"9.2MB", 9_200_000}}
	for _, tt := range by {
		got, err := ParseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "GB", "-4GB", "4XB", "1e300GB", "0.0001B"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
	if got := FormatBytes(16_060_522_496); got != "16.1 GB" {
		t.Errorf("FormatBytes = %q", got)
	}
}

func TestDTypeBytes(t *testing.T) {
	for name, want := range map[string]float64{"f16": 2, "bfloat16": 2, "FP8": 1, "fp8_e4m3": 1, "float32": 4, "q8_0": 34.0 / 32, "q4_0": 18.0 / 32} {
		if got, ok := DTypeBytes(name); !ok || got != want {
			t.Errorf("DTypeBytes(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"auto", "", "q3_k"} {
		if _, ok := DTypeBytes(name); ok {
			t.Errorf("DTypeBytes(%q) known", name)
		}
	}
}

// llama3Config is Meta-Llama-3-8B's config.json (the fields that matter).
const llama3Config = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
 "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"torch_dtype":"bfloat16",
 "max_position_embeddings":131072,"tie_word_embeddings":false,"model_type":"llama"}`

func TestFromHFConfig(t *testing.T) {
	s, err := FromHFConfig([]byte(llama3Config))
	if err != nil {
		t.Fatal(err)
	}
	// 8,030,261,248 parameters (Meta's figure for Llama 3 8B) × 2 bytes.
	if s.WeightBytes != 2*8_030_261_248 || s.Layers != 32 || s.KVHeads != 8 || s.HeadDim != 128 || s.DType != "bfloat16" || len(s.Why) > 0 {
		t.Errorf("Llama-3-8B: %+v", s)
	}
	if kv := s.KVBytesPerToken(2, 2); kv != llama3KV {
		t.Errorf("KV per token %v, want %d", kv, llama3KV)
	}
	// Qwen2.5-0.5B: tied embeddings, q/k/v biases, 14 heads over 2 KV heads of 64.
	qwen := `{"architectures":["Qwen2ForCausalLM"],"hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,
	 "num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,"torch_dtype":"bfloat16","tie_word_embeddings":true}`
	s, err = FromHFConfig([]byte(qwen))
	if err != nil {
		t.Fatal(err)
	}
	// 494,032,768 parameters: Qwen's own count for Qwen2.5-0.5B.
	if s.WeightBytes != 2*494_032_768 || s.HeadDim != 64 || s.KVHeads != 2 {
		t.Errorf("Qwen2.5-0.5B: %+v (params %d)", s, s.WeightBytes/2)
	}
	why := []struct{ cfg, says string }{
		{`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"hidden_size":4096,"intermediate_size":14336,"vocab_size":128256,"torch_dtype":"float16","quantization_config":{"quant_method":"awq","bits":4}}`, "quantized (awq 4-bit)"},
		{`{"architectures":["MixtralForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"intermediate_size":14336,"vocab_size":32000,"torch_dtype":"bfloat16","num_local_experts":8}`, "mixture of 8 experts"},
		{`{"architectures":["DeepseekV3ForCausalLM"],"num_hidden_layers":61,"num_attention_heads":128,"kv_lora_rank":512,"torch_dtype":"bfloat16"}`, "multi-head latent attention"},
		{`{"architectures":["GPTNeoXForCausalLM"],"num_hidden_layers":16,"num_attention_heads":8,"hidden_size":2048,"intermediate_size":8192,"vocab_size":50304,"torch_dtype":"float16"}`, "not GPTNeoXForCausalLM"},
	}
	for _, tt := range why {
		s, err := FromHFConfig([]byte(tt.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if s.WeightBytes != 0 || !strings.Contains(strings.Join(s.Why, " "), tt.says) {
			t.Errorf("%s: %+v, want no weight bytes and a reason saying %q", tt.cfg, s, tt.says)
		}
	}
	// A multimodal config keeps the language model in text_config.
	mm := `{"architectures":["Mistral3ForConditionalGeneration"],"torch_dtype":"bfloat16","text_config":{"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"hidden_size":5120}}`
	if s, err := FromHFConfig([]byte(mm)); err != nil || s.Layers != 40 || s.KVHeads != 8 || s.HeadDim != 128 || s.DType != "bfloat16" {
		t.Errorf("text_config: %+v, %v", s, err)
	}
	for _, bad := range []string{`[]`, `{"model_type":"bert"}`, `not json`,
		`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"hidden_size":2000000000000,"intermediate_size":1,"vocab_size":1,"torch_dtype":"float16"}`} {
		if _, err := FromHFConfig([]byte(bad)); err == nil {
			t.Errorf("FromHFConfig(%s) accepted", bad)
		}
	}
}

// TestGGUFTinyModel reads the live tier's model's metadata back: the
// shape tinygguf declares.
func TestGGUFTinyModel(t *testing.T) {
	c := tinygguf.Default()
	var buf bytes.Buffer
	if err := tinygguf.Write(&buf, c); err != nil {
		t.Fatal(err)
	}
	m, err := ReadGGUF(&buf)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := m.Shape()
	if !ok || s.Layers != c.Layers || s.KVHeads != c.KVHeads || s.HeadDim != c.HeadDim() {
		t.Fatalf("shape %+v, %v; want %d layers, %d KV heads of %d", s, ok, c.Layers, c.KVHeads, c.HeadDim())
	}
	if got := s.KVBytesPerToken(2, 2); got != float64(c.KVBytesPerToken()) {
		t.Errorf("KV per token %v, tinygguf says %d", got, c.KVBytesPerToken())
	}
	if m["general.name"] != tinygguf.Name {
		t.Errorf("general.name %v", m["general.name"])
	}
	for _, bad := range [][]byte{nil, []byte("GGUF"), []byte("GGML\x03\x00\x00\x00"), buf.Bytes()[:0]} {
		if _, err := ReadGGUF(bytes.NewReader(bad)); err == nil {
			t.Errorf("ReadGGUF(%q) accepted", bad)
		}
	}
}

// ggufHeader builds a GGUF v3 header with the given scalar metadata.
func ggufHeader(kv map[string]uint32) []byte {
	var b bytes.Buffer
	b.WriteString("GGUF")
	binary.Write(&b, binary.LittleEndian, uint32(3))
	binary.Write(&b, binary.LittleEndian, uint64(0))
	binary.Write(&b, binary.LittleEndian, uint64(len(kv)+1))
	str := func(s string) {
		binary.Write(&b, binary.LittleEndian, uint64(len(s)))
		b.WriteString(s)
	}
	str("general.architecture")
	binary.Write(&b, binary.LittleEndian, uint32(ggufString))
	str("qwen3")
	for k, v := range kv {
		str(k)
		binary.Write(&b, binary.LittleEndian, uint32(ggufU32))
		binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes()
}

// TestGGUFKeyLength: key and value lengths, where declared, beat
// embedding / heads (Qwen3 and Gemma declare head dims that differ).
func TestGGUFKeyLength(t *testing.T) {
	m, err := ReadGGUF(bytes.NewReader(ggufHeader(map[string]uint32{
		"qwen3.block_count": 36, "qwen3.attention.head_count": 32, "qwen3.attention.head_count_kv": 8,
		"qwen3.embedding_length": 2560, "qwen3.attention.key_length": 128, "qwen3.attention.value_length": 128,
	})))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := m.Shape()
	if !ok || s.KVBytesPerToken(2, 2) != 2*36*8*128*2 {
		t.Errorf("Qwen3-4B shape %+v: KV per token %v, want %d", s, s.KVBytesPerToken(2, 2), 2*36*8*128*2)
	}
}

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

// FuzzReadGGUF: any bytes give metadata or an error, never a panic or a
// runaway allocation.
func FuzzReadGGUF(f *testing.F) {
	var buf bytes.Buffer
	c := tinygguf.Default()
	c.Words = []string{"alpha", "beta"}
	if err := tinygguf.Write(&buf, c); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes()[:4096])
	f.Add(ggufHeader(map[string]uint32{"qwen3.block_count": 2}))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadGGUF(bytes.NewReader(b))
		if err == nil {
			m.Shape()
		}
	})
}

// FuzzFromHFConfig: any bytes give a shape or an error; a shape never has
// negative figures, and weight bytes only with a known dtype.
func FuzzFromHFConfig(f *testing.F) {
	f.Add([]byte(llama3Config))
	f.Add([]byte(`{"num_hidden_layers":2,"num_attention_heads":1,"text_config":{"num_hidden_layers":3}}`))
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":1e9,"num_attention_heads":-4,"hidden_size":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FromHFConfig(b)
		if err != nil {
			return
		}
		if s.WeightBytes < 0 || s.Layers < 0 || s.KVHeads < 0 || s.HeadDim < 0 {
			t.Fatalf("shape %+v from %q", s, b)
		}
		if _, ok := DTypeBytes(s.DType); s.WeightBytes > 0 && !ok {
			t.Fatalf("weight bytes %d with dtype %q", s.WeightBytes, s.DType)
		}
	})
}

// FuzzParseSizes: the size and bandwidth parsers never panic and never
// give a non-positive value without an error.
func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"360GB/s", "4.9GB", "1e3", "8 GiB", "-1", "0.0001B", "9e18TB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseBytes(s); err == nil && v <= 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, v)
		}
		if v, err := ParseBandwidth(s); err == nil && !(v > 0) {
			t.Fatalf("ParseBandwidth(%q) = %v", s, v)
		}
	})
}
