package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Target is the engine requests go to.
type Target struct {
	// BaseURL is the engine's address, e.g. http://127.0.0.1:8000 (a
	// trailing /v1 is accepted and removed).
	BaseURL string
	// APIKey is sent as "Authorization: Bearer KEY" when set. It is never
	// logged or stored in a record or result.
	APIKey string
	// Model is the model name requests ask for.
	Model string
	// API chooses /v1/chat/completions (record.Chat) or /v1/completions.
	API record.API
	// IdleTimeout gives a request up when no byte of its response arrives
	// for this long (headers included): the engine hung or died without
	// closing. It is no whole-request deadline; long streams run as long
	// as bytes keep coming. 0 means DefaultIdleTimeout, negative none.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is long enough for a cold 248K-token prefill on a small
// GPU (seed 002 shows 211 s at 128K) and short enough that a hung engine
// does not hold a matrix forever.
const DefaultIdleTimeout = 10 * time.Minute

// Idle returns the target's effective idle timeout, 0 for none.
func (t Target) Idle() time.Duration {
	switch {
	case t.IdleTimeout == 0:
		return DefaultIdleTimeout
	case t.IdleTimeout < 0:
		return 0
	}
	return t.IdleTimeout
}

// Base returns BaseURL without a trailing slash or /v1.
func (t Target) Base() string {
	b := strings.TrimRight(t.BaseURL, "/")
	b = strings.TrimSuffix(b, "/v1")
	return b
}

// Endpoint is the URL the target's API posts to.
func (t Target) Endpoint() string {
	if t.API == record.Completions {
		return t.Base() + "/v1/completions"
	}
	return t.Base() + "/v1/chat/completions"
}

// Request is the shape of one request; Body turns it into JSON.
type Request struct {
	Prompt    string
	MaxTokens int
	Stream    bool
	// IgnoreEOS sends "ignore_eos": true so the output is not cut short by the
	// model (METHOD.md §1); MinTokens also sends "min_tokens" = MaxTokens.
	IgnoreEOS bool
	MinTokens bool
	// ContinuousUsage adds stream_options.continuous_usage_stats (vLLM):
	// usage on every event, so the tap counts each event's tokens.
	ContinuousUsage bool
	// Extra fields are merged into the body (sampling parameters, the
	// scenario's extra request fields). They cannot override the prompt,
	// model, max_tokens or stream settings.
	Extra map[string]any
}

// Body is an encoded request body in three parts: the settings before the
// prompt, the prompt as a JSON string, and what closes the object. Bodies
// that differ only in their settings (a warm-up's max_tokens 1 and the
// decode requests' max output) share the prompt's bytes, so a 248K-token
// prompt is held once per slot however many bodies use it.
type Body struct {
	Head, Prompt, Tail []byte
	// PromptTokens is the prompt's length as the engine counts it, when
	// known (the prompt builder's count); records of requests that end
	// before the engine reports usage (cancelled at a window's end) keep it.
	PromptTokens int
	// MaxTokens is the body's own max_tokens when it differs from its
	// loop's (Options.MaxTokens): a dataset's lines, drawn output lengths.
	// Records say it. 0: the loop's.
	MaxTokens int
}

// Len is the body's length in bytes.
func (b Body) Len() int { return len(b.Head) + len(b.Prompt) + len(b.Tail) }

// Bytes returns the body as one slice (a copy).
func (b Body) Bytes() []byte {
	out := make([]byte, 0, b.Len())
	return append(append(append(out, b.Head...), b.Prompt...), b.Tail...)
}

// Body encodes r as the JSON body of a request to t.
func (t Target) Body(r Request) (Body, error) {
	p, err := encodeJSON(r.Prompt)
	if err != nil {
		return Body{}, err
	}
	return t.Reshape(Body{Prompt: p}, r)
}

// Reshape returns a body with b's prompt and r's settings (r.Prompt is
// ignored); the prompt's bytes are shared, not copied.
func (t Target) Reshape(b Body, r Request) (Body, error) {
	m := make(map[string]any, 8+len(r.Extra))
	for k, v := range r.Extra {
		m[k] = v
	}
	delete(m, "prompt")
	delete(m, "messages")
	if t.Model != "" {
		m["model"] = t.Model
	}
	if r.MaxTokens > 0 {
		m["max_tokens"] = r.MaxTokens
	}
	m["stream"] = r.Stream
	if r.Stream {
		// Usage is always asked for; other stream options the caller gave
		// (Extra) are kept. ContinuousUsage asks vLLM for usage on every
		// event, so a multi-token event (speculative decoding, stream
		// intervals) counts all its tokens (METHOD §2).
		so := map[string]any{}
		if given, ok := r.Extra["stream_options"].(map[string]any); ok {
			for k, v := range given {
				so[k] = v
			}
		}
		so["include_usage"] = true
		if r.ContinuousUsage {
			so["continuous_usage_stats"] = true
		}
		m["stream_options"] = so
	}
	if r.IgnoreEOS {
		m["ignore_eos"] = true
	}
	if r.MinTokens && r.MaxTokens > 0 {
		m["min_tokens"] = r.MaxTokens
	}
	settings, err := encodeJSON(m) // {"k":v,...}, keys sorted
	if err != nil {
		return Body{}, err
	}
	head := append([]byte(nil), settings[:len(settings)-1]...) // drop the closing brace
	if len(head) > 1 {
		head = append(head, ',')
	}
	if t.API == record.Completions {
		head = append(head, `"prompt":`...)
		return Body{Head: head, Prompt: b.Prompt, Tail: []byte("}"), PromptTokens: b.PromptTokens, MaxTokens: b.MaxTokens}, nil
	}
	head = append(head, `"messages":[{"role":"user","content":`...)
	return Body{Head: head, Prompt: b.Prompt, Tail: []byte("}]}"), PromptTokens: b.PromptTokens, MaxTokens: b.MaxTokens}, nil
}

func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode request body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
