package engines

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzProbeJSON feeds any bytes to every endpoint parser: none may panic,
// and none may report a negative or absurd token count.
func FuzzProbeJSON(f *testing.F) {
	for _, name := range []string{
		"llamacpp/props.json", "llamacpp/slots.json", "llamacpp/models.json", "llamacpp/chat_nonstream.json",
		"vllm/models.json", "vllm/version.json", "sglang/server_info.json", "sglang/models.json",
		"tgi/info.json", "tgi/tokenize.json", "ollama/ps.json", "ollama/show.json", "ollama/models.json", "ollama/show_tensors.json",
		"ollama/show_moe.json",
	} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"count":[23],"max_model_len":8192}`))
	f.Add([]byte(`{"total_slots":1e300,"default_generation_settings":{"n_ctx":-5}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(what string, n int) {
			if n < 0 || n > maxSane {
				t.Fatalf("%s = %d from %q", what, n, b)
			}
		}
		if ms, ok := parseModels(b); ok {
			for _, m := range ms {
				check("max_model_len", m.MaxModelLen)
				if m.ID == "" {
					t.Fatal("model without id")
				}
			}
		}
		parseVersion(b)
		if size, ok := parseLlamaModelMeta(b); ok && (size <= 0 || size > 1<<50) {
			t.Fatalf("weight bytes %d from %q", size, b)
		}
		if m, ok := parseOllamaModel(b); ok {
			check("layers", m.KV.Layers)
			check("KV heads", m.KV.KVHeads)
			if m.WeightBytes < 0 || m.WeightBytes > 1<<50 || m.MoE.Bytes > m.WeightBytes || m.KV.FullKeys < 0 || m.KV.WindowKeys < 0 {
				t.Fatalf("weight bytes %d from %q", m.WeightBytes, b)
			}
		}
		if sc, ok := parseSlotCaches(b); ok {
			for _, c := range sc {
				check("slot processed", c.Processed)
				check("slot cached", c.Cached)
				check("slot decoded", c.Decoded)
				check("slot id", c.Slot)
				if c.Held < -1 {
					t.Fatalf("slot held %d from %q", c.Held, b)
				}
			}
		}
		if p, ok := parseProps(b); ok {
			check("total_slots", p.TotalSlots)
			check("n_ctx", p.NCtx)
			if p.TotalSlots == 0 {
				t.Fatal("props without slots accepted")
			}
		}
		if n, c, ok := parseSlots(b); ok {
			check("slots", n)
			check("slot n_ctx", c)
		}
		if s, ok := parseServerInfo(b); ok {
			check("max_total_num_tokens", s.MaxTotalNumTokens)
		}
		if ti, ok := parseTGIInfo(b); ok {
			check("max_total_tokens", ti.MaxTotalTokens)
			check("max_batch_total_tokens", ti.MaxBatchTotalTokens)
		}
		if ps, ok := parseOllamaPS(b); ok {
			for _, r := range ps {
				check("context_length", r.ContextLength)
			}
		}
		if s, ok := parseOllamaShow(b); ok {
			check("num_ctx", s.NumCtx)
			check("trained ctx", s.TrainedCtx)
		}
		if n, ok := parseTokenCount(b); ok {
			check("token count", n)
		}
		if n, ok := parseUsagePromptTokens(b); ok {
			check("prompt_tokens", n)
		}
		parseApplyTemplate(b)
	})
}

func TestParseEdgeCases(t *testing.T) {
	if _, ok := parseProps([]byte(`{"total_slots":0}`)); ok {
		t.Error("zero slots accepted")
	}
	if n, ok := parseTokenCount([]byte(`{"count":[23],"max_model_len":8192}`)); !ok || n != 23 {
		t.Errorf("wrapped count: %d %v", n, ok)
	}
	if n, ok := parseTokenCount([]byte(`{"count":0,"tokens":[]}`)); !ok || n != 0 {
		t.Errorf("empty count: %d %v", n, ok)
	}
	if _, ok := parseUsagePromptTokens([]byte(`{"usage":{"prompt_tokens":1.5}}`)); ok {
		t.Error("fractional prompt_tokens accepted")
	}
	if _, ok := parseServerInfo([]byte(`{"version":"1"}`)); ok {
		t.Error("any JSON with a version taken for SGLang")
	}
	if _, ok := parseTGIInfo([]byte(`{"max_total_tokens":10}`)); ok {
		t.Error("TGI info without model_id accepted")
	}
	s, ok := parseOllamaShow([]byte(`{"details":{},"model_info":{"qwen2.context_length":32768,"general.architecture":"qwen2"}}`))
	if !ok || s.TrainedCtx != 32768 || s.TrainedSource != "qwen2.context_length" {
		t.Errorf("show: %+v %v", s, ok)
	}
}

func TestArrayLen(t *testing.T) {
	for in, want := range map[string]int{
		`[]`: 0, `[ ]`: 0, `[1]`: 1, `[1,2,3]`: 3, `null`: 0,
		`[{"a":[1,2]},{"b":"x,]\"}"}]`: 2, `[[],[]]`: 2, `["", ""]`: 2,
	} {
		var n arrayLen
		if err := json.Unmarshal([]byte(in), &n); err != nil || int(n) != want {
			t.Errorf("%s: %d %v, want %d", in, n, err, want)
		}
	}
}

// FuzzArrayLen: counting elements without decoding agrees with decoding.
func FuzzArrayLen(f *testing.F) {
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte(`[{"id":1,"text":"a,b"},{"id":2}]`))
	f.Add([]byte(`["\\\"",[1,[2]]]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var full []any
		if json.Unmarshal(b, &full) != nil || full == nil {
			return
		}
		var n arrayLen
		if err := json.Unmarshal(b, &n); err != nil || int(n) != len(full) {
			t.Fatalf("%q: arrayLen %d (%v), decoded %d", b, n, err, len(full))
		}
	})
}
