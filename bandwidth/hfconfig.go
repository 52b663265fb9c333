package bandwidth

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Shape is what the limit needs to know of a model, as far as one source
// tells it (0 or "": not told).
type Shape struct {
	// WeightBytes are the bytes of all the model's weights.
	WeightBytes int64
	// Layers, KVHeads and HeadDim give the KV cache's size per token.
	Layers, KVHeads, HeadDim int
	// KeyDim and ValueDim, where they differ from HeadDim (GGUF
	// attention.key_length / value_length), replace it.
	KeyDim, ValueDim int
	// DType is the model's weight dtype (config.json torch_dtype), which
	// a KV cache dtype of "auto" means.
	DType string
	// Why says, for a figure a source could not give although it tried,
	// what stood in the way (a quantized config has no exact weight
	// bytes, a mixture of experts reads only some of them per step).
	Why []string
}

// kvDims are the key and value vector sizes of one KV head.
func (s Shape) kvDims() (k, v int) {
	k, v = s.KeyDim, s.ValueDim
	if k == 0 {
		k = s.HeadDim
	}
	if v == 0 {
		v = s.HeadDim
	}
	return k, v
}

// HasKV reports whether the KV layout is known.
func (s Shape) HasKV() bool {
	k, v := s.kvDims()
	return s.Layers > 0 && s.KVHeads > 0 && k > 0 && v > 0
}

// KVBytesPerToken is the KV cache's bytes per token of context at the
// given key and value bytes per element; 0 when the layout is unknown.
func (s Shape) KVBytesPerToken(keyBytes, valueBytes float64) float64 {
	if !s.HasKV() {
		return 0
	}
	k, v := s.kvDims()
	return float64(s.Layers) * float64(s.KVHeads) * (float64(k)*keyBytes + float64(v)*valueBytes)
}

// hfConfig is the part of a Hugging Face config.json the limit reads.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	Layers            int             `json:"num_hidden_layers"`
	Heads             int             `json:"num_attention_heads"`
	KVHeads           *int            `json:"num_key_value_heads"`
	HeadDim           int             `json:"head_dim"`
	Vocab             int             `json:"vocab_size"`
	TieEmbeddings     *bool           `json:"tie_word_embeddings"`
	TorchDType        string          `json:"torch_dtype"`
	DType             string          `json:"dtype"` // newer transformers
	Quantization      json.RawMessage `json:"quantization_config"`
	KVLoraRank        int             `json:"kv_lora_rank"` // MLA (DeepSeek): no per-head KV
	Experts           int             `json:"num_local_experts"`
	Experts2          int             `json:"num_experts"`
	RoutedExperts     int             `json:"n_routed_experts"`
	AttentionBias     bool            `json:"attention_bias"`
	TextConfig        json.RawMessage `json:"text_config"`
	NumKVSharedLayers int             `json:"num_kv_shared_layers"`
}

// gatedDense are the architectures whose weights FromHFConfig can count
// from the config: decoder-only transformers with grouped-query attention
// and a gated MLP (gate, up, down), as Llama's.
var gatedDense = []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
	"GraniteForCausalLM", "InternLM2ForCausalLM", "Olmo2ForCausalLM", "Phi3ForCausalLM", "YiForCausalLM"}

// FromHFConfig reads a Hugging Face config.json: layers, KV heads
// (num_key_value_heads, else num_attention_heads), head dim (head_dim, else
// hidden_size / num_attention_heads) and the weight dtype (torch_dtype).
// Weight bytes are counted from the config for the dense gated-MLP
// architectures of gatedDense (embeddings, attention, MLP and norms, at
// the dtype's size), not for a quantized config, a mixture of experts or
// an architecture it does not know: Why says so. A multimodal config's
// text_config is read where the top level lacks the language model.
func FromHFConfig(data []byte) (Shape, error) {
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return Shape{}, fmt.Errorf("not a Hugging Face config.json: %w", err)
	}
	if c.Layers == 0 && len(c.TextConfig) > 0 {
		var t hfConfig
		if err := json.Unmarshal(c.TextConfig, &t); err == nil && t.Layers > 0 {
			if t.TorchDType == "" && t.DType == "" {
				t.TorchDType, t.DType = c.TorchDType, c.DType
			}
			if len(t.Quantization) == 0 {
				t.Quantization = c.Quantization
			}
			t.Architectures = c.Architectures
			c = t
		}
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
		{"vocab_size", c.Vocab, 1 << 24}} {
		if v.n < 0 || v.n > v.most {
			return Shape{}, fmt.Errorf("config.json %s %d is not a model's", v.name, v.n)
		}
	}
	s := Shape{Layers: c.Layers, DType: c.TorchDType}
	if s.DType == "" {
		s.DType = c.DType
	}
	kv := c.Heads
	if c.KVHeads != nil && *c.KVHeads > 0 {
		kv = *c.KVHeads
	}
	hd := c.HeadDim
	if hd == 0 && c.HiddenSize > 0 {
		hd = c.HiddenSize / c.Heads
	}
	switch {
	case c.KVLoraRank > 0:
		s.Why = append(s.Why, "the config uses multi-head latent attention (kv_lora_rank): its KV cache is not layers × KV heads × head dim (give --kv-heads and --head-dim for the latent's size)")
	case c.NumKVSharedLayers > 0:
		s.Why = append(s.Why, "the config shares KV cache between layers (num_kv_shared_layers): give --layers for the layers that keep their own")
	default:
		s.KVHeads, s.HeadDim = kv, hd
	}
	experts := max(c.Experts, c.Experts2, c.RoutedExperts)
	dsize, dok := DTypeBytes(s.DType)
	switch {
	case len(c.Quantization) > 0 && string(c.Quantization) != "null":
		var q struct {
			Method string `json:"quant_method"`
			Bits   int    `json:"bits"`
		}
		_ = json.Unmarshal(c.Quantization, &q)
		what := q.Method
		if q.Bits > 0 {
			what = fmt.Sprintf("%s %d-bit", q.Method, q.Bits)
		}
		s.Why = append(s.Why, fmt.Sprintf("the config is quantized (%s): its weights' bytes are not the parameter count times a dtype (give --weight-bytes, the size of its weight files)", strings.TrimSpace(what)))
	case experts > 1:
		s.Why = append(s.Why, fmt.Sprintf("the config is a mixture of %d experts: a decode step reads only the experts its tokens are routed to (give --weight-bytes for what a step reads)", experts))
	case !dok:
		s.Why = append(s.Why, fmt.Sprintf("the config's torch_dtype %q is not a dtype tokentap knows the size of (give --weight-bytes)", s.DType))
	case !slices.ContainsFunc(c.Architectures, func(a string) bool { return slices.Contains(gatedDense, a) }):
		s.Why = append(s.Why, fmt.Sprintf("tokentap counts weights from the config only for %s, not %s (give --weight-bytes)",
			strings.Join(gatedDense, ", "), strings.Join(c.Architectures, ", ")))
	case c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.Vocab <= 0:
		s.Why = append(s.Why, "the config lacks hidden_size, intermediate_size or vocab_size to count the weights from (give --weight-bytes)")
	default:
		params := denseParams(c, kv, hd)
		s.WeightBytes = int64(math.Round(float64(params) * dsize))
	}
	return s, nil
}

// denseParams counts a gated-MLP decoder's weights: the token embeddings,
// per layer the q, k, v and o projections (with q/k/v biases where the
// architecture has them), gate, up and down, two norms (and Qwen3's q and k
// norms), the final norm, and the output head unless tied to the
// embeddings (absent, tie_word_embeddings is false: the default of every
// gatedDense architecture's config class).
func denseParams(c hfConfig, kv, hd int) int64 {
	h, f, v := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.Vocab)
	q, k := int64(c.Heads)*int64(hd), int64(kv)*int64(hd)
	layer := h*q + 2*h*k + q*h + 3*h*f + 2*h
	if slices.Contains(c.Architectures, "Qwen2ForCausalLM") || c.AttentionBias {
		layer += q + 2*k
	}
	if slices.Contains(c.Architectures, "Qwen3ForCausalLM") {
		layer += 2 * int64(hd)
	}
	n := v*h + int64(c.Layers)*layer + h
	if c.TieEmbeddings == nil || !*c.TieEmbeddings {
		n += v * h
	}
	return n
}
