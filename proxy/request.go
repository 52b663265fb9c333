package proxy

import (
	"bytes"
	"encoding/json"
	"io"
)

// reqInfo is what the proxy reads from an OpenAI request body.
type reqInfo struct {
	valid        bool // the body is one JSON object, nothing after it
	model        string
	stream       bool
	maxTokens    int
	includeUsage bool // stream_options.include_usage is true
	usageOff     bool // stream_options.include_usage is false
	hasOptions   bool // stream_options is present
	optionsNull  bool // stream_options is null (the same as absent)
	duplicate    bool // stream, stream_options or include_usage given twice
	// Where the last stream_options value, and the last include_usage
	// value inside it, lie in the body: injectUsage rewrites those bytes
	// only.
	options, usage span
}

// span is a value's bytes in a body: b[from:to].
type span struct{ from, to int }

// wantsInjection reports whether the proxy should ask the engine for usage
// on the client's behalf (and strip it again): a stream whose client did not
// ask for usage. When stream_options is given without include_usage the
// engine's own default decides (vLLM sends usage then, OpenAI does not), so
// the proxy leaves the request alone and the client gets what it would get.
//
// A body that gives one of those fields twice is never changed: parsers
// disagree on which one counts (Python's json and Go's take the last, some
// the first), and the proxy must not decide for the engine.
func (ri reqInfo) wantsInjection() bool {
	return ri.valid && ri.stream && !ri.duplicate && (!ri.hasOptions || ri.optionsNull || ri.usageOff)
}

// maxModelName bounds the model name a record keeps: a name is a label,
// and a client sending a megabyte of name must not make every record and
// /stats carry it.
const maxModelName = 256

// inspect reads model, stream, max_tokens (or max_completion_tokens) and
// stream_options.include_usage from a chat or completions request body. A
// body that is not one JSON object gives valid false; the engine will
// answer it with its own error, which the proxy passes on.
//
// It reads the body once, front to back, and keeps nothing but those
// fields: a body of any shape (millions of array elements or keys, deep
// nesting, long strings) costs no memory beyond a fixed nesting stack, so
// inspecting one request never takes memory or pauses from the other
// streams the proxy serves. Where a key comes twice the last counts, as in
// the engines' parsers (Python's json, Go's encoding/json).
func inspect(body []byte) reqInfo {
	s := scanner{b: body}
	var ri reqInfo
	if !s.skipSpace() || s.b[s.i] != '{' {
		return reqInfo{}
	}
	s.i++
	streams, options := 0, 0
	maxTokens, maxCompletion := 0, 0
	for first := true; ; first = false {
		if !s.skipSpace() {
			return reqInfo{}
		}
		if s.b[s.i] == '}' && first {
			s.i++
			break
		}
		key, ok := s.key()
		if !ok {
			return reqInfo{}
		}
		from := s.i
		switch string(key) {
		case "model":
			if s.b[s.i] == '"' {
				raw, esc, ok := s.str()
				if !ok {
					return reqInfo{}
				}
				ri.model = modelName(raw, esc)
			} else {
				if !s.value() {
					return reqInfo{}
				}
				ri.model = ""
			}
		case "stream":
			if !s.value() {
				return reqInfo{}
			}
			streams++
			ri.stream = string(s.b[from:s.i]) == "true"
		case "max_tokens", "max_completion_tokens":
			if !s.value() {
				return reqInfo{}
			}
			n := count(s.b[from:s.i])
			if string(key) == "max_tokens" {
				maxTokens = n
			} else {
				maxCompletion = n
			}
		case "stream_options":
			options++
			if !s.options(&ri) {
				return reqInfo{}
			}
			ri.options = span{from, s.i}
		default:
			if !s.value() {
				return reqInfo{}
			}
		}
		if !s.skipSpace() {
			return reqInfo{}
		}
		if s.b[s.i] == '}' {
			s.i++
			break
		}
		if s.b[s.i] != ',' {
			return reqInfo{}
		}
		s.i++
	}
	if s.skipSpace() {
		return reqInfo{} // something after the object
	}
	ri.valid = true
	ri.maxTokens = maxTokens
	if ri.maxTokens == 0 {
		ri.maxTokens = maxCompletion
	}
	ri.hasOptions = options > 0
	if streams > 1 || options > 1 {
		ri.duplicate = true
	}
	return ri
}

// options reads a stream_options value into ri.
func (s *scanner) options(ri *reqInfo) bool {
	ri.optionsNull, ri.includeUsage, ri.usageOff, ri.usage = false, false, false, span{}
	if s.b[s.i] != '{' {
		from := s.i
		if !s.value() {
			return false
		}
		ri.optionsNull = string(s.b[from:s.i]) == "null"
		return true
	}
	s.i++
	usages := 0
	for first := true; ; first = false {
		if !s.skipSpace() {
			return false
		}
		if s.b[s.i] == '}' && first {
			s.i++
			break
		}
		key, ok := s.key()
		if !ok {
			return false
		}
		from := s.i
		if !s.value() {
			return false
		}
		if string(key) == "include_usage" {
			usages++
			v := string(s.b[from:s.i])
			ri.includeUsage, ri.usageOff = v == "true", v == "false"
			ri.usage = span{from, s.i}
		}
		if !s.skipSpace() {
			return false
		}
		if s.b[s.i] == '}' {
			s.i++
			break
		}
		if s.b[s.i] != ',' {
			return false
		}
		s.i++
	}
	if usages > 1 {
		ri.duplicate = true
	}
	return true
}

// count is the value of a JSON number that is a whole count (digits only,
// below a billion), else 0.
func count(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return 0
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// modelName is a model string's text: escapes decoded (a rare name has
// them), cut to maxModelName bytes.
func modelName(raw []byte, esc bool) string {
	if len(raw) > 4*maxModelName {
		raw = raw[:4*maxModelName]
		esc = true // decode what is kept, leniently: the cut may split an escape
	}
	name := string(raw)
	if esc {
		var s string
		q := make([]byte, 0, len(raw)+2)
		q = append(append(append(q, '"'), raw...), '"')
		if json.Unmarshal(q, &s) == nil {
			name = s
		}
	}
	if len(name) > maxModelName {
		name = name[:maxModelName]
	}
	return name
}

// maxDepth is the deepest nesting inspect follows; a deeper body is taken
// as not JSON (Python's json, the engines' parser, stops near 1,000).
const maxDepth = 4096

// scanner walks one JSON text (RFC 8259) without building anything: it
// validates as it skips, and hands back the bytes of the values asked for.
type scanner struct {
	b []byte
	i int
	// open is the stack of open containers, a bit each: set for an object.
	open [maxDepth / 64]uint64
	name [24]byte // a member name with escapes, decoded (key)
}

// skipSpace moves past white space; it reports whether a byte follows.
func (s *scanner) skipSpace() bool {
	for ; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
		default:
			return true
		}
	}
	return false
}

// key reads an object member's name and the colon after it, leaving s at
// the value. It returns the name's text when it may be one inspect looks
// for (short, escapes decoded into the scanner's buffer), else nil.
func (s *scanner) key() ([]byte, bool) {
	if s.b[s.i] != '"' {
		return nil, false
	}
	raw, esc, ok := s.str()
	if !ok || !s.skipSpace() || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	if !s.skipSpace() {
		return nil, false
	}
	switch {
	case len(raw) > 6*len(s.name):
		return nil, true
	case esc:
		return unescapeName(raw, &s.name), true
	}
	return raw, true
}

// unescapeName decodes the escapes of a short member name into buf; a
// name that does not decode to ASCII within buf gives nil: it is none of
// the names inspect looks for.
func unescapeName(raw []byte, buf *[24]byte) []byte {
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == '\\' {
			if i+1 >= len(raw) {
				return nil
			}
			switch raw[i+1] {
			case 'u':
				if i+6 > len(raw) {
					return nil
				}
				v := 0
				for _, h := range raw[i+2 : i+6] {
					v = v<<4 | hexValue(h)
				}
				if v >= 0x80 { // also a bad digit (hexValue's 0xff)
					return nil
				}
				c, i = byte(v), i+6
			case '"', '\\', '/':
				c, i = raw[i+1], i+2
			default:
				return nil // a control character: no name we look for has one
			}
		} else {
			i++
		}
		if n == len(buf) {
			return nil
		}
		buf[n] = c
		n++
	}
	return buf[:n]
}

// str reads a string at s.i (its opening quote) and returns its raw bytes
// between the quotes and whether it holds escapes.
func (s *scanner) str() (raw []byte, esc, ok bool) {
	i := s.i + 1
	for i < len(s.b) {
		j := bytes.IndexAny(s.b[i:], "\"\\")
		if j < 0 {
			return nil, false, false
		}
		for _, c := range s.b[i : i+j] {
			if c < 0x20 {
				return nil, false, false
			}
		}
		i += j
		if s.b[i] == '"' {
			raw = s.b[s.i+1 : i]
			s.i = i + 1
			return raw, esc, true
		}
		esc = true
		if i+1 >= len(s.b) {
			return nil, false, false
		}
		switch s.b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if i+6 > len(s.b) {
				return nil, false, false
			}
			for _, c := range s.b[i+2 : i+6] {
				if !isHex(c) {
					return nil, false, false
				}
			}
			i += 6
		default:
			return nil, false, false
		}
	}
	return nil, false, false
}

// hexValue is a hex digit's value, or 0xff for a byte that is none.
func hexValue(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return 0xff
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scalar reads a string, number, true, false or null at s.i.
func (s *scanner) scalar() bool {
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	}
	return false
}

func (s *scanner) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

// value skips one value of any kind at s.i, checking its syntax, without
// recursion: the open containers are a bit stack.
func (s *scanner) value() bool {
	depth := 0
	for {
		// A value starts here.
		if !s.skipSpace() {
			return false
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			if depth == maxDepth {
				return false
			}
			if c == '{' {
				s.open[depth/64] |= 1 << (depth % 64)
			} else {
				s.open[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			s.i++
			if !s.skipSpace() {
				return false
			}
			if s.b[s.i] == '}' && c == '{' || s.b[s.i] == ']' && c == '[' {
				s.i++
				depth--
				break
			}
			if c == '{' {
				if _, ok := s.key(); !ok {
					return false
				}
			}
			continue
		default:
			if !s.scalar() {
				return false
			}
		}
		// A value ended: close containers, or go on to the next member.
		for {
			if depth == 0 {
				return true
			}
			if !s.skipSpace() {
				return false
			}
			object := s.open[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			c := s.b[s.i]
			s.i++
			switch {
			case c == ',':
				if object {
					if !s.skipSpace() {
						return false
					}
					if _, ok := s.key(); !ok {
						return false
					}
				}
			case c == '}' && object, c == ']' && !object:
				depth--
				continue
			default:
				return false
			}
			break
		}
	}
}

var (
	usageOption     = []byte(`"stream_options":{"include_usage":true},`)
	usageOptionOnly = usageOption[:len(usageOption)-1] // an empty object: no member follows
	usageObject     = []byte(`{"include_usage":true}`)
	usageTrue       = []byte(`true`)
)

// usageSplice says how to set stream_options.include_usage to true in
// body, so the engine sends its usage chunk at the end of the stream: the
// body is head, insert, tail, every other byte as the client sent it. With
// no stream_options (the usual case) the member goes right after the
// opening brace; a null stream_options becomes {"include_usage":true}; an
// include_usage of false becomes true. ok is false when the body cannot
// take the option. Nothing is copied: the request goes to the engine in
// these three pieces (splice).
func usageSplice(body []byte, ri reqInfo) (head, insert, tail []byte, ok bool) {
	if !ri.valid {
		return nil, nil, nil, false
	}
	var at span
	switch {
	case !ri.hasOptions:
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return nil, nil, nil, false
		}
		rest := body[i+1:]
		if j := firstNonSpace(rest); j < len(rest) && rest[j] == '}' {
			return body[:i+1], usageOptionOnly, rest, true
		}
		return body[:i+1], usageOption, rest, true
	case ri.optionsNull:
		at, insert = ri.options, usageObject
	case ri.usageOff:
		at, insert = ri.usage, usageTrue
	default:
		return nil, nil, nil, false
	}
	if at.to <= at.from || at.to > len(body) {
		return nil, nil, nil, false
	}
	return body[:at.from], insert, body[at.to:], true
}

// splice is a request body sent as pieces of the client's bytes and the
// proxy's, without joining them: the body a client sent (up to
// --max-body-size) is not copied to insert a few bytes. It is the
// request's body stream, rewound before each send.
type splice struct {
	parts [3][]byte
	part  int // the piece being read
	off   int // how much of it has been read
}

func (s *splice) set(head, insert, tail []byte) { *s = splice{parts: [3][]byte{head, insert, tail}} }

// rewind starts the body again, for a send.
func (s *splice) rewind() { s.part, s.off = 0, 0 }

// size is the body's length.
func (s *splice) size() int { return len(s.parts[0]) + len(s.parts[1]) + len(s.parts[2]) }

func (s *splice) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && s.part < len(s.parts) {
		c := copy(p[n:], s.parts[s.part][s.off:])
		n += c
		if s.off += c; s.off == len(s.parts[s.part]) {
			s.part, s.off = s.part+1, 0
		}
	}
	if n == 0 && s.part == len(s.parts) {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo writes each piece with one Write (fasthttp's body copy uses it).
func (s *splice) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; s.part < len(s.parts); s.part, s.off = s.part+1, 0 {
		if rest := s.parts[s.part][s.off:]; len(rest) > 0 {
			n, err := w.Write(rest)
			total += int64(n)
			s.off += n
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
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
