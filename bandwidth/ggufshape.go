package bandwidth

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ggmlTypes are ggml's tensor types by their number in a GGUF file
// (ggml.h enum ggml_type): name, values per block and bytes per block
// (ggml-common.h block structs).
var ggmlTypes = map[uint32]struct {
	name         string
	block, bytes int
}{
	0: {"F32", 1, 4}, 1: {"F16", 1, 2}, 2: {"Q4_0", 32, 18}, 3: {"Q4_1", 32, 20}, 6: {"Q5_0", 32, 22}, 7: {"Q5_1", 32, 24},
	8: {"Q8_0", 32, 34}, 9: {"Q8_1", 32, 36}, 10: {"Q2_K", 256, 84}, 11: {"Q3_K", 256, 110}, 12: {"Q4_K", 256, 144},
	13: {"Q5_K", 256, 176}, 14: {"Q6_K", 256, 210}, 15: {"Q8_K", 256, 292}, 16: {"IQ2_XXS", 256, 66}, 17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98}, 19: {"IQ1_S", 256, 50}, 20: {"IQ4_NL", 32, 18}, 21: {"IQ3_S", 256, 110}, 22: {"IQ2_S", 256, 82},
	23: {"IQ4_XS", 256, 136}, 24: {"I8", 1, 1}, 25: {"I16", 1, 2}, 26: {"I32", 1, 4}, 27: {"I64", 1, 8}, 28: {"F64", 1, 8},
	29: {"IQ1_M", 256, 56}, 30: {"BF16", 1, 2}, 34: {"TQ1_0", 256, 54}, 35: {"TQ2_0", 256, 66}, 39: {"MXFP4", 32, 17},
}

// ggmlTypeName is a type number's name, "type N" for one ggml does not
// have (TensorBytes then refuses it by that name).
func ggmlTypeName(t uint32) string {
	if g, ok := ggmlTypes[t]; ok {
		return g.name
	}
	return "type " + strconv.FormatUint(uint64(t), 10)
}

// TensorBytes is a tensor's bytes: its values over the type's block, times
// the block's bytes. ok is false for a type tokentap does not know.
func TensorBytes(t Tensor) (float64, bool) {
	for _, g := range ggmlTypes {
		if strings.EqualFold(g.name, t.Type) {
			n := 1.0
			for _, d := range t.Dims {
				n *= float64(d)
			}
			return n / float64(g.block) * float64(g.bytes), true
		}
	}
	return 0, false
}

// ggufSWAPattern is, per llama.cpp architecture, every how many layers one
// is full attention where the file declares a sliding window but no
// pattern (llama.cpp src/llama-model.cpp, hparams.set_swa_pattern: layer
// il slides when il % n < n − 1).
var ggufSWAPattern = map[string]int{"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4}

// Shape is the model as its GGUF header declares it (GGUFShape).
func (g GGUF) Shape() (Shape, bool) {
	s := GGUFShape(g.Meta, g.Tensors)
	return s, s.HasKV()
}

// GGUFShape reads a model's shape from GGUF metadata (a file's header, or
// Ollama's /api/show model_info) and its tensors (nil: not known):
//
//   - KV layout: {arch}.block_count layers; attention.head_count_kv KV
//     heads, one figure or one per layer (absent: head_count, as llama.cpp
//     reads it); attention.key_length/value_length, else embedding_length
//     ÷ head_count; multi-head latent attention (attention.kv_lora_rank)
//     caches kv_lora_rank + rope.dimension_count per token and layer (as
//     llama.cpp's V-less cache, PR #19067, and vLLM keep it);
//     attention.sliding_window with sliding_window_pattern (a number, or
//     a bool per layer), or llama.cpp's pattern for the architecture.
//   - weights: the tensors' bytes; token_embd.weight is the input
//     embedding table a step does not read where output.weight exists;
//     tensors named *_exps are the routed experts of expert_count, of
//     which expert_used_count serve a token.
//
// What it cannot read (recurrent layers, a sliding window without a known
// pattern, an unknown tensor type) is refused by name in Why.
func GGUFShape(m GGUFMeta, tensors []Tensor) Shape {
	var s Shape
	arch, _ := m["general.architecture"].(string)
	if arch == "" {
		s.Why = append(s.Why, "the GGUF metadata has no general.architecture: its KV layout and weights are not readable")
		return s
	}
	s.KV = ggufKV(m, arch, &s)
	ggufWeights(m, arch, tensors, &s)
	return s
}

// num reads a positive whole number of the metadata.
func (m GGUFMeta) num(key string) int {
	f, ok := m[key].(float64)
	if !ok || f <= 0 || f != math.Trunc(f) || f > 1<<40 {
		return 0
	}
	return int(f)
}

// perLayer reads a figure given once or per layer: n values, or nil when
// absent or malformed (ok false when present but not n whole numbers).
func (m GGUFMeta) perLayer(key string, n int) (vals []int, ok bool) {
	switch v := m[key].(type) {
	case nil:
		return nil, true
	case float64:
		x := m.num(key)
		if x == 0 && v != 0 {
			return nil, false
		}
		vals = make([]int, n)
		for i := range vals {
			vals[i] = x
		}
		return vals, true
	case []float64:
		if len(v) != n {
			return nil, false
		}
		for _, f := range v {
			if f < 0 || f != math.Trunc(f) || f > 1<<20 {
				return nil, false
			}
			vals = append(vals, int(f))
		}
		return vals, true
	}
	return nil, false
}

func ggufKV(m GGUFMeta, arch string, s *Shape) KV {
	why := func(format string, a ...any) KV {
		s.Why = append(s.Why, "the GGUF's KV layout: "+fmt.Sprintf(format, a...)+" (give --layers, --kv-heads and --head-dim)")
		return KV{}
	}
	for k := range m {
		for _, p := range []string{".ssm.", ".shortconv.", ".wkv.", ".rwkv", ".linear_attention"} {
			if strings.HasPrefix(k, arch+".") && strings.Contains(k, p) {
				return why("the model (%s) has recurrent or linear-attention layers (%s), whose state tokentap reads from a config.json only", arch, k)
			}
		}
	}
	n := m.num(arch + ".block_count")
	if n == 0 || n > 1<<12 {
		return why("no %s.block_count", arch)
	}
	heads, ok := m.perLayer(arch+".attention.head_count", n)
	if !ok || heads == nil {
		return why("no %s.attention.head_count", arch)
	}
	kvh, ok := m.perLayer(arch+".attention.head_count_kv", n)
	if !ok {
		return why("%s.attention.head_count_kv is neither one figure nor one per layer", arch)
	}
	if kvh == nil {
		kvh = heads
		s.Notes = append(s.Notes, fmt.Sprintf("%s.attention.head_count_kv absent: llama.cpp takes head_count.", arch))
	}
	if lora := m.num(arch + ".attention.kv_lora_rank"); lora > 0 {
		rope := m.num(arch + ".rope.dimension_count")
		if rope == 0 {
			return why("multi-head latent attention without %s.rope.dimension_count", arch)
		}
		kv := layeredKV(make([]layerKind, n), fill(n, int64(lora+rope)), make([]int64, n), 0, 0)
		kv.Layout = fmt.Sprintf("%d layers × one latent of %d + %d rotary key elements (multi-head latent attention)", n, lora, rope)
		return kv
	}
	kd, vd := m.num(arch+".attention.key_length"), m.num(arch+".attention.value_length")
	if e := m.num(arch + ".embedding_length"); heads[0] > 0 && e > 0 {
		if kd == 0 {
			kd = e / heads[0]
		}
		if vd == 0 {
			vd = e / heads[0]
		}
	}
	if kd == 0 || vd == 0 {
		return why("neither %s.attention.key_length nor embedding_length ÷ head_count", arch)
	}
	kinds := make([]layerKind, n)
	window := m.num(arch + ".attention.sliding_window")
	if window > 0 {
		switch p := m[arch+".attention.sliding_window_pattern"].(type) {
		case []bool:
			if len(p) != n {
				return why("%s.attention.sliding_window_pattern has %d values for %d layers", arch, len(p), n)
			}
			for i, slide := range p {
				if slide {
					kinds[i] = windowLayer
				}
			}
		default:
			every := m.num(arch + ".attention.sliding_window_pattern")
			if every == 0 {
				every = ggufSWAPattern[arch]
			}
			if every == 0 {
				return why("%s.attention.sliding_window is %d, but tokentap does not know which layers of a %s model slide", arch, window, arch)
			}
			for i := range kinds {
				if i%every < every-1 {
					kinds[i] = windowLayer
				}
			}
		}
	}
	keys, vals := make([]int64, n), make([]int64, n)
	uniform := !slices.Contains(kinds, windowLayer)
	for i := range n {
		if kvh[i] == 0 {
			return why("layer %d has no KV heads (a recurrent layer), whose state tokentap does not read from a GGUF", i)
		}
		keys[i], vals[i] = int64(kvh[i])*int64(kd), int64(kvh[i])*int64(vd)
		uniform = uniform && kvh[i] == kvh[0]
	}
	if uniform {
		return UniformKV(n, kvh[0], kd, vd)
	}
	return layeredKV(kinds, keys, vals, window, 0)
}

func fill(n int, v int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func ggufWeights(m GGUFMeta, arch string, tensors []Tensor, s *Shape) {
	e, k := m.num(arch+".expert_count"), m.num(arch+".expert_used_count")
	why := func(format string, a ...any) {
		s.Why = append(s.Why, "the GGUF's weight bytes: "+fmt.Sprintf(format, a...)+" (give --weight-bytes, what a decode step reads)")
	}
	if len(tensors) == 0 {
		if e > 0 {
			why("a mixture of %d experts, whose expert tensor sizes were not read", e)
		}
		return
	}
	var total, embed, experts float64
	untied := false
	layers := map[string]bool{}
	for _, t := range tensors {
		b, ok := TensorBytes(t)
		if !ok {
			why("tensor %s has ggml type %s, whose size tokentap does not know", t.Name, t.Type)
			return
		}
		total += b
		switch {
		case t.Name == "token_embd.weight":
			embed = b
		case t.Name == "output.weight":
			untied = true
		case strings.Contains(t.Name, "_exps."):
			experts += b
			if blk, _, ok := strings.Cut(strings.TrimPrefix(t.Name, "blk."), "."); ok {
				layers[blk] = true
			}
		}
	}
	if experts > 0 && (e == 0 || k == 0 || k > e) {
		why("expert tensors (*_exps) without %s.expert_count and expert_used_count", arch)
		return
	}
	if e > 0 && experts == 0 {
		why("%s.expert_count is %d but no tensor is a routed expert's (*_exps)", arch, e)
		return
	}
	if total <= 0 || total > 1<<50 {
		return
	}
	s.WeightBytes = int64(math.Round(total))
	if untied {
		s.EmbedBytes = int64(math.Round(embed))
	}
	if experts > 0 {
		s.MoE = MoE{Experts: e, Used: k, Layers: len(layers), Bytes: int64(math.Round(experts))}
	}
}
