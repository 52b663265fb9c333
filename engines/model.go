package engines

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Fact names of what the engine says of its model's size and shape.
const (
	FactWeightBytes = "weight_bytes"
	FactModelPath   = "model_path"
	FactKVShape     = "kv_shape" // "layers × KV heads × head dim"
	FactKVDType     = "kv_cache_dtype"
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
	// Layers, KVHeads, HeadDim (KeyDim and ValueDim where they differ) and
	// ShapeSource: the KV layout, where the engine says it.
	Layers, KVHeads, HeadDim, KeyDim, ValueDim int
	ShapeSource                                string
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

// ggmlTypeBytes is bytes per element of the tensor types Ollama's
// /api/show names (ggml's block formats: a block's bytes over its
// elements). Types not here give no weight bytes.
var ggmlTypeBytes = map[string]float64{
	"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I8": 1, "I16": 2, "I32": 4,
	"Q8_0": 34.0 / 32, "Q4_0": 18.0 / 32, "Q4_1": 20.0 / 32, "Q5_0": 22.0 / 32, "Q5_1": 24.0 / 32,
	"Q2_K": 84.0 / 256, "Q3_K": 110.0 / 256, "Q4_K": 144.0 / 256, "Q5_K": 176.0 / 256, "Q6_K": 210.0 / 256,
	"IQ4_NL": 18.0 / 32, "IQ4_XS": 136.0 / 256,
}

// ollamaModel is what POST /api/show says of a model's shape and size.
type ollamaModel struct {
	Layers, KVHeads, HeadDim, KeyDim, ValueDim int
	WeightBytes                                int64
}

// parseOllamaModel reads POST /api/show: model_info's {arch}.block_count,
// attention.head_count(_kv), embedding_length, key_length and value_length,
// and the tensors' bytes from their types and shapes (0 when a type is not
// one ggmlTypeBytes knows).
func parseOllamaModel(body []byte) (ollamaModel, bool) {
	var v struct {
		Info    map[string]any `json:"model_info"`
		Tensors []struct {
			Type  string   `json:"type"`
			Shape []uint64 `json:"shape"`
		} `json:"tensors"`
	}
	var m ollamaModel
	if err := json.Unmarshal(body, &v); err != nil || v.Info == nil {
		return m, false
	}
	arch, _ := asString(v.Info["general.architecture"])
	if arch == "" {
		return m, false
	}
	num := func(k string) int { n, _ := asInt(v.Info[arch+"."+k]); return n }
	heads := num("attention.head_count")
	m.Layers = num("block_count")
	m.KVHeads = num("attention.head_count_kv")
	if m.KVHeads == 0 {
		m.KVHeads = heads
	}
	if e := num("embedding_length"); e > 0 && heads > 0 {
		m.HeadDim = e / heads
	}
	m.KeyDim, m.ValueDim = num("attention.key_length"), num("attention.value_length")
	var total float64
	for _, t := range v.Tensors {
		per, ok := ggmlTypeBytes[strings.ToUpper(t.Type)]
		if !ok || len(t.Shape) == 0 {
			total = 0
			break
		}
		n := 1.0
		for _, d := range t.Shape {
			n *= float64(d)
		}
		total += n * per
	}
	if total > 0 && total < 1<<50 {
		m.WeightBytes = int64(math.Round(total))
	}
	return m, m.Layers > 0 || m.WeightBytes > 0
}

// describeShape writes a KV layout as a fact's value.
func describeShape(layers, kvHeads, headDim, keyDim, valueDim int) string {
	s := fmt.Sprintf("%d layers × %d KV heads × %d head dim", layers, kvHeads, headDim)
	if keyDim > 0 && valueDim > 0 && (keyDim != headDim || valueDim != headDim) {
		s = fmt.Sprintf("%d layers × %d KV heads × (%d key + %d value dims)", layers, kvHeads, keyDim, valueDim)
	}
	return s
}
