package proxy

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// reqInfo is what the proxy reads from an OpenAI request body.
type reqInfo struct {
	valid        bool // the body is a JSON object
	model        string
	stream       bool
	maxTokens    int
	includeUsage bool // stream_options.include_usage is true
	usageOff     bool // stream_options.include_usage is false
	hasOptions   bool // stream_options is present
	optionsNull  bool // stream_options is null (the same as absent)
	duplicate    bool // stream, stream_options or include_usage given twice
}

// wantsInjection reports whether the proxy should ask the engine for usage
// on the client's behalf (and strip it again): a stream whose client did not
// ask for usage. When stream_options is given without include_usage the
// engine's own default decides (vLLM sends usage then, OpenAI does not), so
// the proxy leaves the request alone and the client gets what it would get.
//
// A body that gives one of those fields twice is never changed: parsers
// disagree on which one counts (Python's json and Go's take the last,
// fastjson's Get the first), and the proxy must not decide for the engine.
func (ri reqInfo) wantsInjection() bool {
	return ri.valid && ri.stream && !ri.duplicate && (!ri.hasOptions || ri.optionsNull || ri.usageOff)
}

var parsers fastjson.ParserPool

// inspect reads model, stream, max_tokens (or max_completion_tokens) and
// stream_options.include_usage from a chat or completions request body. A
// body that is not a JSON object gives valid false; the engine will answer
// it with its own error, which the proxy passes on.
func inspect(body []byte) reqInfo {
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return reqInfo{}
	}
	ri := reqInfo{valid: true}
	if m := v.Get("model"); m != nil && m.Type() == fastjson.TypeString {
		ri.model = string(m.GetStringBytes())
	}
	if o, err := v.Object(); err == nil {
		// The last "stream" counts, as the engine's parser reads it.
		o.Visit(func(k []byte, s *fastjson.Value) {
			if string(k) == "stream" {
				ri.stream = s.Type() == fastjson.TypeTrue
			}
		})
	}
	for _, k := range [...]string{"max_tokens", "max_completion_tokens"} {
		if n := v.Get(k); n != nil && n.Type() == fastjson.TypeNumber {
			if i, err := n.Int(); err == nil && i > 0 {
				ri.maxTokens = i
				break
			}
		}
	}
	if so := v.Get("stream_options"); so != nil {
		ri.hasOptions = true
		ri.optionsNull = so.Type() == fastjson.TypeNull
		if iu := so.Get("include_usage"); iu != nil {
			ri.includeUsage = iu.Type() == fastjson.TypeTrue
			ri.usageOff = iu.Type() == fastjson.TypeFalse
		}
		if o, err := so.Object(); err == nil && count(o, "include_usage") > 1 {
			ri.duplicate = true
		}
	}
	if o, err := v.Object(); err == nil && (count(o, "stream") > 1 || count(o, "stream_options") > 1) {
		ri.duplicate = true
	}
	return ri
}

// count is how many members of o have the key k (JSON allows repeats).
func count(o *fastjson.Object, k string) int {
	n := 0
	o.Visit(func(key []byte, _ *fastjson.Value) {
		if string(key) == k {
			n++
		}
	})
	return n
}

var usageOption = []byte(`"stream_options":{"include_usage":true},`)

// injectUsage returns body with stream_options.include_usage set to true, so
// the engine sends its usage chunk at the end of the stream. When the body
// has no stream_options (the usual case) the member is inserted right after
// the opening brace and every other byte stays as the client sent it;
// otherwise the object is re-encoded with include_usage set. ok is false when
// the body cannot take the option (not an object, or stream_options is not an
// object), in which case body is returned unchanged.
func injectUsage(body []byte, ri reqInfo, dst []byte) (out []byte, ok bool) {
	if !ri.valid {
		return body, false
	}
	if !ri.hasOptions {
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return body, false
		}
		dst = append(dst[:0], body[:i+1]...)
		dst = append(dst, usageOption...)
		rest := body[i+1:]
		if j := firstNonSpace(rest); j < len(rest) && rest[j] == '}' {
			dst = dst[:len(dst)-1] // an empty object: no member follows, drop the comma
		}
		return append(dst, rest...), true
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return body, false
	}
	var a fastjson.Arena
	switch so := v.Get("stream_options"); {
	case so == nil || so.Type() == fastjson.TypeNull:
		o := a.NewObject()
		o.Set("include_usage", a.NewTrue())
		v.Set("stream_options", o)
	case so.Type() == fastjson.TypeObject:
		so.Set("include_usage", a.NewTrue())
	default:
		return body, false
	}
	return v.MarshalTo(dst[:0]), true
}

func firstNonSpace(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
		default:
			return i
		}
	}
	return len(b)
}
