package bandwidth

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// hfConfig is the part of a Hugging Face config.json the limit reads.
type hfConfig struct {
	Architectures    []string        `json:"architectures"`
	ModelType        string          `json:"model_type"`
	HiddenSize       int             `json:"hidden_size"`
	IntermediateSize int             `json:"intermediate_size"`
	Layers           int             `json:"num_hidden_layers"`
	Heads            int             `json:"num_attention_heads"`
	KVHeads          *int            `json:"num_key_value_heads"`
	HeadDim          int             `json:"head_dim"`
	Vocab            int             `json:"vocab_size"`
	TieEmbeddings    *bool           `json:"tie_word_embeddings"`
	TorchDType       string          `json:"torch_dtype"`
	DType            string          `json:"dtype"` // newer transformers
	Quantization     json.RawMessage `json:"quantization_config"`
	AttentionBias    *bool           `json:"attention_bias"`
	TextConfig       json.RawMessage `json:"text_config"`

	// Mixture of experts.
	LocalExperts      int   `json:"num_local_experts"` // Mixtral, gpt-oss
	Experts           int   `json:"num_experts"`       // Qwen2/3-MoE
	RoutedExperts     int   `json:"n_routed_experts"`  // DeepSeek
	ExpertsPerTok     int   `json:"num_experts_per_tok"`
	ExpertsPerToken   int   `json:"experts_per_token"` // gpt-oss
	MoEIntermediate   int   `json:"moe_intermediate_size"`
	SharedIntermed    int   `json:"shared_expert_intermediate_size"` // Qwen2-MoE
	SharedExperts     int   `json:"n_shared_experts"`                // DeepSeek
	FirstKDense       int   `json:"first_k_dense_replace"`           // DeepSeek
	MoELayerFreq      int   `json:"moe_layer_freq"`                  // DeepSeek
	DecoderSparseStep int   `json:"decoder_sparse_step"`             // Qwen-MoE
	MLPOnlyLayers     []int `json:"mlp_only_layers"`                 // Qwen-MoE

	// Multi-head latent attention (DeepSeek-V2/V3).
	KVLoraRank int  `json:"kv_lora_rank"`
	QLoraRank  *int `json:"q_lora_rank"`
	QKNope     int  `json:"qk_nope_head_dim"`
	QKRope     int  `json:"qk_rope_head_dim"`
	VHeadDim   int  `json:"v_head_dim"`

	// Sliding-window and hybrid attention.
	SlidingWindow     *int     `json:"sliding_window"`
	UseSlidingWindow  *bool    `json:"use_sliding_window"`
	MaxWindowLayers   int      `json:"max_window_layers"`
	LayerTypes        []string `json:"layer_types"`
	WindowPattern     int      `json:"sliding_window_pattern"`
	WindowPattern2    int      `json:"_sliding_window_pattern"`
	FullAttnInterval  int      `json:"full_attention_interval"`
	LinearKeyHeads    int      `json:"linear_num_key_heads"`
	LinearValueHeads  int      `json:"linear_num_value_heads"`
	LinearKeyDim      int      `json:"linear_key_head_dim"`
	LinearValueDim    int      `json:"linear_value_head_dim"`
	LinearConvKernel  int      `json:"linear_conv_kernel_dim"`
	NumKVSharedLayers int      `json:"num_kv_shared_layers"`

	// Falcon.
	MultiQuery    *bool `json:"multi_query"`
	NewDecoder    bool  `json:"new_decoder_architecture"`
	FalconKVHeads int   `json:"num_kv_heads"`
	ParallelAttn  *bool `json:"parallel_attn"`
	Bias          bool  `json:"bias"`
	FFNHidden     int   `json:"ffn_hidden_size"`

	// DBRX.
	DModel     int `json:"d_model"`
	NHeads     int `json:"n_heads"`
	NLayers    int `json:"n_layers"`
	AttnConfig *struct {
		KVNHeads *int `json:"kv_n_heads"`
	} `json:"attn_config"`
	FFNConfig *struct {
		FFNHidden int `json:"ffn_hidden_size"`
		Experts   int `json:"moe_num_experts"`
		TopK      int `json:"moe_top_k"`
	} `json:"ffn_config"`

	// keys is every key of the (text) config, for the ones that name an
	// attention tokentap does not know.
	keys map[string]json.RawMessage
}

// family is how tokentap counts an architecture: its config class's
// defaults and its layers' weights (Hugging Face transformers'
// modeling_*.py for each).
type family int

const (
	famUnknown family = iota
	famLlama          // Llama, Mistral, Qwen2/3 and other gated-MLP GQA decoders
	famGemma
	famGemma2
	famGemma3
	famMixtral
	famQwenMoE
	famGptOss
	famDeepseek
	famFalcon
	famDBRX
	famQwen3Next
)

var families = map[string]family{
	"LlamaForCausalLM": famLlama, "MistralForCausalLM": famLlama, "Qwen2ForCausalLM": famLlama, "Qwen3ForCausalLM": famLlama,
	"GraniteForCausalLM": famLlama, "InternLM2ForCausalLM": famLlama, "Phi3ForCausalLM": famLlama, "YiForCausalLM": famLlama,
	"GemmaForCausalLM": famGemma, "Gemma2ForCausalLM": famGemma2, "Gemma3ForCausalLM": famGemma3, "Gemma3ForConditionalGeneration": famGemma3,
	"MixtralForCausalLM": famMixtral, "Qwen2MoeForCausalLM": famQwenMoE, "Qwen3MoeForCausalLM": famQwenMoE,
	"GptOssForCausalLM": famGptOss, "DeepseekV2ForCausalLM": famDeepseek, "DeepseekV3ForCausalLM": famDeepseek,
	"FalconForCausalLM": famFalcon, "RWForCausalLM": famFalcon, "DbrxForCausalLM": famDBRX, "Qwen3NextForCausalLM": famQwen3Next,
}

// hybridKeys are config keys that declare layers tokentap does not know
// the cache of (state-space or other hybrid layers): a config with one is
// refused by name unless its family is one whose layers are known.
var hybridKeys = []string{"attn_type_list", "hybrid_override_pattern", "layers_block_type", "ssm_cfg", "mamba_d_state",
	"mamba_expand", "attn_layer_indices", "layer_block_types", "block_types", "full_attn_idxs", "no_rope_layers", "attention_chunk_size"}

// FromHFConfig reads a Hugging Face config.json: the KV cache's layout
// (full-attention, sliding-window and linear-attention layers; grouped,
// multi-query and multi-head latent attention), the weights' bytes counted
// from the shapes for the architectures whose layers it knows (families),
// the input embedding table a step does not read, and a mixture of
// experts' routed experts. What it cannot read is refused by name in Why,
// never guessed; a config class's default taken for an absent key is said
// in Notes. A multimodal config's text_config is read where the top level
// lacks the language model (its vision tower is not read per token).
func FromHFConfig(data []byte) (Shape, error) {
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return Shape{}, fmt.Errorf("not a Hugging Face config.json: %w", err)
	}
	_ = json.Unmarshal(data, &c.keys)
	multimodal := false
	if c.Layers == 0 && c.NLayers == 0 && len(c.TextConfig) > 0 {
		var t hfConfig
		if err := json.Unmarshal(c.TextConfig, &t); err == nil && t.Layers > 0 {
			_ = json.Unmarshal(c.TextConfig, &t.keys)
			if t.TorchDType == "" && t.DType == "" {
				t.TorchDType, t.DType = c.TorchDType, c.DType
			}
			if len(t.Quantization) == 0 {
				t.Quantization = c.Quantization
			}
			if t.TieEmbeddings == nil {
				t.TieEmbeddings = c.TieEmbeddings
			}
			t.Architectures = c.Architectures
			c, multimodal = t, true
		}
	}
	fam := famUnknown
	for _, a := range c.Architectures {
		if f, ok := families[a]; ok {
			fam = f
			break
		}
	}
	if fam == famDBRX || (c.Layers == 0 && c.NLayers > 0) {
		c.HiddenSize, c.Layers, c.Heads = c.DModel, c.NLayers, c.NHeads
	}
	if c.Layers <= 0 || c.Heads <= 0 {
		return Shape{}, fmt.Errorf("config.json has no num_hidden_layers and num_attention_heads: not a transformer language model's config")
	}
	kvh := 0
	if c.KVHeads != nil {
		kvh = *c.KVHeads
	}
	for _, v := range []struct {
		name string
		n    int
		most int
	}{{"num_hidden_layers", c.Layers, 1 << 12}, {"num_attention_heads", c.Heads, 1 << 12}, {"num_key_value_heads", kvh, 1 << 12},
		{"head_dim", c.HeadDim, 1 << 14}, {"hidden_size", c.HiddenSize, 1 << 20}, {"intermediate_size", c.IntermediateSize, 1 << 22},
		{"vocab_size", c.Vocab, 1 << 24}, {"num_experts", max(c.LocalExperts, c.Experts, c.RoutedExperts), 1 << 14},
		{"num_experts_per_tok", max(c.ExpertsPerTok, c.ExpertsPerToken), 1 << 14}, {"moe_intermediate_size", c.MoEIntermediate, 1 << 22},
		{"kv_lora_rank", c.KVLoraRank, 1 << 16}, {"qk_rope_head_dim", c.QKRope, 1 << 14}, {"qk_nope_head_dim", c.QKNope, 1 << 14},
		{"v_head_dim", c.VHeadDim, 1 << 14}, {"first_k_dense_replace", c.FirstKDense, 1 << 12}, {"n_shared_experts", c.SharedExperts, 1 << 10},
		{"shared_expert_intermediate_size", c.SharedIntermed, 1 << 22}, {"ffn_hidden_size", c.FFNHidden, 1 << 22},
		{"linear_num_key_heads", c.LinearKeyHeads, 1 << 12}, {"linear_num_value_heads", c.LinearValueHeads, 1 << 12},
		{"linear_key_head_dim", c.LinearKeyDim, 1 << 14}, {"linear_value_head_dim", c.LinearValueDim, 1 << 14},
		{"linear_conv_kernel_dim", c.LinearConvKernel, 1 << 10}, {"max_window_layers", c.MaxWindowLayers, 1 << 12},
		{"sliding_window_pattern", max(c.WindowPattern, c.WindowPattern2), 1 << 12}, {"full_attention_interval", c.FullAttnInterval, 1 << 12},
		{"decoder_sparse_step", c.DecoderSparseStep, 1 << 12}, {"moe_layer_freq", c.MoELayerFreq, 1 << 12}} {
		if v.n < 0 || v.n > v.most {
			return Shape{}, fmt.Errorf("config.json %s %d is not a model's", v.name, v.n)
		}
	}
	if c.SlidingWindow != nil && (*c.SlidingWindow < 0 || *c.SlidingWindow > 1<<30) {
		return Shape{}, fmt.Errorf("config.json sliding_window %d is not a model's", *c.SlidingWindow)
	}
	if c.FFNConfig != nil && (c.FFNConfig.Experts < 0 || c.FFNConfig.Experts > 1<<14 || c.FFNConfig.TopK < 0 || c.FFNConfig.FFNHidden < 0 || c.FFNConfig.FFNHidden > 1<<22) {
		return Shape{}, fmt.Errorf("config.json ffn_config is not a model's")
	}
	s := Shape{DType: c.TorchDType}
	if s.DType == "" {
		s.DType = c.DType
	}
	name := strings.Join(c.Architectures, ", ")
	if name == "" {
		name = "model_type " + c.ModelType
	}
	r := reader{c: c, fam: fam, name: name, s: &s}
	r.kv()
	r.weights(multimodal)
	return s, nil
}

// reader reads one config into a Shape.
type reader struct {
	c    hfConfig
	fam  family
	name string
	s    *Shape
}

func (r *reader) note(format string, a ...any) {
	r.s.Notes = append(r.s.Notes, fmt.Sprintf(format, a...))
}

// kvWhy refuses the KV layout, saying why.
func (r *reader) kvWhy(format string, a ...any) {
	r.s.Why = append(r.s.Why, fmt.Sprintf(format, a...)+" (give --layers, --kv-heads and --head-dim for the KV cache)")
}

// kvHeads is the KV heads per layer, by the config or its class's
// default, or 0 (refused) where neither says.
func (r *reader) kvHeads() int {
	c := r.c
	switch {
	case c.KVHeads != nil && *c.KVHeads > 0:
		return *c.KVHeads
	case r.fam == famFalcon && c.NewDecoder:
		if c.FalconKVHeads > 0 {
			return c.FalconKVHeads
		}
		r.kvWhy("the Falcon config has new_decoder_architecture but no num_kv_heads")
		return 0
	case r.fam == famFalcon:
		// FalconConfig: multi_query defaults to true, one KV head for all.
		if c.MultiQuery == nil {
			r.note("multi_query absent: FalconConfig's default, true (one KV head).")
		}
		if c.MultiQuery == nil || *c.MultiQuery {
			return 1
		}
		return c.Heads
	case r.fam == famDBRX:
		if c.AttnConfig != nil && c.AttnConfig.KVNHeads != nil && *c.AttnConfig.KVNHeads > 0 {
			return *c.AttnConfig.KVNHeads
		}
		r.kvWhy("the DBRX config has no attn_config.kv_n_heads")
		return 0
	case r.fam != famUnknown && r.fam != famGptOss && r.fam != famQwen3Next:
		// The config classes of these say: "If it is not specified, will
		// default to num_attention_heads".
		r.note("num_key_value_heads absent: %s's config class takes num_attention_heads (%d).", r.name, c.Heads)
		return c.Heads
	}
	r.kvWhy("the config of %s has no num_key_value_heads, and tokentap does not know its class's default", r.name)
	return 0
}

// headDim is a head's dimension: head_dim, else the class default, else
// hidden_size / num_attention_heads.
func (r *reader) headDim() int {
	c := r.c
	switch {
	case c.HeadDim > 0:
		return c.HeadDim
	case r.fam == famGemma || r.fam == famGemma2 || r.fam == famGemma3:
		r.note("head_dim absent: %s's config class default, 256.", r.name)
		return 256
	case c.HiddenSize > 0 && c.HiddenSize%c.Heads == 0:
		return c.HiddenSize / c.Heads
	}
	r.kvWhy("the config of %s has no head_dim, and hidden_size %d is not a multiple of num_attention_heads %d", r.name, c.HiddenSize, c.Heads)
	return 0
}

// kinds is each layer's attention, or nil (refused, with Why).
func (r *reader) kinds() ([]layerKind, int) {
	c, n := r.c, r.c.Layers
	window := 0
	if c.SlidingWindow != nil {
		window = *c.SlidingWindow
	}
	kinds := make([]layerKind, n)
	if c.NumKVSharedLayers > 0 {
		r.kvWhy("the config shares KV cache between layers (num_kv_shared_layers)")
		return nil, 0
	}
	if r.fam != famQwen3Next && r.fam != famGemma3 && r.fam != famGptOss {
		for _, k := range hybridKeys {
			if _, ok := c.keys[k]; ok {
				r.kvWhy("the config of %s declares layers tokentap does not know the cache of (%s)", r.name, k)
				return nil, 0
			}
		}
	}
	if len(c.LayerTypes) > 0 {
		if len(c.LayerTypes) != n {
			r.kvWhy("the config's layer_types has %d entries for %d layers", len(c.LayerTypes), n)
			return nil, 0
		}
		for i, t := range c.LayerTypes {
			switch {
			case t == "full_attention" || t == "attention":
				kinds[i] = fullLayer
			case t == "sliding_attention" && window > 0:
				kinds[i] = windowLayer
			case t == "linear_attention" && r.fam == famQwen3Next:
				kinds[i] = stateLayer
			default:
				r.kvWhy("layer %d of %s is %q, a kind tokentap does not know the cache of (or without a sliding_window)", i, r.name, t)
				return nil, 0
			}
		}
		return kinds, window
	}
	switch r.fam {
	case famQwen3Next:
		if c.FullAttnInterval <= 0 {
			r.kvWhy("the Qwen3-Next config has neither layer_types nor full_attention_interval")
			return nil, 0
		}
		for i := range kinds {
			if (i+1)%c.FullAttnInterval != 0 {
				kinds[i] = stateLayer
			}
		}
		return kinds, window
	case famGptOss:
		r.kvWhy("the gpt-oss config has no layer_types (which layers slide)")
		return nil, 0
	}
	if window == 0 {
		return kinds, 0
	}
	switch r.fam {
	case famGemma2: // Gemma2: every other layer, the first sliding
		for i := range kinds {
			if i%2 == 0 {
				kinds[i] = windowLayer
			}
		}
	case famGemma3: // Gemma3: sliding but every sliding_window_pattern-th
		p := max(c.WindowPattern, c.WindowPattern2)
		if p == 0 {
			p = 6
			r.note("sliding_window_pattern absent: Gemma3TextConfig's default, 6 (five sliding-window layers, then one full).")
		}
		for i := range kinds {
			if (i+1)%p != 0 {
				kinds[i] = windowLayer
			}
		}
	case famLlama, famMixtral, famQwenMoE:
		if c.UseSlidingWindow != nil && !*c.UseSlidingWindow {
			return kinds, 0 // Qwen: the window is off
		}
		if c.UseSlidingWindow != nil { // Qwen: layers from max_window_layers on slide
			for i := c.MaxWindowLayers; i < n; i++ {
				kinds[i] = windowLayer
			}
			break
		}
		if slices.Contains(c.Architectures, "MistralForCausalLM") || r.fam == famMixtral {
			for i := range kinds { // Mistral v0.1: every layer slides
				kinds[i] = windowLayer
			}
			break
		}
		fallthrough
	default:
		r.kvWhy("the config of %s has a sliding_window of %d, but tokentap does not know which of its layers slide", r.name, window)
		return nil, 0
	}
	return kinds, window
}

// kv reads the KV layout.
func (r *reader) kv() {
	c := r.c
	if c.KVLoraRank > 0 && r.fam != famDeepseek {
		r.kvWhy("the config of %s uses multi-head latent attention (kv_lora_rank), which tokentap reads for DeepSeek-V2/V3 only", r.name)
		return
	}
	kinds, window := r.kinds()
	if kinds == nil {
		return
	}
	var key, val int64
	var heads, hd int
	switch {
	case r.fam == famDeepseek:
		// MLA caches one latent of kv_lora_rank and the shared rotary key
		// of qk_rope_head_dim per token and layer (DeepSeek-V2, §2.1.2).
		if c.KVLoraRank <= 0 || c.QKRope <= 0 {
			r.kvWhy("the DeepSeek config lacks kv_lora_rank or qk_rope_head_dim")
			return
		}
		key = int64(c.KVLoraRank + c.QKRope)
	default:
		heads, hd = r.kvHeads(), r.headDim()
		if heads == 0 || hd == 0 {
			return
		}
		key, val = int64(heads)*int64(hd), int64(heads)*int64(hd)
	}
	keys, vals := make([]int64, len(kinds)), make([]int64, len(kinds))
	for i := range kinds {
		keys[i], vals[i] = key, val
	}
	var state int64
	if slices.Contains(kinds, stateLayer) {
		// Gated DeltaNet: a convolution state of (kernel − 1) × (2 × key
		// heads × key dim + value heads × value dim) and a recurrent state
		// of value heads × key dim × value dim, at the model's dtype (vLLM
		// MambaStateShapeCalculator.gated_delta_net_state_shape).
		b, ok := DTypeBytes(r.s.DType)
		if c.LinearKeyHeads <= 0 || c.LinearValueHeads <= 0 || c.LinearKeyDim <= 0 || c.LinearValueDim <= 0 || c.LinearConvKernel <= 0 || !ok {
			r.kvWhy("the linear-attention layers of %s need linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim and a known dtype", r.name)
			return
		}
		conv := int64(c.LinearConvKernel-1) * int64(2*c.LinearKeyHeads*c.LinearKeyDim+c.LinearValueHeads*c.LinearValueDim)
		rec := int64(c.LinearValueHeads) * int64(c.LinearKeyDim) * int64(c.LinearValueDim)
		state = int64(math.Round(float64(conv+rec) * b))
		r.note("Linear-attention layers' state is counted at the model's dtype (%s), vLLM's default.", r.s.DType)
	}
	if r.fam != famDeepseek && !slices.ContainsFunc(kinds, func(k layerKind) bool { return k != fullLayer }) {
		r.s.KV = UniformKV(len(kinds), heads, hd, hd)
		return
	}
	r.s.KV = layeredKV(kinds, keys, vals, window, state)
	if r.fam == famDeepseek {
		r.s.KV.Layout = fmt.Sprintf("%d layers × one latent of %d + %d rotary key elements (multi-head latent attention)", len(kinds), c.KVLoraRank, c.QKRope)
	}
}

// weights counts the weights for the families whose layers it knows.
func (r *reader) weights(multimodal bool) {
	c, s := r.c, r.s
	why := func(format string, a ...any) {
		s.Why = append(s.Why, fmt.Sprintf(format, a...)+" (give --weight-bytes, what a decode step reads)")
	}
	dsize, dok := DTypeBytes(s.DType)
	mxfp4 := false
	if len(c.Quantization) > 0 && string(c.Quantization) != "null" {
		var q struct {
			Method string   `json:"quant_method"`
			Bits   int      `json:"bits"`
			Keep   []string `json:"modules_to_not_convert"`
		}
		_ = json.Unmarshal(c.Quantization, &q)
		// gpt-oss ships its experts in MXFP4 and the rest at its dtype.
		if r.fam == famGptOss && q.Method == "mxfp4" {
			mxfp4 = true
		} else {
			what := q.Method
			if q.Bits > 0 {
				what = fmt.Sprintf("%s %d-bit", q.Method, q.Bits)
			}
			why("the config is quantized (%s): its weights' bytes are not the parameter count times a dtype", strings.TrimSpace(what))
			return
		}
	}
	switch {
	case !dok:
		why("the config's torch_dtype %q is not a dtype tokentap knows the size of", s.DType)
		return
	case r.fam == famUnknown || r.fam == famQwen3Next:
		why("tokentap counts weights from the config only for known architectures, not %s", r.name)
		return
	}
	p, ok := r.params()
	if !ok {
		return
	}
	bytes := func(n int64) int64 { return int64(math.Round(float64(n) * dsize)) }
	expertBytes := bytes(p.experts)
	if mxfp4 {
		// An MXFP4 block is 32 4-bit values and one 8-bit scale: 17 bytes
		// per 32 weights (OCP Microscaling Formats v1.0); biases stay.
		expertBytes = int64(math.Round(float64(p.experts-p.expertBias)*17/32)) + bytes(p.expertBias)
		r.note("The routed experts' weights are MXFP4 (17 bytes per 32), the rest %s, as the config's quantization_config says.", s.DType)
	}
	s.WeightBytes = bytes(p.dense+p.embed) + expertBytes
	if !p.tied {
		s.EmbedBytes = bytes(p.embed)
	}
	if p.moeLayers > 0 {
		s.MoE = MoE{Experts: p.e, Used: p.k, Layers: p.moeLayers, Bytes: expertBytes}
	}
	if multimodal {
		r.note("Only the language model's weights are counted: a decode step does not read the vision tower.")
	}
}

// counts are a model's parameters: the dense part (read every step; the
// output head among it), the input embeddings (the output head too when
// tied), and the routed experts (their biases apart).
type counts struct {
	dense, embed, experts, expertBias int64
	tied                              bool
	e, k, moeLayers                   int
}

// params counts the weights of a known family; ok false (with Why) when a
// figure it needs is missing.
func (r *reader) params() (p counts, ok bool) {
	c, s := r.c, r.s
	why := func(keys string) bool {
		s.Why = append(s.Why, fmt.Sprintf("the config of %s lacks %s to count the weights from (give --weight-bytes)", r.name, keys))
		return false
	}
	if c.HiddenSize <= 0 || c.Vocab <= 0 {
		return p, why("hidden_size or vocab_size")
	}
	h, v, L := int64(c.HiddenSize), int64(c.Vocab), int64(c.Layers)
	// Tied output head: the key, else the class default (Gemma and
	// Falcon tie, the others do not).
	p.tied = r.fam == famGemma || r.fam == famGemma2 || r.fam == famGemma3 || r.fam == famFalcon
	if c.TieEmbeddings != nil {
		p.tied = *c.TieEmbeddings
	}
	p.embed = v * h
	if !p.tied {
		p.dense += v * h
	}

	// Attention per layer.
	heads := int64(c.Heads)
	var attn int64
	switch r.fam {
	case famDeepseek:
		if c.QKNope <= 0 || c.QKRope <= 0 || c.VHeadDim <= 0 || c.KVLoraRank <= 0 {
			return p, why("qk_nope_head_dim, qk_rope_head_dim, v_head_dim or kv_lora_rank")
		}
		qk, kvr, rope, vd := int64(c.QKNope+c.QKRope), int64(c.KVLoraRank), int64(c.QKRope), int64(c.VHeadDim)
		if c.QLoraRank != nil && *c.QLoraRank > 0 {
			qr := int64(*c.QLoraRank)
			attn += h*qr + qr + qr*heads*qk // q_a_proj, q_a_layernorm, q_b_proj
		} else {
			attn += h * heads * qk // q_proj
		}
		attn += h*(kvr+rope) + kvr + kvr*heads*(int64(c.QKNope)+vd) + heads*vd*h // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj
	default:
		kv, hd := int64(r.kvHeadsQuiet()), int64(r.headDimQuiet())
		if kv == 0 || hd == 0 {
			return p, why("its KV heads or head dim")
		}
		q, k := heads*hd, kv*hd
		attn = h*q + 2*h*k + q*h
		bias := c.AttentionBias != nil && *c.AttentionBias
		switch {
		case r.fam == famFalcon && c.Bias:
			attn += q + 2*k + h
		case r.fam == famGptOss && bias:
			attn += q + 2*k + h
		case slices.Contains(c.Architectures, "Qwen2ForCausalLM") || slices.Contains(c.Architectures, "Qwen2MoeForCausalLM"):
			attn += q + 2*k // q, k, v biases
		case bias:
			attn += q + 2*k
		}
		if r.fam == famGemma3 || r.fam == famQwenMoE && slices.Contains(c.Architectures, "Qwen3MoeForCausalLM") || slices.Contains(c.Architectures, "Qwen3ForCausalLM") {
			attn += 2 * hd // q_norm, k_norm
		}
		if r.fam == famGptOss {
			attn += heads // attention sinks
		}
	}

	// Norms per layer and the final norm.
	norms, final := 2*h, h
	switch r.fam {
	case famGemma2, famGemma3:
		norms = 4 * h
	case famFalcon: // LayerNorm: weight and bias
		norms, final = 2*h, 2*h
		// Two per layer (ln_attn and ln_mlp, or input and post-attention)
		// unless one feeds attention and MLP in parallel (parallel_attn,
		// FalconConfig's default).
		if c.NewDecoder || (c.ParallelAttn != nil && !*c.ParallelAttn) {
			norms = 4 * h
		}
	}
	p.dense += L*(attn+norms) + final

	// MLPs: the dense layers' and the experts'.
	gated := func(f int64) int64 { return 3 * h * f }
	switch r.fam {
	case famLlama, famGemma, famGemma2, famGemma3:
		if c.IntermediateSize <= 0 {
			return p, why("intermediate_size")
		}
		p.dense += L * gated(int64(c.IntermediateSize))
		return p, true
	case famFalcon:
		f := int64(c.FFNHidden)
		if f == 0 {
			f = 4 * h // FalconConfig: ffn_hidden_size defaults to 4 × hidden_size
		}
		mlp := 2 * h * f
		if c.Bias {
			mlp += f + h
		}
		p.dense += L * mlp
		return p, true
	}

	// Mixtures of experts.
	e := max(c.LocalExperts, c.Experts, c.RoutedExperts)
	k := max(c.ExpertsPerTok, c.ExpertsPerToken)
	fe := int64(c.MoEIntermediate)
	if r.fam == famMixtral || r.fam == famGptOss {
		fe = int64(c.IntermediateSize)
	}
	if r.fam == famDBRX {
		if c.FFNConfig == nil {
			return p, why("ffn_config")
		}
		e, k, fe = c.FFNConfig.Experts, c.FFNConfig.TopK, int64(c.FFNConfig.FFNHidden)
	}
	switch {
	case e <= 0:
		return p, why("its number of experts (num_local_experts, num_experts or n_routed_experts)")
	case k <= 0 || k > e:
		return p, why("num_experts_per_tok (the experts a token is routed to)")
	case fe <= 0:
		return p, why("moe_intermediate_size")
	}
	p.e, p.k = e, k
	expert := gated(fe)
	var ebias int64
	if r.fam == famGptOss {
		ebias = 2*fe + h // gate_up_proj and down_proj biases
	}
	router := int64(e) * h
	if r.fam == famGptOss {
		router += int64(e) // router bias
	}
	var shared int64
	switch r.fam {
	case famQwenMoE:
		if c.SharedIntermed > 0 {
			shared = gated(int64(c.SharedIntermed)) + h // shared expert and its gate
		}
	case famDeepseek:
		shared = gated(int64(c.SharedExperts) * fe)
		if strings.Contains(string(c.keys["topk_method"]), "noaux_tc") {
			router += int64(e) // e_score_correction_bias
		}
	}
	dense := int64(c.IntermediateSize)
	for i := range c.Layers {
		moe := true
		switch r.fam {
		case famQwenMoE:
			step := max(c.DecoderSparseStep, 1)
			moe = !slices.Contains(c.MLPOnlyLayers, i) && (i+1)%step == 0
		case famDeepseek:
			freq := max(c.MoELayerFreq, 1)
			moe = i >= c.FirstKDense && i%freq == 0
		}
		if !moe {
			if dense <= 0 {
				return p, why("intermediate_size (its dense layers' MLP)")
			}
			p.dense += gated(dense)
			continue
		}
		p.moeLayers++
		p.dense += router + shared
		p.experts += int64(e) * (expert + ebias)
		p.expertBias += int64(e) * ebias
	}
	return p, true
}

// kvHeadsQuiet and headDimQuiet are kvHeads and headDim without adding
// notes or reasons a second time.
func (r *reader) kvHeadsQuiet() int {
	s := *r.s
	r2 := reader{c: r.c, fam: r.fam, name: r.name, s: &s}
	return r2.kvHeads()
}

func (r *reader) headDimQuiet() int {
	s := *r.s
	r2 := reader{c: r.c, fam: r.fam, name: r.name, s: &s}
	return r2.headDim()
}
