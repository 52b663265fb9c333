package bandwidth

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/internal/test/tinygguf"
)

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
	if !ok || s.KV.Layers != c.Layers || s.KV.KVHeads != c.KVHeads || s.KV.HeadDim != c.HeadDim() {
		t.Fatalf("shape %+v, %v; want %d layers, %d KV heads of %d", s, ok, c.Layers, c.KVHeads, c.HeadDim())
	}
	if got := s.KVBytesPerToken(2, 2); got != float64(c.KVBytesPerToken()) {
		t.Errorf("KV per token %v, tinygguf says %d", got, c.KVBytesPerToken())
	}
	if m.Meta["general.name"] != tinygguf.Name {
		t.Errorf("general.name %v", m.Meta["general.name"])
	}
	// tinygguf's tensors are F16 and F32, untied: all its weights, of
	// which the input table (vocab × embedding × 2 bytes) is not read.
	if s.WeightBytes != c.WeightBytes() || s.EmbedBytes != int64(c.VocabSize()*c.Embedding*2) || s.MoE.Experts != 0 {
		t.Errorf("weights %d, input table %d; tinygguf says %d, %d", s.WeightBytes, s.EmbedBytes, c.WeightBytes(), c.VocabSize()*c.Embedding*2)
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
	var hdr bytes.Buffer
	meta, ts := qwen3MoEHeader()
	if err := tinygguf.WriteHeader(&hdr, meta, ts[:20]); err != nil {
		f.Fatal(err)
	}
	f.Add(hdr.Bytes())
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadGGUF(bytes.NewReader(b))
		if err != nil {
			return
		}
		s, _ := m.Shape()
		k := s.KV
		if s.WeightBytes < 0 || s.EmbedBytes < 0 || s.MoE.Bytes > s.WeightBytes || k.FullKeys < 0 || k.WindowKeys < 0 || k.Window < 0 {
			t.Fatalf("shape %+v from %q", s, b)
		}
	})
}

// ggml type numbers the headers below use (ggml.h).
const (
	tF32   = 0
	tF16   = 1
	tBF16  = 30
	tMXFP4 = 39
)

// tensor is a tensor description for a header; ggml dims, ne[0] first.
func tensor(name string, typ uint32, dims ...int64) tinygguf.Tensor {
	var ds []uint64
	for _, d := range dims {
		ds = append(ds, uint64(d))
	}
	b, _ := TensorBytes(Tensor{Type: ggmlTypeName(typ), Dims: ds})
	return tinygguf.Tensor{Name: name, Dims: dims, Type: typ, Bytes: int64(b)}
}

// readHeader writes a header with tinygguf and reads it back.
func readHeader(t *testing.T, meta []tinygguf.KV, tensors []tinygguf.Tensor) Shape {
	t.Helper()
	var buf bytes.Buffer
	if err := tinygguf.WriteHeader(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUF(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tensors) != len(tensors) {
		t.Fatalf("read %d tensors of %d", len(g.Tensors), len(tensors))
	}
	s, _ := g.Shape()
	return s
}

// qwen3MoEHeader is Qwen3-30B-A3B as llama.cpp's convert_hf_to_gguf.py
// writes it at bf16: matrices BF16, norms and the router F32.
func qwen3MoEHeader() ([]tinygguf.KV, []tinygguf.Tensor) {
	meta := []tinygguf.KV{{Key: "general.architecture", Val: "qwen3moe"}, {Key: "qwen3moe.block_count", Val: uint32(48)},
		{Key: "qwen3moe.context_length", Val: uint32(40960)}, {Key: "qwen3moe.embedding_length", Val: uint32(2048)},
		{Key: "qwen3moe.feed_forward_length", Val: uint32(6144)}, {Key: "qwen3moe.attention.head_count", Val: uint32(32)},
		{Key: "qwen3moe.attention.head_count_kv", Val: uint32(4)}, {Key: "qwen3moe.attention.key_length", Val: uint32(128)},
		{Key: "qwen3moe.attention.value_length", Val: uint32(128)}, {Key: "qwen3moe.expert_count", Val: uint32(128)},
		{Key: "qwen3moe.expert_used_count", Val: uint32(8)}, {Key: "qwen3moe.expert_feed_forward_length", Val: uint32(768)},
		{Key: "tokenizer.ggml.tokens", Val: []string{"a", "b"}}}
	ts := []tinygguf.Tensor{tensor("token_embd.weight", tBF16, 2048, 151936), tensor("output_norm.weight", tF32, 2048),
		tensor("output.weight", tBF16, 2048, 151936)}
	for i := range 48 {
		p := "blk." + strconv.Itoa(i) + "."
		ts = append(ts, tensor(p+"attn_norm.weight", tF32, 2048), tensor(p+"attn_q.weight", tBF16, 2048, 4096),
			tensor(p+"attn_k.weight", tBF16, 2048, 512), tensor(p+"attn_v.weight", tBF16, 2048, 512),
			tensor(p+"attn_output.weight", tBF16, 4096, 2048), tensor(p+"attn_q_norm.weight", tF32, 128),
			tensor(p+"attn_k_norm.weight", tF32, 128), tensor(p+"ffn_norm.weight", tF32, 2048),
			tensor(p+"ffn_gate_inp.weight", tF32, 2048, 128), tensor(p+"ffn_gate_exps.weight", tBF16, 2048, 768, 128),
			tensor(p+"ffn_up_exps.weight", tBF16, 2048, 768, 128), tensor(p+"ffn_down_exps.weight", tBF16, 768, 2048, 128))
	}
	return meta, ts
}

// TestGGUFRealModels reads the headers of real models' GGUF files, their
// keys and tensors as llama.cpp writes them; every figure by hand.
func TestGGUFRealModels(t *testing.T) {
	// Qwen3-30B-A3B: per layer attention 18,874,368 BF16 = 37,748,736,
	// norms 2,048 + 128 + 128 + 2,048 F32 = 17,408, router 2,048×128 F32 =
	// 1,048,576: 38,814,720 × 48 = 1,863,106,560; output 2048×151,936
	// BF16 = 622,329,856, output norm 8,192: 2,485,444,608 read every
	// step. Experts 3 × 2048 × 768 × 128 × 2 bytes × 48 = 57,982,058,496,
	// one over the layers 452,984,832. Input table 622,329,856, not read.
	// One token: 2,485,444,608 + 8 × 452,984,832 = 6,109,323,264.
	qm, qt := qwen3MoEHeader()
	s := readHeader(t, qm, qt)
	in := Inputs{BytesPerSec: 360e9, WeightBytes: float64(s.WeightBytes - s.EmbedBytes - s.MoE.Bytes),
		Experts: float64(s.MoE.Experts), ExpertsUsed: float64(s.MoE.Used), ExpertBytes: float64(s.MoE.Bytes) / float64(s.MoE.Experts)}
	if s.WeightBytes != 61_089_832_960 || s.EmbedBytes != 622_329_856 || s.MoE != (MoE{Experts: 128, Used: 8, Layers: 48, Bytes: 57_982_058_496}) ||
		in.StepWeightBytes(1) != 6_109_323_264 || len(s.Why) > 0 {
		t.Errorf("Qwen3-30B-A3B GGUF: %+v; a step of one reads %.0f", s, in.StepWeightBytes(1))
	}
	if s.KV.Layers != 48 || s.KV.KVHeads != 4 || s.KV.HeadDim != 128 || s.KVBytesPerToken(2, 2) != 98_304 {
		t.Errorf("Qwen3-30B-A3B GGUF KV: %+v", s.KV)
	}

	// gpt-oss-20b, experts in MXFP4: per layer BF16 attention 2880×4096 +
	// 2 × 2880×512 + 4096×2880 = 26,542,080 × 2 = 53,084,160; F32 norms
	// 2 × 2,880, biases 4,096 + 512 + 512 + 2,880, sinks 64, router
	// 2,880×32 + 32 = 106,016 × 4 = 424,064: 53,508,224 × 24 =
	// 1,284,197,376; output 2880×201,088 BF16 = 1,158,266,880, its norm
	// 11,520: 2,442,475,776. Experts 3 × 2880 × 2880 × 32 MXFP4 =
	// 796,262,400 × 17/32 = 423,014,400, biases 3 × 2880 × 32 F32 =
	// 1,105,920: 424,120,320 × 24 = 10,178,887,680, one over the layers
	// 318,090,240. One token: 2,442,475,776 + 4 × 318,090,240 =
	// 3,714,836,736. KV: llama.cpp's pattern for gpt-oss is 2, so 12
	// layers of 8 × 64 slide within 128 tokens, 12 are full.
	meta := []tinygguf.KV{{Key: "general.architecture", Val: "gpt-oss"}, {Key: "gpt-oss.block_count", Val: uint32(24)},
		{Key: "gpt-oss.embedding_length", Val: uint32(2880)}, {Key: "gpt-oss.feed_forward_length", Val: uint32(2880)},
		{Key: "gpt-oss.attention.head_count", Val: uint32(64)}, {Key: "gpt-oss.attention.head_count_kv", Val: uint32(8)},
		{Key: "gpt-oss.attention.key_length", Val: uint32(64)}, {Key: "gpt-oss.attention.value_length", Val: uint32(64)},
		{Key: "gpt-oss.attention.sliding_window", Val: uint32(128)}, {Key: "gpt-oss.expert_count", Val: uint32(32)},
		{Key: "gpt-oss.expert_used_count", Val: uint32(4)}}
	ts := []tinygguf.Tensor{tensor("token_embd.weight", tBF16, 2880, 201088), tensor("output_norm.weight", tF32, 2880),
		tensor("output.weight", tBF16, 2880, 201088)}
	for i := range 24 {
		p := "blk." + strconv.Itoa(i) + "."
		ts = append(ts, tensor(p+"attn_norm.weight", tF32, 2880), tensor(p+"attn_q.weight", tBF16, 2880, 4096), tensor(p+"attn_q.bias", tF32, 4096),
			tensor(p+"attn_k.weight", tBF16, 2880, 512), tensor(p+"attn_k.bias", tF32, 512), tensor(p+"attn_v.weight", tBF16, 2880, 512),
			tensor(p+"attn_v.bias", tF32, 512), tensor(p+"attn_output.weight", tBF16, 4096, 2880), tensor(p+"attn_output.bias", tF32, 2880),
			tensor(p+"attn_sinks.weight", tF32, 64), tensor(p+"post_attention_norm.weight", tF32, 2880),
			tensor(p+"ffn_gate_inp.weight", tF32, 2880, 32), tensor(p+"ffn_gate_inp.bias", tF32, 32),
			tensor(p+"ffn_gate_exps.weight", tMXFP4, 2880, 2880, 32), tensor(p+"ffn_gate_exps.bias", tF32, 2880, 32),
			tensor(p+"ffn_up_exps.weight", tMXFP4, 2880, 2880, 32), tensor(p+"ffn_up_exps.bias", tF32, 2880, 32),
			tensor(p+"ffn_down_exps.weight", tMXFP4, 2880, 2880, 32), tensor(p+"ffn_down_exps.bias", tF32, 2880, 32))
	}
	s = readHeader(t, meta, ts)
	in = Inputs{BytesPerSec: 360e9, WeightBytes: float64(s.WeightBytes - s.EmbedBytes - s.MoE.Bytes),
		Experts: float64(s.MoE.Experts), ExpertsUsed: float64(s.MoE.Used), ExpertBytes: float64(s.MoE.Bytes) / float64(s.MoE.Experts)}
	if s.MoE != (MoE{Experts: 32, Used: 4, Layers: 24, Bytes: 10_178_887_680}) || s.EmbedBytes != 1_158_266_880 ||
		in.StepWeightBytes(1) != 3_714_836_736 || len(s.Why) > 0 {
		t.Errorf("gpt-oss-20b GGUF: %+v; a step of one reads %.0f", s, in.StepWeightBytes(1))
	}
	if k := s.KV; k.FullLayers != 12 || k.WindowLayers != 12 || k.Window != 128 || k.FullKeys != 6_144 || k.WindowKeys != 6_144 {
		t.Errorf("gpt-oss-20b GGUF KV: %+v", k)
	}

	// Falcon-7B at f16: per layer qkv 4544×4672 + dense 4544×4544 + MLP
	// 2 × 4544×18,176 = 207,060,992 × 2 = 414,121,984, LayerNorm weight
	// and bias F32 9,088 × 4 = 36,352: 414,158,336 × 32 =
	// 13,253,066,752; token_embd 65,024×4,544 × 2 = 590,938,112, also the
	// head (no output.weight); output norm 36,352: 13,844,041,216, all
	// read. One KV head (head_count_kv 1) of 4544 / 71 = 64: 32 × 64 × 2
	// × 2 = 8,192 bytes per token.
	meta = []tinygguf.KV{{Key: "general.architecture", Val: "falcon"}, {Key: "falcon.block_count", Val: uint32(32)},
		{Key: "falcon.embedding_length", Val: uint32(4544)}, {Key: "falcon.feed_forward_length", Val: uint32(18176)},
		{Key: "falcon.attention.head_count", Val: uint32(71)}, {Key: "falcon.attention.head_count_kv", Val: uint32(1)}}
	ts = []tinygguf.Tensor{tensor("token_embd.weight", tF16, 4544, 65024), tensor("output_norm.weight", tF32, 4544), tensor("output_norm.bias", tF32, 4544)}
	for i := range 32 {
		p := "blk." + strconv.Itoa(i) + "."
		ts = append(ts, tensor(p+"attn_norm.weight", tF32, 4544), tensor(p+"attn_norm.bias", tF32, 4544),
			tensor(p+"attn_qkv.weight", tF16, 4544, 4672), tensor(p+"attn_output.weight", tF16, 4544, 4544),
			tensor(p+"ffn_up.weight", tF16, 4544, 18176), tensor(p+"ffn_down.weight", tF16, 18176, 4544))
	}
	s = readHeader(t, meta, ts)
	if s.WeightBytes != 13_844_041_216 || s.EmbedBytes != 0 || s.MoE.Experts != 0 || s.KVBytesPerToken(2, 2) != 8_192 || s.KV.KVHeads != 1 {
		t.Errorf("Falcon-7B GGUF: %+v", s)
	}

	// Gemma-3-12B: llama.cpp's pattern for gemma3 is 6: of 48 layers of 8
	// × 256, 40 slide within 1,024 and 8 are full (8 × 8 × 256 = 16,384
	// key elements per token).
	s = readHeader(t, []tinygguf.KV{{Key: "general.architecture", Val: "gemma3"}, {Key: "gemma3.block_count", Val: uint32(48)},
		{Key: "gemma3.embedding_length", Val: uint32(3840)}, {Key: "gemma3.attention.head_count", Val: uint32(16)},
		{Key: "gemma3.attention.head_count_kv", Val: uint32(8)}, {Key: "gemma3.attention.key_length", Val: uint32(256)},
		{Key: "gemma3.attention.value_length", Val: uint32(256)}, {Key: "gemma3.attention.sliding_window", Val: uint32(1024)}}, nil)
	if k := s.KV; k.FullLayers != 8 || k.WindowLayers != 40 || k.Window != 1024 || k.FullKeys != 16_384 || k.WindowKeys != 81_920 {
		t.Errorf("Gemma-3-12B GGUF KV: %+v", k)
	}

	// DeepSeek-V2-Lite: multi-head latent attention caches 512 + 64 per
	// token and layer: 27 × 576 = 15,552 elements, 31,104 bytes at f16.
	// Without its tensors, a mixture of experts has no weight bytes.
	s = readHeader(t, []tinygguf.KV{{Key: "general.architecture", Val: "deepseek2"}, {Key: "deepseek2.block_count", Val: uint32(27)},
		{Key: "deepseek2.embedding_length", Val: uint32(2048)}, {Key: "deepseek2.attention.head_count", Val: uint32(16)},
		{Key: "deepseek2.attention.head_count_kv", Val: uint32(16)}, {Key: "deepseek2.attention.key_length", Val: uint32(192)},
		{Key: "deepseek2.attention.value_length", Val: uint32(128)}, {Key: "deepseek2.attention.kv_lora_rank", Val: uint32(512)},
		{Key: "deepseek2.rope.dimension_count", Val: uint32(64)}, {Key: "deepseek2.expert_count", Val: uint32(64)},
		{Key: "deepseek2.expert_used_count", Val: uint32(6)}, {Key: "deepseek2.leading_dense_block_count", Val: uint32(1)}}, nil)
	if s.KVBytesPerToken(2, 2) != 31_104 || s.WeightBytes != 0 || !strings.Contains(strings.Join(s.Why, " "), "expert tensor sizes") {
		t.Errorf("DeepSeek-V2-Lite GGUF: %+v", s)
	}

	// Per-layer KV heads (OpenELM-style, llama.cpp writes head_count_kv
	// as an array): 3 × 5 + 4 × 7 + 5 × 4 = 63 heads of 64 over 16
	// layers = 4,032 key elements per token, 16,128 bytes at f16.
	kvh := []int32{3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5}
	qh := make([]int32, 16)
	for i, k := range kvh {
		qh[i] = 4 * k
	}
	s = readHeader(t, []tinygguf.KV{{Key: "general.architecture", Val: "openelm"}, {Key: "openelm.block_count", Val: uint32(16)},
		{Key: "openelm.embedding_length", Val: uint32(1280)}, {Key: "openelm.attention.head_count", Val: qh},
		{Key: "openelm.attention.head_count_kv", Val: kvh}, {Key: "openelm.attention.key_length", Val: uint32(64)},
		{Key: "openelm.attention.value_length", Val: uint32(64)}}, nil)
	if s.KV.FullKeys != 4_032 || s.KVBytesPerToken(2, 2) != 16_128 || s.KV.KVHeads != 0 {
		t.Errorf("per-layer KV heads: %+v", s.KV)
	}
}

// TestGGUFRefusals: what a header does not let tokentap read is refused
// by name.
func TestGGUFRefusals(t *testing.T) {
	base := func(arch string, extra ...tinygguf.KV) []tinygguf.KV {
		return append([]tinygguf.KV{{Key: "general.architecture", Val: arch}, {Key: arch + ".block_count", Val: uint32(4)},
			{Key: arch + ".embedding_length", Val: uint32(256)}, {Key: arch + ".attention.head_count", Val: uint32(4)},
			{Key: arch + ".attention.head_count_kv", Val: uint32(2)}}, extra...)
	}
	tests := []struct {
		name    string
		meta    []tinygguf.KV
		tensors []tinygguf.Tensor
		says    string
	}{
		{"recurrent layers", base("qwen3next", tinygguf.KV{Key: "qwen3next.ssm.d_state", Val: uint32(128)}), nil, "qwen3next.ssm.d_state"},
		{"a window without a pattern", base("llama", tinygguf.KV{Key: "llama.attention.sliding_window", Val: uint32(4096)}), nil, "which layers of a llama model slide"},
		{"a layer without KV heads", base("lfm2", tinygguf.KV{Key: "lfm2.attention.head_count_kv", Val: []int32{0, 2, 0, 2}}), nil, "layer 0 has no KV heads"},
		{"an unknown tensor type", base("llama"), []tinygguf.Tensor{{Name: "token_embd.weight", Dims: []int64{256, 10}, Type: 99}}, "type 99"},
		{"experts without their count", base("llama"), []tinygguf.Tensor{tensor("blk.0.ffn_up_exps.weight", tF16, 256, 64, 8)}, "expert_count"},
	}
	for _, tt := range tests {
		s := readHeader(t, tt.meta, tt.tensors)
		if !strings.Contains(strings.Join(s.Why, " "), tt.says) {
			t.Errorf("%s: %+v, want a reason saying %q", tt.name, s, tt.says)
		}
	}
}
