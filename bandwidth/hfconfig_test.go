package bandwidth

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realConfig is one public model's config.json (testdata/config, the
// fields as the model's repository publishes them) and what the limit
// must read from it, every figure worked by hand in its comment.
type realConfig struct {
	file string
	// weights: all the weights' bytes; embed: the untied input table's;
	// experts: all routed experts' bytes, of e experts with k per token
	// in moeLayers layers.
	weights, embed, experts int64
	e, k, moeLayers         int
	// KV at bf16: full-attention bytes per token; window bytes per token
	// within window tokens.
	kvFull, kvWindow float64
	window           int
	// step1 is what a step of one sequence reads of the weights.
	step1 float64
}

var realConfigs = []realConfig{
	// Llama-3.1-8B: per layer q 4096×4096 + k, v 4096×1024 each + o
	// 4096×4096 = 41,943,040; MLP 3×4096×14,336 = 176,160,768; norms
	// 8,192: 218,112,000 × 32 = 6,979,584,000; embeddings and head
	// 128,256×4,096 = 525,336,576 each; final norm 4,096:
	// 8,030,261,248 parameters × 2 bytes = 16,060,522,496. Untied: the
	// input table (1,050,673,152 bytes) is not read, a step reads
	// 15,009,849,344. KV: 32 layers × 8 heads × 128 × 2 (K, V) × 2 bytes
	// = 131,072 per token.
	{file: "llama-3.1-8b.json", weights: 16_060_522_496, embed: 1_050_673_152, kvFull: 131_072, step1: 15_009_849_344},
	// Qwen2.5-7B: per layer q 3584×3584 = 12,845,056, k and v 3584×512
	// each = 3,670,016, o 12,845,056, q/k/v biases 3,584 + 1,024, MLP
	// 3×3584×18,944 = 203,685,888, norms 7,168: 233,057,792 × 28 =
	// 6,525,618,176; embeddings and head 152,064×3,584 = 544,997,376
	// each; final norm 3,584: 7,615,616,512 (Qwen's 7.61B) × 2 =
	// 15,231,233,024; untied: less 1,089,994,752 = 14,141,238,272 read.
	// sliding_window 131072 is off (use_sliding_window false). KV 28 × 4
	// × 128 × 2 × 2 = 57,344.
	{file: "qwen2.5-7b.json", weights: 15_231_233_024, embed: 1_089_994_752, kvFull: 57_344, step1: 14_141_238_272},
	// Qwen3-30B-A3B: per layer attention q 2048×4096 + k, v 2048×512 each
	// + o 4096×2048 + q/k norms 2×128 = 18,874,624, norms 4,096, router
	// 128×2,048 = 262,144: 19,140,864 × 48 = 918,761,472, plus the head
	// 151,936×2,048 = 311,164,928 and final norm 2,048: 1,229,928,448
	// dense parameters = 2,459,856,896 bytes. Experts 3×2048×768 =
	// 4,718,592 each, × 128 × 48 = 28,991,029,248 = 57,982,058,496 bytes;
	// one expert over the 48 layers 452,984,832. All: 2,459,856,896 +
	// 311,164,928×2 (input table) + 57,982,058,496 = 61,064,245,248
	// (30.5B parameters). One token reads 8 experts: 2,459,856,896 +
	// 8 × 452,984,832 = 6,083,735,552 (3.04B, Qwen's 3.3B "activated"
	// with the input table). KV 48 × 4 × 128 × 2 × 2 = 98,304.
	{file: "qwen3-30b-a3b.json", weights: 61_064_245_248, embed: 622_329_856, experts: 57_982_058_496, e: 128, k: 8, moeLayers: 48,
		kvFull: 98_304, step1: 6_083_735_552},
	// Mixtral-8x7B: per layer attention 4096×4096×2 + 4096×1024×2 =
	// 41,943,040, norms 8,192, router 8×4,096 = 32,768: 41,984,000 × 32
	// = 1,343,488,000, head 32,000×4,096 = 131,072,000, final norm 4,096:
	// 1,474,564,096 dense = 2,949,128,192 bytes. Experts 3×4096×14,336 =
	// 176,160,768 × 8 × 32 = 45,097,156,608 = 90,194,313,216 bytes, one
	// over 32 layers 11,274,289,152. All: 93,405,585,408 (46.7B). One
	// token: 2,949,128,192 + 2 × 11,274,289,152 = 25,497,706,496 (12.9B
	// active). sliding_window null: full attention, KV 131,072.
	{file: "mixtral-8x7b.json", weights: 93_405_585_408, embed: 262_144_000, experts: 90_194_313_216, e: 8, k: 2, moeLayers: 32,
		kvFull: 131_072, step1: 25_497_706_496},
	// gpt-oss-20b: per layer attention q 2880×4096 + 4,096 bias, k and v
	// 2880×512 + 512 each, o 4096×2880 + 2,880, sinks 64 = 26,550,144;
	// norms 5,760; router 32×2,880 + 32 = 92,192: 26,648,096 × 24 =
	// 639,554,304, final norm 2,880, head 201,088×2,880 = 579,133,440:
	// 1,218,690,624 at bf16 = 2,437,381,248 bytes. Experts in MXFP4
	// (17 bytes per 32): gate_up 2880×5760 + down 2880×2880 = 24,883,200
	// weights = 13,219,200 bytes, biases 5,760 + 2,880 at bf16 = 17,280:
	// 13,236,480 per expert, × 32 × 24 = 10,165,616,640; one expert over
	// 24 layers 317,675,520. All: 2,437,381,248 + 1,158,266,880 (input
	// table) + 10,165,616,640 = 13,761,264,768 (the checkpoint's 13.8 GB).
	// One token: 2,437,381,248 + 4 × 317,675,520 = 3,708,083,328. KV: 12
	// full layers × 8 × 64 × 2 × 2 = 24,576 per token; 12 sliding layers
	// the same within 128 tokens.
	{file: "gpt-oss-20b.json", weights: 13_761_264_768, embed: 1_158_266_880, experts: 10_165_616_640, e: 32, k: 4, moeLayers: 24,
		kvFull: 24_576, kvWindow: 24_576, window: 128, step1: 3_708_083_328},
	// Gemma-3-12B (text): per layer q 3840×4096, k and v 3840×2048 each,
	// o 4096×3840 = 47,185,920, MLP 3×3840×15,360 = 176,947,200, four
	// norms 15,360, q/k norms 512: 224,148,992 × 48 = 10,759,151,616;
	// embeddings 262,208×3,840 = 1,006,878,720, tied (the head); final
	// norm 3,840: 11,766,034,176 × 2 = 23,532,068,352, all read (the
	// table is the head). KV: 8 full layers × 8 × 256 × 2 × 2 = 65,536
	// per token; 40 sliding layers 327,680 per token within 1,024.
	{file: "gemma-3-12b.json", weights: 23_532_068_352, kvFull: 65_536, kvWindow: 327_680, window: 1024, step1: 23_532_068_352},
	// Falcon-7B: per layer query_key_value 4544×(4544 + 2×64) =
	// 21,229,568, dense 4544×4544 = 20,647,936, MLP 2×4544×18,176 =
	// 165,183,488, one LayerNorm (parallel attention) 2×4,544:
	// 207,070,080 × 32 = 6,626,242,560; embeddings 65,024×4,544 =
	// 295,469,056, tied; ln_f 9,088: 6,921,720,704 × 2 = 13,843,441,408.
	// multi_query: one KV head, 32 × 1 × 64 × 2 × 2 = 8,192 per token.
	{file: "falcon-7b.json", weights: 13_843_441_408, kvFull: 8_192, step1: 13_843_441_408},
	// DeepSeek-V2-Lite: per layer MLA q 2048×16×192 = 6,291,456,
	// kv_a 2048×576 = 1,179,648, kv_a norm 512, kv_b 512×16×256 =
	// 2,097,152, o 16×128×2048 = 4,194,304: 13,763,072, norms 4,096:
	// 13,767,168 × 27 = 371,713,536; layer 0 dense MLP 3×2048×10,944 =
	// 67,239,936; 26 MoE layers: shared 3×2048×2816 = 17,301,504 and
	// router 64×2,048 = 131,072 each = 453,246,976; head 102,400×2,048 =
	// 209,715,200, final norm 2,048: 1,101,917,696 dense = 2,203,835,392
	// bytes. Experts 3×2048×1408 = 8,650,752 × 64 × 26 = 14,394,851,328 =
	// 28,789,702,656 bytes, one over 26 layers 449,839,104. All:
	// 2,203,835,392 + 419,430,400 + 28,789,702,656 = 31,412,968,448
	// (15.7B). One token: 2,203,835,392 + 6 × 449,839,104 =
	// 4,902,870,016 (2.45B, the paper's 2.4B activated). KV: the latent
	// 512 + rotary key 64 per layer, 27 × 576 × 2 = 31,104 per token.
	{file: "deepseek-v2-lite.json", weights: 31_412_968_448, embed: 419_430_400, experts: 28_789_702_656, e: 64, k: 6, moeLayers: 26,
		kvFull: 31_104, step1: 4_902_870_016},
}

// configInputs resolves a test config at bandwidth bw with a bf16 KV cache.
func configInputs(t testing.TB, file string, bw float64) (Shape, Inputs) {
	t.Helper()
	s, in, err := loadConfig(file, bw)
	if err != nil {
		t.Fatal(err)
	}
	return s, in
}

func loadConfig(file string, bw float64) (Shape, Inputs, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "config", file))
	if err != nil {
		return Shape{}, Inputs{}, err
	}
	s, err := FromHFConfig(b)
	if err != nil {
		return Shape{}, Inputs{}, fmt.Errorf("%s: %w", file, err)
	}
	doc, in, ok := Resolve(GPUBandwidth{GBPerSec: bw / 1e9, From: "test"}, Told{Shape: s, WeightFrom: file, ShapeFrom: file, KeyDType: "auto", DTypeFrom: "test"})
	if !ok {
		return Shape{}, Inputs{}, fmt.Errorf("%s: missing %q (shape %+v)", file, doc.Missing, s)
	}
	return s, in, nil
}

func TestFromHFConfigRealModels(t *testing.T) {
	for _, m := range realConfigs {
		s, in := configInputs(t, m.file, 360e9)
		if s.WeightBytes != m.weights || s.EmbedBytes != m.embed || len(s.Why) > 0 {
			t.Errorf("%s: weights %d, input table %d (why %q); want %d, %d", m.file, s.WeightBytes, s.EmbedBytes, s.Why, m.weights, m.embed)
		}
		if s.MoE.Bytes != m.experts || s.MoE.Experts != m.e || s.MoE.Used != m.k || s.MoE.Layers != m.moeLayers {
			t.Errorf("%s: experts %+v; want %d bytes, %d of %d in %d layers", m.file, s.MoE, m.experts, m.k, m.e, m.moeLayers)
		}
		if in.KVBytesPerToken != m.kvFull || in.WindowBytesPerToken != m.kvWindow || int(in.Window) != m.window {
			t.Errorf("%s: KV %v per token, window %v × %v; want %v, %d × %v (%s)", m.file, in.KVBytesPerToken, in.Window, in.WindowBytesPerToken, m.kvFull, m.window, m.kvWindow, s.KV.Layout)
		}
		if got := in.StepWeightBytes(1); math.Abs(got-m.step1) > 0.5 {
			t.Errorf("%s: one sequence's step reads %.0f bytes of weights, want %.0f", m.file, got, m.step1)
		}
		if got, want := in.Limit(1, 0), 360e9/m.step1; math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s: limit at batch 1, empty context %.4f, want %.4f", m.file, got, want)
		}
	}
}

// TestMoELimitAtBatch: a batch touches more experts than one token, by
// E·(1 − (1 − k/E)^b); at batch 8 on Qwen3-30B-A3B, 128 × (1 − (120/128)^8)
// = 128 × (1 − 0.87890625^4) = 128 × (1 − 0.596719…) = 51.620… experts per
// layer.
func TestMoELimitAtBatch(t *testing.T) {
	_, in := configInputs(t, "qwen3-30b-a3b.json", 360e9)
	d := DistinctExperts(128, 8, 8)
	if math.Abs(d-51.620) > 0.001 {
		t.Errorf("distinct experts at batch 8: %.4f, want 51.620", d)
	}
	// 2,459,856,896 + 51.620… × 452,984,832 bytes, and 8 sequences of 4K
	// at 98,304 bytes per token.
	want := 360e9 * 8 / (2_459_856_896 + d*452_984_832 + 8*4096*98_304)
	if got := in.Limit(8, 4096); math.Abs(got-want) > 1e-9*want {
		t.Errorf("limit at 8 × 4K: %.3f, want %.3f", got, want)
	}
	// One token reads k experts; a huge batch every one of them.
	if DistinctExperts(128, 8, 1) != 8 || math.Abs(DistinctExperts(128, 8, 1e4)-128) > 1e-9 || DistinctExperts(0, 8, 1) != 0 || DistinctExperts(8, 9, 1) != 0 {
		t.Error("DistinctExperts at its ends")
	}
}

// TestSlidingWindowKV: a windowed layer holds at most the window; past it
// only full-attention layers grow. gpt-oss-20b at 32K: 32,768 × 24,576 +
// 128 × 24,576 = 808,452,096 bytes per sequence; read as full attention
// it would be 32,768 × 49,152 = 1,610,612,736.
func TestSlidingWindowKV(t *testing.T) {
	_, in := configInputs(t, "gpt-oss-20b.json", 360e9)
	if got := in.SeqKVBytes(32768); got != 808_452_096 {
		t.Errorf("gpt-oss-20b KV of a 32K sequence %.0f, want 808,452,096", got)
	}
	if got := in.SeqKVBytes(100); got != 100*49_152 {
		t.Errorf("within the window every layer grows: %.0f, want %d", got, 100*49_152)
	}
	// Gemma-3-12B at 32K: 32,768 × 65,536 + 1,024 × 327,680 =
	// 2,147,483,648 + 335,544,320 = 2,483,027,968.
	_, in = configInputs(t, "gemma-3-12b.json", 360e9)
	if got := in.SeqKVBytes(32768); got != 2_483_027_968 {
		t.Errorf("Gemma-3-12B KV of a 32K sequence %.0f, want 2,483,027,968", got)
	}
}

// TestFromHFConfigOddShapes: layouts other than one KV head count for
// all layers read right, and what tokentap cannot read is refused by its
// name, never filled in.
func TestFromHFConfigOddShapes(t *testing.T) {
	read := func(cfg string) Shape {
		t.Helper()
		s, err := FromHFConfig([]byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		return s
	}
	// Mistral-7B-v0.1: sliding_window 4096 on every layer; 32 × 8 × 128
	// × 2 = 65,536 key + value elements per token, within 4,096.
	s := read(`{"architectures":["MistralForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"sliding_window":4096,"vocab_size":32000,"torch_dtype":"bfloat16"}`)
	if s.KV.FullLayers != 0 || s.KV.WindowLayers != 32 || s.KV.Window != 4096 || s.KV.WindowKeys+s.KV.WindowVal != 65_536 {
		t.Errorf("Mistral v0.1: %+v", s.KV)
	}
	// Gemma 2 (9B): every other layer slides, the first among them; 42
	// layers × 8 heads × 256: 21 full, 21 within 4,096.
	s = read(`{"architectures":["Gemma2ForCausalLM"],"hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"sliding_window":4096,"vocab_size":256000,"torch_dtype":"float32"}`)
	if s.KV.FullLayers != 21 || s.KV.WindowLayers != 21 || s.KV.FullKeys != 21*8*256 || s.KV.Window != 4096 {
		t.Errorf("Gemma 2: %+v", s.KV)
	}
	// DBRX: attn_config.kv_n_heads 8 of 48 heads of 128 (6144 / 48).
	s = read(`{"architectures":["DbrxForCausalLM"],"d_model":6144,"n_heads":48,"n_layers":40,"vocab_size":100352,"attn_config":{"kv_n_heads":8},"ffn_config":{"ffn_hidden_size":10752,"moe_num_experts":16,"moe_top_k":4},"torch_dtype":"bfloat16","tie_word_embeddings":false}`)
	// Weights: per layer Wqkv 6144×8192 + out 6144×6144 + norms 12,288 +
	// router 16×6144 = 88,190,976 dense; experts 16 × 3 × 6144 × 10,752 =
	// 3,170,893,824; × 40 layers; embeddings and head 100,352×6,144 =
	// 616,562,688 each; final norm 6,144: 131,596,523,520 (DBRX's 132B).
	if s.KV.Layers != 40 || s.KV.KVHeads != 8 || s.KV.HeadDim != 128 || s.WeightBytes != 2*131_596_523_520 || s.MoE.Experts != 16 || s.MoE.Used != 4 {
		t.Errorf("DBRX: %+v", s)
	}
	// Qwen3-Next-80B-A3B: three Gated DeltaNet layers to one full;
	// a linear layer's state: conv 3 × (2 × 16 × 128 + 32 × 128) =
	// 24,576 and recurrent 32 × 128 × 128 = 524,288 elements, × 2 bytes
	// = 1,097,728; 36 such layers = 39,518,208 bytes per sequence. Full
	// layers: 12 × 2 heads × 256 = 6,144 key elements per token.
	s = read(`{"architectures":["Qwen3NextForCausalLM"],"hidden_size":2048,"num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_conv_kernel_dim":4,"num_experts":512,"num_experts_per_tok":10,"vocab_size":151936,"torch_dtype":"bfloat16"}`)
	if s.KV.FullLayers != 12 || s.KV.StateLayers != 36 || s.KV.StateBytes != 39_518_208 || s.KV.FullKeys != 6_144 {
		t.Errorf("Qwen3-Next: %+v", s.KV)
	}
	if !strings.Contains(strings.Join(s.Why, " "), "Qwen3NextForCausalLM") {
		t.Errorf("Qwen3-Next weights: %q, want refused by name", s.Why)
	}
	// Falcon-RW-1B: multi_query false (32 KV heads of 64), parallel_attn
	// false (two LayerNorms per layer), biases: per layer qkv 2048×6144 +
	// 6,144, dense 2048×2048 + 2,048, MLP 2 × 2048×8192 + 8,192 + 2,048,
	// norms 4 × 2,048 = 50,358,272 × 24 = 1,208,598,528; embeddings
	// 50,304×2,048 = 103,022,592 (tied), ln_f 4,096: 1,311,625,216.
	s = read(`{"architectures":["FalconForCausalLM"],"alibi":true,"bias":true,"hidden_size":2048,"multi_query":false,"new_decoder_architecture":false,"num_attention_heads":32,"num_hidden_layers":24,"parallel_attn":false,"vocab_size":50304,"torch_dtype":"bfloat16"}`)
	if s.WeightBytes != 2*1_311_625_216 || s.KV.KVHeads != 32 || s.KV.HeadDim != 64 {
		t.Errorf("Falcon-RW-1B: %+v", s)
	}
	refused := []struct{ cfg, says string }{
		// No num_key_value_heads and a class tokentap does not know: no
		// silent num_attention_heads.
		{`{"architectures":["NovelForCausalLM"],"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"torch_dtype":"bfloat16"}`, "no num_key_value_heads"},
		{`{"architectures":["DbrxForCausalLM"],"d_model":6144,"n_heads":48,"n_layers":40,"attn_config":{},"torch_dtype":"bfloat16"}`, "attn_config.kv_n_heads"},
		{`{"architectures":["Gemma3ForCausalLM"],"hidden_size":640,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":256,"sliding_window":512,"layer_types":["sliding_attention","chunked_attention"]}`, `"chunked_attention"`},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_hidden_layers":2,"num_attention_heads":32,"num_key_value_heads":8,"sliding_window":4096}`, "which of its layers slide"},
		{`{"architectures":["GptOssForCausalLM"],"hidden_size":2880,"num_hidden_layers":2,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"sliding_window":128}`, "no layer_types"},
		{`{"architectures":["NemotronHForCausalLM"],"hidden_size":4096,"num_hidden_layers":2,"num_attention_heads":32,"num_key_value_heads":8,"hybrid_override_pattern":"M*"}`, "hybrid_override_pattern"},
		{`{"architectures":["Gemma3nForCausalLM"],"hidden_size":2048,"num_hidden_layers":30,"num_attention_heads":8,"num_key_value_heads":2,"num_kv_shared_layers":10}`, "num_kv_shared_layers"},
		{`{"architectures":["MiniCPM3ForCausalLM"],"hidden_size":2560,"num_hidden_layers":62,"num_attention_heads":40,"kv_lora_rank":256}`, "multi-head latent attention"},
		{`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"hidden_size":4096,"intermediate_size":14336,"vocab_size":128256,"torch_dtype":"float16","quantization_config":{"quant_method":"awq","bits":4}}`, "quantized (awq 4-bit)"},
		{`{"architectures":["MixtralForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"intermediate_size":14336,"vocab_size":32000,"torch_dtype":"bfloat16","num_local_experts":8}`, "num_experts_per_tok"},
		{`{"architectures":["GPTNeoXForCausalLM"],"num_hidden_layers":16,"num_attention_heads":8,"num_key_value_heads":8,"hidden_size":2048,"intermediate_size":8192,"vocab_size":50304,"torch_dtype":"float16"}`, "not GPTNeoXForCausalLM"},
	}
	for _, tt := range refused {
		s := read(tt.cfg)
		if !strings.Contains(strings.Join(s.Why, " "), tt.says) {
			t.Errorf("%s: %+v, want a reason saying %q", tt.cfg, s, tt.says)
		}
	}
	// A class default taken for an absent key is said.
	s = read(`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,"num_hidden_layers":32,"num_attention_heads":32,"vocab_size":32000,"torch_dtype":"float16"}`)
	if s.KV.KVHeads != 32 || !strings.Contains(strings.Join(s.Notes, " "), "num_key_value_heads absent") {
		t.Errorf("Llama 2 7B: %+v", s)
	}
	// Llama-3.1-8B has 8,030,261,248 parameters (Meta's figure).
	s = read(`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"torch_dtype":"bfloat16","tie_word_embeddings":false}`)
	if s.WeightBytes != 2*8_030_261_248 {
		t.Errorf("Llama 3 8B: %d bytes", s.WeightBytes)
	}
	// A multimodal config keeps the language model in text_config.
	mm := `{"architectures":["Mistral3ForConditionalGeneration"],"torch_dtype":"bfloat16","text_config":{"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"hidden_size":5120}}`
	if s := read(mm); s.KV.Layers != 40 || s.KV.KVHeads != 8 || s.KV.HeadDim != 128 || s.DType != "bfloat16" {
		t.Errorf("text_config: %+v", s)
	}
	for _, bad := range []string{`[]`, `{"model_type":"bert"}`, `not json`,
		`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"hidden_size":2000000000000,"intermediate_size":1,"vocab_size":1,"torch_dtype":"float16"}`,
		`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":32,"num_attention_heads":32,"sliding_window":-4}`} {
		if _, err := FromHFConfig([]byte(bad)); err == nil {
			t.Errorf("FromHFConfig(%s) accepted", bad)
		}
	}
}

// FuzzFromHFConfig: any bytes give a shape or an error; a shape never has
// negative figures, weight bytes only with a known dtype, and experts
// never more than the weights.
func FuzzFromHFConfig(f *testing.F) {
	for _, m := range realConfigs {
		b, err := os.ReadFile(filepath.Join("testdata", "config", m.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"num_hidden_layers":2,"num_attention_heads":1,"text_config":{"num_hidden_layers":3}}`))
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"num_hidden_layers":1e9,"num_attention_heads":-4,"hidden_size":3}`))
	f.Add([]byte(`{"architectures":["Qwen3MoeForCausalLM"],"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"hidden_size":8,"intermediate_size":8,"moe_intermediate_size":4,"num_experts":4,"num_experts_per_tok":2,"mlp_only_layers":[0],"vocab_size":10,"torch_dtype":"bfloat16"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FromHFConfig(b)
		if err != nil {
			return
		}
		k := s.KV
		if s.WeightBytes < 0 || s.EmbedBytes < 0 || k.FullKeys < 0 || k.FullValues < 0 || k.WindowKeys < 0 || k.WindowVal < 0 || k.StateBytes < 0 || k.Window < 0 {
			t.Fatalf("shape %+v from %q", s, b)
		}
		if _, ok := DTypeBytes(s.DType); s.WeightBytes > 0 && !ok {
			t.Fatalf("weight bytes %d with dtype %q", s.WeightBytes, s.DType)
		}
		if s.MoE.Bytes+s.EmbedBytes > s.WeightBytes {
			t.Fatalf("experts %d and input table %d over all weights %d", s.MoE.Bytes, s.EmbedBytes, s.WeightBytes)
		}
	})
}
