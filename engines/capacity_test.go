package engines

import (
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

func TestPickModel(t *testing.T) {
	list := []modelEntry{{ID: "tiny-noctx:latest"}, {ID: "tiny:latest"}, {ID: "qwen3:8b"}, {ID: "bench"}}
	tests := []struct{ want, got string }{
		{"", "tiny-noctx:latest"},
		{"tiny:latest", "tiny:latest"},
		{"tiny", "tiny:latest"}, // Ollama answers to a name without its :latest tag
		{"bench", "bench"},
		{"qwen3", ""}, // only :latest is implied
		{"tiny:q4", ""},
	}
	for _, tt := range tests {
		m, ok := pickModel(list, tt.want)
		if (tt.got == "") == ok || (ok && m.ID != tt.got) {
			t.Errorf("pickModel(%q) = %q %v, want %q", tt.want, m.ID, ok, tt.got)
		}
	}
}

func TestContextExceeded(t *testing.T) {
	failed := func(o record.Outcome, b record.Blame, msg string) *record.Record {
		return &record.Record{Outcome: o, Blame: b, Error: msg}
	}
	tests := []struct {
		name string
		r    *record.Record
		want bool
	}{
		{"llama.cpp 400 before streaming", failed(record.HTTPError, record.BlameEngine,
			`HTTP 400 from the engine: {"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}`), true},
		{"llama.cpp error event mid-stream", failed(record.EngineErr, record.BlameEngine,
			"engine error event: Context size has been exceeded. (server_error, code 500)"), true},
		{"vLLM max model length", failed(record.HTTPError, record.BlameEngine,
			`HTTP 400 from the engine: {"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"}}`), true},
		{"SGLang", failed(record.HTTPError, record.BlameEngine,
			`HTTP 400 from the engine: {"object":"error","message":"The input (70000 tokens) is longer than the model's context length (32768 tokens)."}`), true},
		{"TGI", failed(record.HTTPError, record.BlameEngine,
			"HTTP 422 from the engine: Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: 9000"), true},
		{"the fake engine", failed(record.HTTPError, record.BlameEngine,
			"HTTP 400 from the engine: The request needs 90000 KV cache tokens (…), more than the engine's KV cache capacity of 81920 tokens."), true},
		{"another 500", failed(record.HTTPError, record.BlameEngine, "HTTP 500 from the engine: fault injected: status 500"), false},
		{"a broken stream", failed(record.Broken, record.BlameEngine, "the stream closed before [DONE]"), false},
		{"ok", &record.Record{Outcome: record.OK}, false},
		{"the client's own cancellation", failed(record.Cancelled, record.BlameClient, "context size has been exceeded"), false},
	}
	for _, tt := range tests {
		if got := ContextExceeded(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPeakOverlap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sp := func(a, b int) span { return span{first: at(a), last: at(b), ok: true} }
	tests := []struct {
		name  string
		spans []span
		want  int
		ok    bool
	}{
		{"one slot: each starts after the last ended", []span{sp(0, 90), sp(100, 190), sp(200, 290), sp(300, 390)}, 1, true},
		{"two slots", []span{sp(0, 90), sp(5, 95), sp(100, 190), sp(105, 195)}, 2, true},
		{"all at once", []span{sp(0, 90), sp(1, 91), sp(2, 92), sp(3, 93)}, 4, true},
		{"one slot, the next read before the last ended", []span{sp(0, 100), sp(90, 190), sp(185, 290), sp(280, 390)}, 1, true},
		{"middles touching overlap at that instant", []span{sp(0, 100), sp(50, 150)}, 2, true},
		{"a stream without tokens says nothing", []span{sp(0, 90), {}}, 0, false},
	}
	for _, tt := range tests {
		got, ok := peakOverlap(tt.spans)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %d %v, want %d %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
