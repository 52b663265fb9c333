package engines

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The functions in this file turn one endpoint's answer into typed values.
// They do no I/O, never panic on any input (fuzzed), and report ok=false
// for answers that are not the shape that engine gives.

// maxSane bounds every token count or slot count read from an engine: a
// value beyond it is a garbled answer, not a model.
const maxSane = 1 << 40

// asInt reads a JSON number (float64 after Unmarshal into any), a numeric
// string, or a json.Number as a positive int.
func asInt(v any) (int, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case json.Number:
		g, err := x.Float64()
		if err != nil {
			return 0, false
		}
		f = g
	case string:
		g, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false
		}
		f = g
	default:
		return 0, false
	}
	if math.IsNaN(f) || f <= 0 || f > maxSane || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

func asString(v any) (string, bool) {
	s, ok := v.(string)
	s = strings.TrimSpace(s)
	return s, ok && s != ""
}

func unmarshalObject(body []byte) (map[string]any, bool) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

// modelEntry is one entry of GET /v1/models.
type modelEntry struct {
	ID          string
	MaxModelLen int // 0 when the engine does not say
	OwnedBy     string
}

// parseModels reads an OpenAI model list: {"object":"list","data":[{"id":…}]}.
// vLLM and SGLang add max_model_len to each entry.
func parseModels(body []byte) ([]modelEntry, bool) {
	m, ok := unmarshalObject(body)
	if !ok {
		return nil, false
	}
	data, ok := m["data"].([]any)
	if !ok {
		return nil, false
	}
	var out []modelEntry
	for _, d := range data {
		e, ok := d.(map[string]any)
		if !ok {
			continue
		}
		id, ok := asString(e["id"])
		if !ok {
			continue
		}
		me := modelEntry{ID: id}
		me.MaxModelLen, _ = asInt(e["max_model_len"])
		me.OwnedBy, _ = asString(e["owned_by"])
		out = append(out, me)
	}
	return out, true
}

// pickModel returns the entry for want, or the first entry when want is "".
// A name without a tag also picks the entry tagged ":latest", as Ollama
// itself answers to "tiny" for "tiny:latest".
func pickModel(models []modelEntry, want string) (modelEntry, bool) {
	for _, m := range models {
		if want == "" || m.ID == want {
			return m, true
		}
	}
	if want != "" && !strings.Contains(want, ":") {
		for _, m := range models {
			if m.ID == want+":latest" {
				return m, true
			}
		}
	}
	return modelEntry{}, false
}

// parseVersion reads {"version": "…"} (vLLM /version, Ollama /api/version).
func parseVersion(body []byte) (string, bool) {
	m, ok := unmarshalObject(body)
	if !ok {
		return "", false
	}
	return asString(m["version"])
}

// llamaProps is what GET /props of llama.cpp llama-server says.
type llamaProps struct {
	NCtx       int // default_generation_settings.n_ctx: context of one slot
	TotalSlots int
	BuildInfo  string
	ModelAlias string
	ModelPath  string // the GGUF file it serves
}

func parseProps(body []byte) (llamaProps, bool) {
	var p llamaProps
	m, ok := unmarshalObject(body)
	if !ok {
		return p, false
	}
	slots, ok := asInt(m["total_slots"])
	if !ok {
		return p, false
	}
	p.TotalSlots = slots
	if dgs, ok := m["default_generation_settings"].(map[string]any); ok {
		p.NCtx, _ = asInt(dgs["n_ctx"])
	}
	p.BuildInfo, _ = asString(m["build_info"])
	p.ModelAlias, _ = asString(m["model_alias"])
	p.ModelPath, _ = asString(m["model_path"])
	return p, true
}

// parseSlots reads GET /slots of llama-server: one entry per slot.
func parseSlots(body []byte) (n, nCtx int, ok bool) {
	var arr []map[string]any
	if err := json.Unmarshal(body, &arr); err != nil || len(arr) == 0 {
		return 0, 0, false
	}
	for _, s := range arr {
		if s == nil {
			return 0, 0, false
		}
		if _, ok := s["id"]; !ok {
			return 0, 0, false
		}
		if c, ok := asInt(s["n_ctx"]); ok && nCtx == 0 {
			nCtx = c
		}
	}
	return len(arr), nCtx, true
}

// sglangInfo is what GET /get_server_info of SGLang says.
type sglangInfo struct {
	MaxTotalNumTokens int    // KV cache capacity in tokens
	Source            string // which field it came from
	Version           string
	ContextLength     int // context_length when set on the command line
	MaxRunning        int
	ServedModel       string
}

func parseServerInfo(body []byte) (sglangInfo, bool) {
	var s sglangInfo
	m, ok := unmarshalObject(body)
	if !ok {
		return s, false
	}
	if v, ok := asInt(m["max_total_num_tokens"]); ok {
		s.MaxTotalNumTokens, s.Source = v, "max_total_num_tokens"
	} else if states, ok := m["internal_states"].([]any); ok && len(states) > 0 {
		if st, ok := states[0].(map[string]any); ok {
			if v, ok := asInt(st["max_total_num_tokens"]); ok {
				s.MaxTotalNumTokens, s.Source = v, "internal_states[0].max_total_num_tokens"
			}
		}
	}
	s.Version, _ = asString(m["version"])
	s.ContextLength, _ = asInt(m["context_length"])
	s.MaxRunning, _ = asInt(m["max_running_requests"])
	s.ServedModel, _ = asString(m["served_model_name"])
	// SGLang's answer is a dump of its server arguments: require a field
	// only it has, so another engine's JSON is not taken for SGLang.
	_, hasPath := m["model_path"]
	_, hasMem := m["mem_fraction_static"]
	if s.MaxTotalNumTokens == 0 && !(hasPath && hasMem) {
		return s, false
	}
	return s, true
}

// tgiInfo is what GET /info of Text Generation Inference says.
type tgiInfo struct {
	ModelID             string
	Version             string
	MaxTotalTokens      int
	MaxInputTokens      int
	MaxBatchTotalTokens int
	MaxConcurrent       int
}

func parseTGIInfo(body []byte) (tgiInfo, bool) {
	var t tgiInfo
	m, ok := unmarshalObject(body)
	if !ok {
		return t, false
	}
	t.MaxTotalTokens, _ = asInt(m["max_total_tokens"])
	t.ModelID, _ = asString(m["model_id"])
	if t.MaxTotalTokens == 0 || t.ModelID == "" {
		return t, false
	}
	t.Version, _ = asString(m["version"])
	t.MaxBatchTotalTokens, _ = asInt(m["max_batch_total_tokens"])
	if v, ok := asInt(m["max_input_tokens"]); ok {
		t.MaxInputTokens = v
	} else {
		t.MaxInputTokens, _ = asInt(m["max_input_length"])
	}
	t.MaxConcurrent, _ = asInt(m["max_concurrent_requests"])
	return t, true
}

// ollamaRunning is one model of GET /api/ps.
type ollamaRunning struct {
	Name          string
	ContextLength int
}

func parseOllamaPS(body []byte) ([]ollamaRunning, bool) {
	m, ok := unmarshalObject(body)
	if !ok {
		return nil, false
	}
	list, ok := m["models"].([]any)
	if !ok {
		return nil, false
	}
	var out []ollamaRunning
	for _, x := range list {
		e, ok := x.(map[string]any)
		if !ok {
			continue
		}
		var r ollamaRunning
		if r.Name, ok = asString(e["name"]); !ok {
			r.Name, _ = asString(e["model"])
		}
		r.ContextLength, _ = asInt(e["context_length"])
		out = append(out, r)
	}
	return out, true
}

// ollamaShow is what POST /api/show says about one model's context: the
// num_ctx parameter the model runs with, and the length it was trained for.
type ollamaShow struct {
	NumCtx        int
	TrainedCtx    int
	TrainedSource string // e.g. model_info["llama.context_length"]
}

func parseOllamaShow(body []byte) (ollamaShow, bool) {
	var s ollamaShow
	m, ok := unmarshalObject(body)
	if !ok {
		return s, false
	}
	if params, ok := m["parameters"].(string); ok {
		for _, line := range strings.Split(params, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == "num_ctx" {
				s.NumCtx, _ = asInt(f[1])
			}
		}
	}
	if mi, ok := m["model_info"].(map[string]any); ok {
		arch, _ := asString(mi["general.architecture"])
		if v, ok := asInt(mi[arch+".context_length"]); ok && arch != "" {
			s.TrainedCtx, s.TrainedSource = v, arch+".context_length"
		} else {
			for k, v := range mi {
				if strings.HasSuffix(k, ".context_length") {
					if n, ok := asInt(v); ok && (s.TrainedSource == "" || k < s.TrainedSource) {
						s.TrainedCtx, s.TrainedSource = n, k
					}
				}
			}
		}
	}
	_, hasDetails := m["details"]
	if s.NumCtx == 0 && s.TrainedCtx == 0 && !hasDetails {
		return s, false
	}
	return s, true
}

// vllmCache is the KV cache size in vllm:cache_config_info's labels.
type vllmCache struct {
	Tokens    int    // capacity in tokens
	Source    string // which labels it came from
	Blocks    int
	BlockSize int
	DType     string // cache_dtype: "auto" (the model's dtype), "fp8", …
	// MemoryBytes is the memory the KV cache was given, where the user
	// set it (label kv_cache_memory_bytes: --kv-cache-memory-bytes, or
	// VLLM_CPU_KVCACHE_SPACE GiB on vLLM's CPU build, vllm/platforms/cpu.py
	// 0.32.0); 0 where the label says None (vLLM then sizes the cache by
	// gpu_memory_utilization).
	MemoryBytes int64
	// Override is num_gpu_blocks_override (--num-gpu-blocks-override):
	// the blocks the user set, which vLLM uses whatever the memory holds
	// (may_override_num_blocks, vllm/v1/core/kv_cache_utils.py 0.32.0).
	Override int
	// Labelled: Tokens is vLLM's own kv_cache_size_tokens, not blocks ×
	// block size.
	Labelled bool
}

func parseCacheConfig(m Metrics) (vllmCache, bool) {
	var c vllmCache
	s, ok := m.First("vllm:cache_config_info")
	if !ok {
		return c, false
	}
	if v, ok := s.Label("kv_cache_size_tokens"); ok {
		if n, ok := asInt(v); ok {
			c.Tokens, c.Source, c.Labelled = n, "label kv_cache_size_tokens", true
		}
	}
	if v, ok := s.Label("num_gpu_blocks"); ok {
		c.Blocks, _ = asInt(v)
	}
	if v, ok := s.Label("block_size"); ok {
		c.BlockSize, _ = asInt(v)
	}
	c.DType, _ = s.Label("cache_dtype")
	if v, ok := s.Label("kv_cache_memory_bytes"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			c.MemoryBytes = n
		}
	}
	if v, ok := s.Label("num_gpu_blocks_override"); ok {
		if n, ok := asInt(v); ok && n > 0 {
			c.Override = n
		}
	}
	if c.Tokens == 0 && c.Blocks > 0 && c.BlockSize > 0 && c.Blocks <= maxSane/c.BlockSize {
		c.Tokens, c.Source = c.Blocks*c.BlockSize, "labels num_gpu_blocks × block_size"
	}
	if c.Override > 0 && c.Tokens > 0 {
		c.Source += fmt.Sprintf(" (num_gpu_blocks_override %d: the user's blocks, not what the memory holds)", c.Override)
	}
	return c, c.Tokens > 0
}

// parseTokenCount reads a /tokenize answer of any engine: {"count": N}
// (vLLM, SGLang), {"tokens": [...]} (llama.cpp, also vLLM/SGLang), or a
// bare array of tokens (TGI). Token arrays are counted, not decoded: a
// 248K-token answer is megabytes of ids.
func parseTokenCount(body []byte) (int, bool) {
	b := bytes.TrimSpace(body)
	if len(b) > 0 && b[0] == '[' {
		var n arrayLen
		if err := json.Unmarshal(b, &n); err != nil {
			return 0, false
		}
		return int(n), true
	}
	var r struct {
		Count  json.RawMessage `json:"count"`
		Tokens *arrayLen       `json:"tokens"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, false
	}
	if len(r.Count) > 0 {
		var c any
		if err := json.Unmarshal(r.Count, &c); err == nil {
			if arr, ok := c.([]any); ok && len(arr) == 1 { // some forks wrap it: [N]
				c = arr[0]
			}
			if n, ok := asInt(c); ok {
				return n, true
			}
			if f, ok := c.(float64); ok && f == 0 {
				return 0, true
			}
		}
	}
	if r.Tokens != nil {
		return int(*r.Tokens), true
	}
	return 0, false
}

// arrayLen decodes a JSON array as its number of elements, without
// decoding them.
type arrayLen int

// UnmarshalJSON counts the top-level elements of an array (json.Unmarshal
// has already checked the syntax).
func (n *arrayLen) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*n = 0
		return nil
	}
	if len(b) < 2 || b[0] != '[' {
		return errors.New("not an array")
	}
	depth, commas, inStr, esc, seen := 0, 0, false, false, false
	for _, c := range b[1 : len(b)-1] {
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr, seen = true, true
		case c == '[' || c == '{':
			depth++
			seen = true
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			commas++
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			seen = true
		}
	}
	if seen {
		*n = arrayLen(commas + 1)
	} else {
		*n = 0
	}
	return nil
}

// parseUsagePromptTokens reads usage.prompt_tokens of a non-streaming
// completion or chat completion answer.
func parseUsagePromptTokens(body []byte) (int, bool) {
	var r struct {
		Usage *struct {
			PromptTokens *float64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Usage == nil || r.Usage.PromptTokens == nil {
		return 0, false
	}
	f := *r.Usage.PromptTokens
	if f < 0 || f > maxSane || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// parseApplyTemplate reads llama.cpp's POST /apply-template answer.
func parseApplyTemplate(body []byte) (string, bool) {
	m, ok := unmarshalObject(body)
	if !ok {
		return "", false
	}
	s, ok := m["prompt"].(string)
	return s, ok
}

// parseSlotCaches reads GET /slots: for each slot with a current or last
// request, that request's id_task, n_prompt_tokens (the tokens the slot
// holds), n_prompt_tokens_processed, n_prompt_tokens_cache and next_token
// n_decoded, and whether the slot is_processing. Which busy readings are a
// request's own is SlotWatch's to tell.
func parseSlotCaches(body []byte) ([]SlotCache, bool) {
	var arr []struct {
		ID         *json.Number    `json:"id"`
		Processing *bool           `json:"is_processing"`
		Task       *json.Number    `json:"id_task"`
		Held       *json.Number    `json:"n_prompt_tokens"`
		Processed  *json.Number    `json:"n_prompt_tokens_processed"`
		Cached     *json.Number    `json:"n_prompt_tokens_cache"`
		Next       json.RawMessage `json:"next_token"`
	}
	if err := json.Unmarshal(body, &arr); err != nil {
		return nil, false
	}
	var out []SlotCache
	for _, s := range arr {
		if s.Processing == nil {
			return nil, false // not llama-server's /slots
		}
		if s.ID == nil || s.Task == nil || s.Processed == nil || s.Cached == nil {
			continue
		}
		id, ok0 := asCount(*s.ID)
		task, ok1 := asCount(*s.Task)
		proc, ok2 := asCount(*s.Processed)
		cached, ok3 := asCount(*s.Cached)
		if !ok0 || !ok1 || !ok2 || !ok3 {
			continue
		}
		held := -1 // not said
		if s.Held != nil {
			if n, ok := asCount(*s.Held); ok {
				held = n
			}
		}
		out = append(out, SlotCache{Slot: id, Task: task, Busy: *s.Processing, Held: held, Processed: proc, Cached: cached, Decoded: decoded(s.Next)})
	}
	return out, true
}

// decoded is next_token's n_decoded in a /slots entry (an array of one
// object, or an object), 0 where absent.
func decoded(raw json.RawMessage) int {
	var one struct {
		N *json.Number `json:"n_decoded"`
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil && len(arr) > 0 {
		raw = arr[0]
	}
	if json.Unmarshal(raw, &one) != nil || one.N == nil {
		return 0
	}
	n, _ := asCount(*one.N)
	return n
}

// asCount reads a JSON number as a count >= 0.
func asCount(n json.Number) (int, bool) {
	if n == "0" {
		return 0, true
	}
	return asInt(n)
}
