package tap

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestHeldBack(t *testing.T) {
	tests := []struct {
		name     string
		arrivals []time.Duration
		tokens   []int32
		extra    int
		want     []int32
	}{
		{"the event after a double gap carried the held token", ms(100, 110, 120, 140, 150), nil, 1, []int32{1, 1, 1, 2, 1}},
		{"two held tokens, two double gaps", ms(100, 120, 130, 150, 160), nil, 2, []int32{1, 2, 1, 2, 1}},
		{"a triple gap takes two, a double gap one", ms(100, 130, 140, 160), nil, 3, []int32{1, 3, 1, 2}},
		{"equal gaps: earliest events first", ms(100, 110, 120, 130), nil, 2, []int32{1, 2, 2, 1}},
		{"per-token gap counts announced tokens", ms(100, 130, 150), []int32{1, 3, 1}, 1, []int32{1, 3, 2}},
		{"a single event takes them all", ms(100), nil, 4, []int32{5}},
		{"nothing to give", ms(100, 110), nil, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &record.Record{Arrivals: tt.arrivals, Tokens: slices.Clone(tt.tokens)}
			before := r.ArrivedTokens()
			heldBack(r, tt.extra)
			if !slices.Equal(r.Tokens, tt.want) {
				t.Fatalf("tokens %v, want %v", r.Tokens, tt.want)
			}
			if got := r.ArrivedTokens(); got != before+tt.extra {
				t.Fatalf("events carry %d tokens, want %d", got, before+tt.extra)
			}
		})
	}
}

// TestHeldBackStream: an Ollama-like stream holds a token back and sends it
// with the next one. The tap gives usage's extra token to that event, so the
// decode rate counts usage's tokens and the gaps stay one per token.
func TestHeldBackStream(t *testing.T) {
	chunk := func(text string) string {
		return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"tiny","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":null}]}`+"\n\n", text)
	}
	s := NewStream(record.NewClock())
	rec := &record.Record{Stream: true, API: record.Chat}
	s.Begin(rec)
	s.Status(200)
	at := 100 * time.Millisecond
	for i := range 10 {
		if i == 5 {
			at += 10 * time.Millisecond // token 5 ("<b") is held back ...
			continue
		}
		text := " w"
		if i == 6 {
			text = "<b w" // ... and comes with token 6
		}
		s.WriteAt([]byte(chunk(text)), at)
		at += 10 * time.Millisecond
	}
	s.WriteAt([]byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"tiny","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":10,"total_tokens":19}}`+"\n\ndata: [DONE]\n\n"), at)
	s.EndAt(nil, record.BlameNone, at)
	if rec.Events() != 9 || rec.ArrivedTokens() != 10 {
		t.Fatalf("%d events carrying %d tokens, want 9 carrying usage's 10", rec.Events(), rec.ArrivedTokens())
	}
	if rec.EventTokens(5) != 2 {
		t.Fatalf("tokens per event %v: want the event after the 20 ms gap (event 5) to carry 2", rec.Tokens)
	}
	rate, ok := rec.DecodeRate()
	if !ok || rate < 99.9 || rate > 100.1 {
		t.Fatalf("decode rate %.2f tok/s, want 100 (9 tokens after the first in 90 ms)", rate)
	}
	if !strings.Contains(fmt.Sprint(rec.CompletionSource), "usage") {
		t.Fatalf("completion source %q, want usage", rec.CompletionSource)
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`, "Context size has been exceeded. (server_error, code 500)"},
		{`{"error":{"message":"The engine ran out of KV cache blocks","type":"InternalServerError","code":"kv"}}`, "The engine ran out of KV cache blocks (InternalServerError, code kv)"},
		{`{"error":"model not loaded"}`, "model not loaded"},
		{`{"object":"error","message":"bad","type":"BadRequestError","code":400}`, "bad (BadRequestError, code 400)"},
		{`{"detail":"Not Found"}`, "Not Found"},
		{`{"error":{"code":500}}`, `{"error":{"code":500}}`}, // no message: an excerpt
		{`overloaded`, "overloaded"},
	} {
		if got := ErrorMessage([]byte(tt.in)); got != tt.want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzErrorMessage: any engine error body gives a short single line.
func FuzzErrorMessage(f *testing.F) {
	f.Add([]byte(`{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`))
	f.Add([]byte(`{"error":"x","message":{"a":1},"code":[1]}`))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := ErrorMessage(b)
		if len(s) > 4*excerptLen+8 || strings.ContainsAny(s, "\n\r") {
			t.Fatalf("ErrorMessage(%q) = %q: not a short line", b, s)
		}
	})
}
