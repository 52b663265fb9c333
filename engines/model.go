package engines

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/tokentap/tokentap/bandwidth"
)

// Fact names of what the engine says of its model's size and shape.
const (
	FactWeightBytes = "weight_bytes"
	FactModelPath   = "model_path"
	FactKVShape     = "kv_shape" // "layers × KV heads × head dim", or the layers by attention kind
	FactKVDType     = "kv_cache_dtype"
	FactExperts     = "moe_experts" // "128 experts, 8 per token, in 48 layers"
)

// ModelFacts is what an engine says of its model's size and shape, for the
// decode limit of METHOD.md §8; zero fields: the engine did not say.
//
//   - llama.cpp: GET /v1/models data[].meta.size is the bytes of all the
//     model's tensors, and GET /props model_path the GGUF file it serves
//     (whose metadata has the layers, KV heads and head dims, readable
//     where the engine runs on this machine). Its KV cache dtype
//     (--cache-type-k/-v) is in no answer.
//   - vLLM: GET /metrics vllm:cache_config_info's cache_dtype ("auto": the
//     model's own dtype). /v1/models says nothing of the model's size.
//   - Ollama: POST /api/show model_info has the GGUF metadata (layers, KV
//     heads, head dims) and tensors their types and shapes, hence the
//     weights' bytes. Its KV cache type (OLLAMA_KV_CACHE_TYPE) is in no
//     answer.
type ModelFacts struct {
	WeightBytes  int64
	WeightSource string
	// Path is a GGUF file the engine serves from, and PathSource where it
	// said so.
	Path, PathSource string
	// Shape is the model's shape where the engine says it (Ollama's
	// model_info and tensors: KV layout, weights with the input embeddings
	// and routed experts), and ShapeSource where.
	Shape       bandwidth.Shape
	ShapeSource string
	// KVDType is the KV cache's dtype as the engine names it ("auto",
	// "fp8", …) and KVDTypeSource where.
	KVDType, KVDTypeSource string
}

// parseLlamaModelMeta reads llama-server's GET /v1/models: the first
// model's meta.size (bytes of all tensors).
func parseLlamaModelMeta(body []byte) (size int64, ok bool) {
	var v struct {
		Data []struct {
			Meta struct {
				Size json.Number `json:"size"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Data) == 0 {
		return 0, false
	}
	f, err := v.Data[0].Meta.Size.Float64()
	if err != nil || f <= 0 || f > 1<<50 || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// parseOllamaModel reads POST /api/show: model_info is the GGUF's
// metadata (per-layer arrays among it) and tensors their names, types and
// shapes, read as a GGUF header is (bandwidth.GGUFShape). ok is false
// when the answer has no model_info with an architecture.
func parseOllamaModel(body []byte) (bandwidth.Shape, bool) {
	var v struct {
		Info    map[string]any `json:"model_info"`
		Tensors []struct {
			Name  string   `json:"name"`
			Type  string   `json:"type"`
			Shape []uint64 `json:"shape"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Info == nil {
		return bandwidth.Shape{}, false
	}
	if arch, _ := asString(v.Info["general.architecture"]); arch == "" {
		return bandwidth.Shape{}, false
	}
	meta := bandwidth.GGUFMeta{}
	for k, x := range v.Info {
		switch x := x.(type) {
		case float64, bool, string:
			meta[k] = x
		case []any:
			nums, bools := []float64{}, []bool{}
			for _, e := range x {
				switch e := e.(type) {
				case float64:
					nums = append(nums, e)
				case bool:
					bools = append(bools, e)
				}
			}
			switch {
			case len(x) > 0 && len(nums) == len(x):
				meta[k] = nums
			case len(x) > 0 && len(bools) == len(x):
				meta[k] = bools
			}
		}
	}
	var tensors []bandwidth.Tensor
	for _, t := range v.Tensors {
		tensors = append(tensors, bandwidth.Tensor{Name: t.Name, Type: strings.ToUpper(t.Type), Dims: t.Shape})
	}
	s := bandwidth.GGUFShape(meta, tensors)
	return s, true
}
