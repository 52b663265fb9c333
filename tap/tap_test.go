package tap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/test/benchcpu"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/sse"
	"github.com/valyala/fastjson"
)

func load(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cutSets returns ways to cut body into reads: whole, byte by byte, a
// single cut at every byte near a line end (where the scanner's state
// changes) and at every 13th byte elsewhere, and random chunkings.
func cutSets(body []byte, seed uint64) [][]int {
	n := len(body)
	every := make([]int, n)
	for i := range every {
		every[i] = i
	}
	out := [][]int{nil, every}
	near := func(i int) bool {
		for j := max(0, i-2); j < min(n, i+3); j++ {
			if body[j] == '\n' || body[j] == '\r' {
				return true
			}
		}
		return false
	}
	for c := 1; c < n; c++ {
		if c%13 == 0 || near(c) {
			out = append(out, []int{c})
		}
	}
	r := rand.New(rand.NewPCG(seed, 42))
	for k := 0; k < 8; k++ {
		var cuts []int
		for at := 0; at < n; {
			at += 1 + r.IntN(1+n/4)
			cuts = append(cuts, at)
		}
		out = append(out, cuts)
	}
	return out
}

// reads splits body at cuts.
func reads(body []byte, cuts []int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		if c <= prev || c >= len(body) {
			continue
		}
		out = append(out, body[prev:c])
		prev = c
	}
	return append(out, body[prev:])
}

// measure runs body through a Stream, read i arriving at (i+1) ms. With
// strip it goes through Forward and the forwarded bytes are returned.
func measure(s *Stream, body []byte, stream bool, cuts []int, strip bool, endErr error) (*record.Record, []byte) {
	rec := &record.Record{ID: "r1", API: record.Chat, Stream: stream, Model: "m"}
	s.Begin(rec)
	s.Status(200)
	var out []byte
	s.StripUsage(strip)
	for i, p := range reads(body, cuts) {
		// Copy each read so nothing may keep a read after the call.
		c := append([]byte(nil), p...)
		if strip {
			out = s.Forward(c, out)
		} else {
			s.WriteAt(c, time.Duration(i+1)*time.Millisecond)
		}
		for j := range c {
			c[j] = 0xEE
		}
	}
	if strip {
		out = s.Flush(out)
	}
	s.EndAt(endErr, record.BlameNone, time.Hour)
	return rec, out
}

type want struct {
	events           int
	tokens           []int32
	anyTokens        bool // tokens per event may be any split whose sum is completion
	completion       int
	completionSource record.Source
	prompt           int
	promptSource     record.Source
	cached           int
	responseID       string
	outcome          record.Outcome
	errContains      string
	stripped         int           // usage-only blocks StripUsage removes
	prefill          time.Duration // llama.cpp timings.prompt_ms; 0: none
}

var files = []struct {
	file   string
	stream bool
	want   want
}{
	{"llamacpp_chat_stream_nousage.txt", true, want{events: 4, completion: 4, completionSource: record.SourceCounted, cached: 14,
		responseID: "chatcmpl-Vi7MeyElvGo2UcTETVnEfdt3DpNSqRlu", outcome: record.OK, prefill: 6955 * time.Microsecond}},
	{"llamacpp_chat_stream_usage.txt", true, want{events: 4, completion: 4, completionSource: record.SourceUsage, prompt: 15,
		promptSource: record.SourceUsage, cached: 14, responseID: "chatcmpl-yW4nY16yANOg1FMnqJXaD6dmZVl48CMo", outcome: record.OK, prefill: 20684 * time.Microsecond, stripped: 1}},
	// llama.cpp puts usage on the last completions event even without include_usage.
	{"llamacpp_completions_stream_nousage.txt", true, want{events: 3, completion: 3, completionSource: record.SourceUsage, prompt: 7,
		promptSource: record.SourceUsage, cached: 6, responseID: "chatcmpl-6DduH4Oa8CZmrKRluWEGF8E4X79C4o5k", outcome: record.OK, prefill: 12208 * time.Microsecond}},
	{"llamacpp_completions_stream_usage.txt", true, want{events: 4, completion: 4, completionSource: record.SourceUsage, prompt: 7,
		promptSource: record.SourceUsage, cached: 0, responseID: "chatcmpl-yJwurTj12IY8AzezOjvSe0jXTnAnFUw4", outcome: record.OK, prefill: 5207 * time.Microsecond}},
	// Ollama repeats the role on every delta: each delta with content is a token.
	{"ollama_chat_stream_usage.txt", true, want{events: 6, completion: 6, completionSource: record.SourceUsage, prompt: 15,
		promptSource: record.SourceUsage, responseID: "chatcmpl-348", outcome: record.OK, stripped: 1}},
	{"ollama_chat_stream_usage_long.txt", true, want{events: 100, completion: 100, completionSource: record.SourceUsage, prompt: 2625,
		promptSource: record.SourceUsage, responseID: "chatcmpl-133", outcome: record.OK, stripped: 1}},
	{"vllm_chat_continuous.txt", true, want{events: 5, tokens: []int32{1, 2, 1, 3, 1}, completion: 8, completionSource: record.SourceUsage,
		prompt: 40, promptSource: record.SourceUsage, cached: 32, responseID: "chatcmpl-9c1d7e3f5a2b4c6d8e0f1a3b5c7d9e1f", outcome: record.OK, stripped: 1}},
	// Usage counts 14 tokens in 6 events (tool-call arguments come several
	// tokens to an event, unannounced): the 8 extra tokens go to the events
	// after the longest gaps, so the events carry usage's 14.
	{"vllm_chat_tools.txt", true, want{events: 6, anyTokens: true, completion: 14, completionSource: record.SourceUsage, prompt: 120,
		promptSource: record.SourceUsage, responseID: "chatcmpl-4e6f8a0b2c4d6e8f0a1b2c3d4e5f6a7b", outcome: record.OK, stripped: 1}},
	{"vllm_completions_usage.txt", true, want{events: 4, completion: 4, completionSource: record.SourceUsage, prompt: 9,
		promptSource: record.SourceUsage, responseID: "cmpl-2b4d6f8a0c1e3a5c7e9b1d3f5a7c9e1b", outcome: record.OK, stripped: 1}},
	{"vllm_error_event.txt", true, want{events: 2, completion: 2, completionSource: record.SourceCounted,
		responseID: "chatcmpl-0f1e2d3c4b5a69788796a5b4c3d2e1f0", outcome: record.EngineErr, errContains: "engine error event: The engine ran out of KV cache blocks"}},
	{"vllm_broken.txt", true, want{events: 3, completion: 3, completionSource: record.SourceCounted,
		responseID: "chatcmpl-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", outcome: record.Broken, errContains: "closed before [DONE] after 3 token events"}},
	{"vllm_malformed.txt", true, want{events: 2, completion: 2, completionSource: record.SourceCounted,
		responseID: "chatcmpl-5f4e3d2c1b0a99887766554433221100", outcome: record.Malformed, errContains: "malformed event (not a JSON object): {\"id\""}},
	{"llamacpp_chat_nonstream.json", false, want{completion: 5, completionSource: record.SourceUsage, prompt: 15, promptSource: record.SourceUsage,
		cached: 14, responseID: "chatcmpl-TfSzAKO4ytm5DpdqV0GcZHEbxR0WTsJJ", outcome: record.OK, prefill: 2176 * time.Microsecond}},
	{"llamacpp_completions_nonstream.json", false, want{completion: 5, completionSource: record.SourceUsage, prompt: 7, promptSource: record.SourceUsage,
		cached: 6, responseID: "chatcmpl-ZcxoTh7qUMzoXbhZnQdD1MT3xoVT9Jia", outcome: record.OK, prefill: 1626 * time.Microsecond}},
}

func check(t *testing.T, rec *record.Record, w want, done bool) {
	t.Helper()
	blame := record.BlameEngine
	if w.outcome == record.OK {
		blame = record.BlameNone
	}
	var tokens []int32
	if rec.Tokens != nil && !w.anyTokens {
		tokens = rec.Tokens
	}
	if w.anyTokens && rec.ArrivedTokens() != w.completion {
		t.Fatalf("events carry %d tokens, want usage's %d", rec.ArrivedTokens(), w.completion)
	}
	got := fmt.Sprint(rec.Events(), tokens, rec.CompletionTokens, rec.CompletionSource, rec.PromptTokens, rec.PromptSource,
		rec.CachedTokens, rec.ResponseID, rec.Outcome, rec.Blame)
	exp := fmt.Sprint(w.events, w.tokens, w.completion, w.completionSource, w.prompt, w.promptSource,
		w.cached, w.responseID, w.outcome, blame)
	if got != exp {
		t.Fatalf("record\n got %s\nwant %s", got, exp)
	}
	if rec.EnginePrefill != w.prefill || rec.EnginePrefillSet != (w.prefill > 0) {
		t.Fatalf("engine prefill %v (set %v), want %v", rec.EnginePrefill, rec.EnginePrefillSet, w.prefill)
	}
	if !strings.Contains(rec.Error, w.errContains) || (w.errContains == "") != (rec.Error == "") {
		t.Fatalf("Error = %q, want it to contain %q", rec.Error, w.errContains)
	}
	// End is the arrival of [DONE] where it came, else the close (1 h).
	if last, ok := rec.Last(); rec.Stream && done {
		if rec.End >= time.Hour || (ok && rec.End < last) {
			t.Fatalf("End = %v, want the [DONE] read's arrival (last token %v)", rec.End, last)
		}
	} else if rec.End != time.Hour {
		t.Fatalf("End = %v, want 1h", rec.End)
	}
}

// TestEngineStreams measures every capture under every chunking, written
// and forwarded, and checks the record each time.
func TestEngineStreams(t *testing.T) {
	s := NewStream(record.NewClock())
	for _, f := range files {
		t.Run(f.file, func(t *testing.T) {
			body := load(t, f.file)
			for _, cuts := range cutSets(body, uint64(len(body))) {
				done := bytes.Contains(body, []byte("data: [DONE]"))
				rec, _ := measure(s, body, f.stream, cuts, false, nil)
				check(t, rec, f.want, done)
				if f.stream {
					rec, _ = measure(s, body, f.stream, cuts, true, nil)
					check(t, rec, f.want, done)
				}
			}
		})
	}
}

// TestTTFTNotFromRoleChunk: the role-only chunk (content null or "") is not
// a token, whether it arrives alone or in the read with the first token.
func TestTTFTNotFromRoleChunk(t *testing.T) {
	for _, file := range []string{"llamacpp_chat_stream_usage.txt", "vllm_chat_continuous.txt"} {
		body := load(t, file)
		first := bytes.Index(body, []byte("\n\n")) + 2
		second := first + bytes.Index(body[first:], []byte("\n\n")) + 2
		s := NewStream(record.NewClock())

		// Role chunk alone at 10 ms, first token at 50 ms.
		rec := &record.Record{Stream: true, Sent: 5 * time.Millisecond}
		s.Begin(rec)
		s.WriteAt(body[:first], 10*time.Millisecond)
		if rec.Events() != 0 {
			t.Fatalf("%s: the role chunk counted as a token event", file)
		}
		s.WriteAt(body[first:], 50*time.Millisecond)
		s.EndAt(nil, "", 60*time.Millisecond)
		if ttft, ok := rec.TTFT(); !ok || ttft != 45*time.Millisecond || rec.First != 50*time.Millisecond {
			t.Fatalf("%s: TTFT %v (ok %v), want 45ms from the first token", file, ttft, ok)
		}
		if rec.End != 50*time.Millisecond {
			t.Fatalf("%s: End %v, want 50ms, the arrival of [DONE] (the close came at 60ms)", file, rec.End)
		}

		// llama.cpp sends the role chunk together with the first token.
		rec = &record.Record{Stream: true}
		s.Begin(rec)
		s.WriteAt(body[:second], 30*time.Millisecond)
		s.WriteAt(body[second:], 40*time.Millisecond)
		s.EndAt(nil, "", 50*time.Millisecond)
		if rec.First != 30*time.Millisecond || rec.Arrivals[1] != 40*time.Millisecond {
			t.Fatalf("%s: first %v arrivals %v", file, rec.First, rec.Arrivals)
		}
	}
}

// TestContinuousUsage: per-event tokens are the growth of completion_tokens
// since the previous token event, so a multi-token event is not one token.
func TestContinuousUsage(t *testing.T) {
	rec, _ := measure(NewStream(record.NewClock()), load(t, "vllm_chat_continuous.txt"), true, nil, false, nil)
	if rec.ArrivedTokens() != 8 || rec.Events() != 5 || rec.CompletionTokens != 8 {
		t.Fatalf("arrived %d tokens in %d events, usage %d; want 8 in 5, 8", rec.ArrivedTokens(), rec.Events(), rec.CompletionTokens)
	}
	// A stream whose only usage rides on its last token event counts that
	// event as one token, not as the whole completion.
	body := "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"text\":\"b\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"
	rec, _ = measure(NewStream(record.NewClock()), []byte(body), true, nil, false, nil)
	if rec.Tokens != nil || rec.Events() != 2 || rec.CompletionTokens != 2 || rec.CompletionSource != record.SourceUsage {
		t.Fatalf("final usage on a token event: tokens %v events %d completion %d", rec.Tokens, rec.Events(), rec.CompletionTokens)
	}
}

// TestSGLangMetaInfo: SGLang's native stream carries cumulative text and
// meta_info; growth of completion_tokens is a token event.
func TestSGLangMetaInfo(t *testing.T) {
	body := `data: {"text":"Hi","meta_info":{"id":"abc","prompt_tokens":7,"completion_tokens":1,"cached_tokens":4}}` + "\n\n" +
		`data: {"text":"Hi there, you","meta_info":{"id":"abc","prompt_tokens":7,"completion_tokens":4,"cached_tokens":4}}` + "\n\n" +
		`data: {"text":"Hi there, you","meta_info":{"id":"abc","prompt_tokens":7,"completion_tokens":4,"cached_tokens":4,"finish_reason":{"type":"length"}}}` + "\n\n" +
		"data: [DONE]\n\n"
	rec, _ := measure(NewStream(record.NewClock()), []byte(body), true, nil, false, nil)
	if fmt.Sprintf("%d %v %d %d %d %s", rec.Events(), rec.Tokens, rec.CompletionTokens, rec.PromptTokens, rec.CachedTokens, rec.Outcome) != "2 [1 3] 4 7 4 ok" {
		t.Fatalf("got events %d tokens %v completion %d prompt %d cached %d %s", rec.Events(), rec.Tokens, rec.CompletionTokens, rec.PromptTokens, rec.CachedTokens, rec.Outcome)
	}
}

func TestNotTokenEvents(t *testing.T) {
	for _, data := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{}}]}`,
		`{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
		`{"choices":[{"index":0,"text":""}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":null}}]}`,
	} {
		rec, _ := measure(NewStream(record.NewClock()), []byte("data: "+data+"\n\ndata: [DONE]\n\n"), true, nil, false, nil)
		if rec.Events() != 0 || rec.Outcome != record.OK {
			t.Errorf("%s: %d token events, outcome %s; want none, ok", data, rec.Events(), rec.Outcome)
		}
	}
}

func TestOutcomes(t *testing.T) {
	stream := load(t, "vllm_chat_tools.txt")
	cut := stream[:len(stream)-len("data: [DONE]\n\n")]
	tests := []struct {
		name    string
		status  int
		body    string
		err     error
		blame   record.Blame
		outcome record.Outcome
		wblame  record.Blame
		errHas  string
	}{
		{"ok", 200, string(stream), nil, "", record.OK, "", ""},
		{"done then client left", 200, string(stream), context.Canceled, record.BlameClient, record.OK, "", ""},
		{"closed before done", 200, string(cut), nil, "", record.Broken, record.BlameEngine, "closed before [DONE] after 6 token events"},
		{"read error", 200, string(cut), io.ErrUnexpectedEOF, "", record.Broken, record.BlameEngine, "unexpected EOF"},
		{"client cancelled", 200, string(cut), context.Canceled, record.BlameClient, record.Cancelled, record.BlameClient, "context canceled"},
		{"load generator cancelled", 200, string(cut), fmt.Errorf("reading body: %w", context.Canceled), "", record.Cancelled, record.BlameClient, "context canceled"},
		{"idle timeout", 200, string(cut), os.ErrDeadlineExceeded, "", record.Timeout, record.BlameEngine, "timeout"},
		{"proxy fault", 200, string(cut), errors.New("capture disk full"), record.BlameTokentap, record.Broken, record.BlameTokentap, "capture disk full"},
		{"http 400 with body", 400, `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":70000,"n_ctx":16384}}`,
			nil, "", record.HTTPError, record.BlameClient, `HTTP 400 from the engine: {"error":{"code":400,"message":"the request exceeds the available context size"`},
		{"http 404: the client's unknown model", 404, `{"error":{"message":"The model gpt-9 does not exist."}}`, nil, "", record.HTTPError, record.BlameClient, "HTTP 404 from the engine"},
		{"http 401: the client's key", 401, "", nil, "", record.HTTPError, record.BlameClient, "HTTP 401"},
		{"http 429: the engine is too busy", 429, "", nil, "", record.HTTPError, record.BlameEngine, "HTTP 429"},
		{"http 408: the engine too slow", 408, "", nil, "", record.HTTPError, record.BlameEngine, "HTTP 408"},
		{"http 503 empty", 503, "", nil, "", record.HTTPError, record.BlameEngine, "HTTP 503 from the engine"},
		{"no response", 0, "", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "", record.Connect, record.BlameEngine, "connection refused"},
		{"not sse", 200, "<html>\n<body>Bad gateway</body>\n</html>\n", nil, "", record.Broken, record.BlameEngine, "it began: <html> <body>Bad gateway"},
		{"error event type", 200, "event: error\ndata: overloaded\n\n", nil, "", record.EngineErr, record.BlameEngine, "engine error event: overloaded"},
		{"object error", 200, `data: {"object":"error","message":"bad","type":"BadRequestError","code":400}` + "\n\n", nil, "", record.EngineErr, record.BlameEngine, "engine error event: bad (BadRequestError, code 400)"},
		{"llama.cpp context exceeded mid-stream", 200, string(stream[:bytes.Index(stream, []byte("\n\n"))+2]) + `data: {"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}` + "\n\n",
			nil, "", record.EngineErr, record.BlameEngine, "engine error event: Context size has been exceeded. (server_error, code 500)"},
		{"not json", 200, "data: hello\n\ndata: [DONE]\n\n", nil, "", record.Malformed, record.BlameEngine, "malformed event (not a JSON object): hello"},
		{"json array", 200, "data: [1,2]\n\ndata: [DONE]\n\n", nil, "", record.Malformed, record.BlameEngine, "malformed event"},
	}
	s := NewStream(record.NewClock())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &record.Record{Stream: true}
			s.Begin(rec)
			if tt.status != 0 {
				s.Status(tt.status)
			}
			s.Write([]byte(tt.body))
			s.End(tt.err, tt.blame)
			if rec.Outcome != tt.outcome || rec.Blame != tt.wblame || !strings.Contains(rec.Error, tt.errHas) || rec.Status != tt.status {
				t.Fatalf("got %s/%q status %d error %q; want %s/%q %d containing %q", rec.Outcome, rec.Blame, rec.Status, rec.Error, tt.outcome, tt.wblame, tt.status, tt.errHas)
			}
			if rec.End <= 0 {
				t.Fatalf("End not set")
			}
		})
	}
}

func TestNonStreamBodies(t *testing.T) {
	s := NewStream(record.NewClock())
	for _, tt := range []struct {
		name, body string
		outcome    record.Outcome
		completion int
	}{
		{"usage", `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, record.OK, 2},
		{"no usage", `{"id":"x","choices":[{"message":{"content":"hi"}}]}`, record.OK, 0},
		{"truncated", `{"id":"x","choices":[{"mess`, record.Malformed, 0},
		{"error object", `{"error":{"message":"boom"}}`, record.EngineErr, 0},
		{"empty", ``, record.Broken, 0},
	} {
		rec := &record.Record{Stream: false, PromptTokens: 99, PromptSource: record.SourceCounted}
		s.Begin(rec)
		s.Status(200)
		for i := 0; i < len(tt.body); i += 5 {
			s.Write([]byte(tt.body[i:min(i+5, len(tt.body))]))
		}
		s.End(nil, "")
		if rec.Outcome != tt.outcome || rec.CompletionTokens != tt.completion || rec.Events() != 0 {
			t.Errorf("%s: %s completion %d events %d error %q", tt.name, rec.Outcome, rec.CompletionTokens, rec.Events(), rec.Error)
		}
		if tt.name == "no usage" && (rec.PromptTokens != 99 || rec.PromptSource != record.SourceCounted || rec.CompletionSource != record.SourceNone) {
			t.Errorf("no usage: the caller's prompt count was not kept: %d %s", rec.PromptTokens, rec.PromptSource)
		}
	}
}

// usageOnlyBlocks removes the usage-only events from an LF or CRLF stream
// made of whole blocks, as StripUsage should.
func stripExpected(body []byte) ([]byte, int) {
	sep := []byte("\n\n")
	if bytes.Contains(body, []byte("\r\n")) {
		sep = []byte("\r\n\r\n")
	}
	var out []byte
	n := 0
	for len(body) > 0 {
		i := bytes.Index(body, sep)
		block := body
		if i >= 0 {
			block = body[:i+len(sep)]
		}
		body = body[len(block):]
		if isUsageOnly(bytes.TrimSpace(bytes.TrimPrefix(block, []byte("data:")))) {
			n++
			continue
		}
		out = append(out, block...)
	}
	return out, n
}

// isUsageOnly is the test's own reading of a usage-only chunk, through
// encoding/json (see oracle): a JSON object with "choices": [] and a
// "usage" object, and no error.
func isUsageOnly(data []byte) bool {
	c, _, ok := oracle(data)
	return ok && !c.isError() && c.usage.set && c.choices == 0
}

// TestStripUsage: with StripUsage on, the client gets the stream minus
// exactly the usage-only chunk, byte for byte, under every chunking, with
// LF and CRLF line ends; with it off, the bytes unchanged.
func TestStripUsage(t *testing.T) {
	s := NewStream(record.NewClock())
	for _, f := range files {
		if !f.stream {
			continue
		}
		for _, crlf := range []bool{false, true} {
			body := load(t, f.file)
			if crlf {
				body = bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n"))
			}
			exp, n := stripExpected(body)
			if n != f.want.stripped {
				t.Fatalf("%s: test expects %d usage-only blocks, table says %d", f.file, n, f.want.stripped)
			}
			for _, cuts := range cutSets(body, 7) {
				_, out := measure(s, body, true, cuts, true, nil)
				if !bytes.Equal(out, exp) {
					t.Fatalf("%s crlf=%v cuts %v: forwarded\n%q\nwant\n%q", f.file, crlf, cuts, out, exp)
				}
				s.Begin(&record.Record{Stream: true})
				var plain []byte
				for _, p := range reads(body, cuts) {
					plain = s.Forward(p, plain)
				}
				if !bytes.Equal(plain, body) {
					t.Fatalf("%s: StripUsage off changed the bytes", f.file)
				}
			}
		}
	}
}

// TestStripUsageHoldsPartialEvent: a partial trailing event is held back
// until complete, complete events are forwarded at once.
func TestStripUsageHoldsPartialEvent(t *testing.T) {
	s := NewStream(record.NewClock())
	s.Begin(&record.Record{Stream: true})
	s.StripUsage(true)
	out := s.Forward([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choi"), nil)
	if string(out) != "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" {
		t.Fatalf("forwarded %q", out)
	}
	out = s.Forward([]byte("ces\":[],\"usage\":{\"completion_tokens\":1}}\n\n: ping\n\ndata: [DONE]\n\n"), out[:0])
	if string(out) != ": ping\n\ndata: [DONE]\n\n" {
		t.Fatalf("forwarded %q", out)
	}
	// An unfinished tail is handed over by Flush.
	out = s.Forward([]byte("data: {\"cho"), out[:0])
	if len(out) != 0 || string(s.Flush(nil)) != "data: {\"cho" {
		t.Fatalf("tail not held back and flushed")
	}
}

// TestHugeEventPassesUnheld: with usage removal on, an event longer than
// maxHeld is passed on as it arrives, never held whole (which cost a copy
// of all of it per read: quadratic in its size), byte for byte; the
// measurement is the same; a usage chunk after it is still removed, and
// one grown past maxHeld passes whole rather than cut.
func TestHugeEventPassesUnheld(t *testing.T) {
	content := strings.Repeat("x", 4<<20)
	big := `data: {"choices":[{"index":0,"delta":{"content":"` + content + `"}}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}` + "\n\n"
	fatUsage := `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2},"pad":"` + strings.Repeat(" ", 2*maxHeld) + `"}` + "\n\n"
	for _, tt := range []struct {
		name, body, want string
	}{
		{"big event", big + usage + "data: [DONE]\n\n", big + "data: [DONE]\n\n"},
		{"fat usage chunk", big + fatUsage + "data: [DONE]\n\n", big + fatUsage + "data: [DONE]\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(record.NewClock())
			rec := &record.Record{Stream: true}
			s.Begin(rec)
			s.StripUsage(true)
			var out []byte
			held := 0
			for b := []byte(tt.body); len(b) > 0; {
				n := min(len(b), 16<<10)
				out = s.Forward(b[:n], out)
				b = b[n:]
				held = max(held, len(s.Held(nil)))
			}
			out = s.Flush(out)
			if string(out) != tt.want {
				t.Fatalf("forwarded %d bytes, want %d (the event and [DONE], usage removed if short)", len(out), len(tt.want))
			}
			if held > maxHeld+16<<10 {
				t.Errorf("held back up to %d bytes of an unfinished event, want at most %d", held, maxHeld+16<<10)
			}
			s.End(nil, record.BlameNone)
			if rec.Outcome != record.OK || rec.CompletionTokens != 2 || rec.Events() != 1 {
				t.Errorf("record: %s, %d tokens, %d events; want ok, 2 (usage), 1", rec.Outcome, rec.CompletionTokens, rec.Events())
			}
		})
	}
}

// BenchmarkForwardHugeEvent: a 15 MB event forwarded in 16 KiB reads with
// usage removal on, the case whose cost was quadratic; its time per byte
// must match a small event's.
func BenchmarkForwardHugeEvent(b *testing.B) {
	body := []byte(`data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 15<<20) + `"}}]}` + "\n\n")
	s := NewStream(record.NewClock())
	out := make([]byte, 0, 64<<10)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		s.Begin(&record.Record{Stream: true})
		s.StripUsage(true)
		for p := body; len(p) > 0; {
			n := min(len(p), 16<<10)
			out = s.Forward(p[:n], out[:0])
			p = p[n:]
		}
	}
}

func FuzzForward(f *testing.F) {
	for _, fl := range files {
		if fl.stream {
			b := load(f, fl.file)
			f.Add(b, uint64(len(b)))
		}
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: x\r\r"), uint64(3))
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		var sc sse.Scanner
		sc.Feed(body)
		var want []string
		done := false
		for ev, ok := sc.Next(); ok; ev, ok = sc.Next() {
			if !done && len(ev.Type) == 0 && isUsageOnly(ev.Data) {
				continue
			}
			done = done || ev.Done()
			want = append(want, string(ev.Type)+"|"+string(ev.Data))
		}
		if sc.Err() != nil {
			t.Skip("beyond the scanner's limit") // inputs are far smaller; never happens
		}
		if len(body) > maxHeld {
			return // an event this long may pass unstripped: TestHugeEventPassesUnheld
		}
		s := NewStream(record.NewClock())
		r := rand.New(rand.NewPCG(seed, 1))
		var cuts []int
		for at := 0; at < len(body); {
			at += 1 + r.IntN(1+len(body)/3)
			cuts = append(cuts, at)
		}
		for _, c := range [][]int{nil, cuts} {
			recW, _ := measure(s, body, true, c, false, nil)
			recF, out := measure(s, body, true, c, true, nil)
			var sc2 sse.Scanner
			sc2.Feed(out)
			var got []string
			for ev, ok := sc2.Next(); ok; ev, ok = sc2.Next() {
				got = append(got, string(ev.Type)+"|"+string(ev.Data))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("cuts %v: forwarded events\n%q\nwant\n%q", c, got, want)
			}
			if !bytes.Contains(body, []byte("\r")) {
				if exp, _ := stripExpectedLF(body); exp != nil && !bytes.Equal(out, exp) {
					t.Fatalf("cuts %v: forwarded\n%q\nwant\n%q", c, out, exp)
				}
			}
			if recW.Events() != recF.Events() || recW.Outcome != recF.Outcome || recW.CompletionTokens != recF.CompletionTokens {
				t.Fatalf("Forward measured differently from Write")
			}
		}
	})
}

// stripExpectedLF is stripExpected for arbitrary LF input: it walks the
// events with the scanner and cuts out the usage-only ones' byte ranges.
func stripExpectedLF(body []byte) ([]byte, bool) {
	var sc sse.Scanner
	sc.Feed(body)
	var out []byte
	prev := int64(0)
	done := false
	for ev, ok := sc.Next(); ok; ev, ok = sc.Next() {
		if !done && len(ev.Type) == 0 && isUsageOnly(ev.Data) {
			out = append(out, body[prev:ev.Start]...)
			prev = ev.End
		}
		done = done || ev.Done()
	}
	return append(out, body[prev:]...), true
}

// vllmStream builds a realistic vLLM chat stream of n token events
// (~250 bytes each), with continuous usage when cont is set.
func vllmStream(n int, cont bool) [][]byte {
	var out [][]byte
	ev := func(delta string, c int, fin string) []byte {
		u := ""
		if cont {
			u = fmt.Sprintf(`,"usage":{"prompt_tokens":16384,"total_tokens":%d,"completion_tokens":%d}`, 16384+c, c)
		}
		return fmt.Appendf(nil, `data: {"id":"chatcmpl-8f3a2c1e9b7d4f6a8c0e2b4d6f8a0c2e","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]%s}`+"\n\n", delta, fin, u)
	}
	out = append(out, ev(`{"role":"assistant","content":""}`, 0, "null"))
	words := []string{" the", " model", " answers", ",", " token", " by", " token", "."}
	for i := 0; i < n; i++ {
		out = append(out, ev(fmt.Sprintf(`{"content":"%s"}`, words[i%len(words)]), i+1, "null"))
	}
	out = append(out, ev(`{"content":""}`, n, `"length"`))
	out = append(out, []byte(fmt.Sprintf(`data: {"id":"chatcmpl-8f3a2c1e9b7d4f6a8c0e2b4d6f8a0c2e","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":16384,"total_tokens":%d,"completion_tokens":%d}}`+"\n\n", 16384+n, n)))
	return append(out, []byte("data: [DONE]\n\n"))
}

func TestNoAllocsPerEvent(t *testing.T) {
	for _, cont := range []bool{false, true} {
		evs := vllmStream(8, cont)
		s := NewStream(record.NewClock())
		rec := &record.Record{Stream: true, Arrivals: make([]time.Duration, 0, 1<<12)}
		s.Begin(rec)
		s.Write(evs[0])
		s.Write(evs[1])
		i := 0
		a := testing.AllocsPerRun(1000, func() {
			s.Write(evs[1+i%8])
			i++
		})
		if a != 0 {
			t.Errorf("continuous usage %v: %v allocs per event, want 0", cont, a)
		}
		if rec.Events() < 1000 {
			t.Fatalf("only %d events counted", rec.Events())
		}
		// Forward with StripUsage: no allocation either once dst has room.
		dst := make([]byte, 0, 4096)
		s.StripUsage(true)
		a = testing.AllocsPerRun(1000, func() {
			dst = s.Forward(evs[1+i%8], dst[:0])
			i++
		})
		if a != 0 {
			t.Errorf("continuous usage %v: Forward: %v allocs per event, want 0", cont, a)
		}
	}
}

// TestOverHTTP measures a stream served over real HTTP on 127.0.0.1, flushed
// event by event, and a connection the server breaks mid-stream.
func TestOverHTTP(t *testing.T) {
	body := load(t, "vllm_chat_continuous.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, block := range bytes.SplitAfter(body, []byte("\n\n")) {
			if r.URL.Path == "/cut" && bytes.Contains(block, []byte(`"content":" 42"`)) {
				conn, _, err := rc.Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			w.Write(block)
			rc.Flush()
			time.Sleep(2 * time.Millisecond)
		}
	}))
	defer srv.Close()
	clock := record.NewClock()
	s := NewStream(clock)
	for _, path := range []string{"/ok", "/cut"} {
		rec := &record.Record{Stream: true, API: record.Chat, Sent: clock.Now()}
		s.Begin(rec)
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		s.Status(resp.StatusCode)
		s.End(drain(s, resp.Body, 4096), "")
		if !slices.IsSorted(rec.Arrivals) || rec.First < rec.Sent || rec.End < rec.Arrivals[len(rec.Arrivals)-1] {
			t.Fatalf("%s: timestamps out of order: sent %v arrivals %v end %v", path, rec.Sent, rec.Arrivals, rec.End)
		}
		switch path {
		case "/ok":
			if rec.Outcome != record.OK || rec.Events() != 5 || rec.ArrivedTokens() != 8 || rec.CompletionTokens != 8 {
				t.Fatalf("/ok: %s, %d events, %d tokens", rec.Outcome, rec.Events(), rec.ArrivedTokens())
			}
		case "/cut":
			if rec.Outcome != record.Broken || rec.Blame != record.BlameEngine || rec.Events() != 4 {
				t.Fatalf("/cut: %s/%s %q, %d events", rec.Outcome, rec.Blame, rec.Error, rec.Events())
			}
		}
	}
}

// BenchmarkStream measures the tap's whole per-event path — scan, classify,
// timestamp, append — on realistic vLLM chunks, one event per read. One op
// is one event; a stream is 1,024 events, Begin/End included.
func BenchmarkStream(b *testing.B) {
	for _, cont := range []bool{false, true} {
		name := "include_usage"
		if cont {
			name = "continuous_usage"
		}
		b.Run(name, func(b *testing.B) {
			evs := vllmStream(1024, cont)
			size := 0
			for _, e := range evs {
				size += len(e)
			}
			s := NewStream(record.NewClock())
			rec := &record.Record{Stream: true}
			s.Begin(rec)
			b.SetBytes(int64(size / len(evs)))
			b.ReportAllocs()
			i := 0
			cpu := benchcpu.Now()
			for b.Loop() {
				s.Write(evs[i])
				i++
				if i == len(evs) {
					s.End(nil, "")
					if rec.Outcome != record.OK {
						b.Fatalf("outcome %s: %s", rec.Outcome, rec.Error)
					}
					rec.Reset()
					rec.Stream = true
					s.Begin(rec)
					i = 0
				}
			}
			benchcpu.Report(b, cpu)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkClassify compares the tap's JSON reader with fastjson (a reused
// Parser, the usual fast choice) on one realistic vLLM chunk.
func BenchmarkClassify(b *testing.B) {
	data := bytes.TrimSuffix(bytes.TrimPrefix(vllmStream(1, true)[1], []byte("data: ")), []byte("\n\n"))
	b.Run("reader", func(b *testing.B) {
		var r jreader
		var c chunk
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		cpu := benchcpu.Now()
		for b.Loop() {
			if !parseChunk(&r, data, &c) || !c.tok || !c.usage.set {
				b.Fatal("not classified")
			}
		}
		benchcpu.Report(b, cpu)
	})
	b.Run("fastjson", func(b *testing.B) {
		var p fastjson.Parser
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		cpu := benchcpu.Now()
		for b.Loop() {
			v, err := p.ParseBytes(data)
			if err != nil {
				b.Fatal(err)
			}
			tok := false
			for _, c := range v.GetArray("choices") {
				if d := c.Get("delta"); d != nil {
					tok = tok || len(d.GetStringBytes("content")) > 0 || len(d.GetStringBytes("reasoning_content")) > 0 ||
						len(d.GetStringBytes("reasoning")) > 0 || d.Exists("tool_calls")
				}
				tok = tok || len(c.GetStringBytes("text")) > 0
			}
			u := v.Get("usage")
			if !tok || u == nil || u.GetInt("completion_tokens") != 1 || v.Exists("error") {
				b.Fatal("not classified")
			}
		}
		benchcpu.Report(b, cpu)
	})
}

// TestLargeEvents: an event far beyond 64 KiB (a huge tool-call argument or
// logprobs) is one token event; beyond the scanner's 16 MiB it is a clear
// Malformed outcome, and forwarding passes the bytes through unchanged.
func TestLargeEvents(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	ok := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + big + "\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"
	huge := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("y", sse.MaxEvent) + "\"}}]}\n\ndata: [DONE]\n\n"
	s := NewStream(record.NewClock())
	for _, tt := range []struct {
		name, body string
		outcome    record.Outcome
		events     int
	}{
		{"3 MiB event", ok, record.OK, 1},
		{"beyond 16 MiB", huge, record.Malformed, 0},
	} {
		rec := &record.Record{Stream: true}
		s.Begin(rec)
		s.Status(200)
		s.StripUsage(true)
		var out []byte
		for off := 0; off < len(tt.body); off += 64 << 10 {
			out = s.Forward([]byte(tt.body[off:min(off+64<<10, len(tt.body))]), out)
		}
		out = s.Flush(out)
		s.End(nil, "")
		if rec.Outcome != tt.outcome || rec.Events() != tt.events {
			t.Fatalf("%s: %s (%q), %d events", tt.name, rec.Outcome, rec.Error, rec.Events())
		}
		if tt.outcome == record.Malformed && (!strings.Contains(rec.Error, "larger than") || string(out) != tt.body) {
			t.Fatalf("%s: error %q; forwarded %d of %d bytes", tt.name, rec.Error, len(out), len(tt.body))
		}
		if tt.outcome == record.OK && !strings.HasSuffix(string(out), "}\n\ndata: [DONE]\n\n") || len(out) > len(tt.body) {
			t.Fatalf("%s: forwarded %d bytes", tt.name, len(out))
		}
	}
}

// TestBodiesHeldAreBounded: non-streaming bodies held at once for their
// usage stay within MaxBodies; one that does not fit is passed whole and
// counted unread, and the room comes back when a body is read.
func TestBodiesHeldAreBounded(t *testing.T) {
	clock := record.NewClock()
	piece := bytes.Repeat([]byte("x"), 1<<20)
	var streams []*Stream
	unread := UnreadBodies()
	for i := 0; i < MaxBodies/(8<<20)+2; i++ {
		s := NewStream(clock)
		s.Begin(&record.Record{})
		s.Status(200)
		for range 6 { // 6 MiB each, held as 8 MiB of capacity
			s.Write(piece)
		}
		streams = append(streams, s)
		if held := bodiesHeld.Load(); held > MaxBodies {
			t.Fatalf("%d bodies hold %d bytes, over MaxBodies", i+1, held)
		}
	}
	if UnreadBodies() == unread {
		t.Fatal("no body was left unread past MaxBodies")
	}
	for _, s := range streams {
		s.End(nil, record.BlameNone)
	}
	if held := bodiesHeld.Load(); held != 0 {
		t.Fatalf("after End, bodies still hold %d bytes", held)
	}
}
