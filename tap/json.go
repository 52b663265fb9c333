package tap

import "encoding/binary"

// A validating single-pass JSON reader for OpenAI-style chunks. It checks
// the whole event is one valid JSON value (as encoding/json.Valid does, up
// to the same nesting depth) while picking out the few fields the tap needs,
// without building a tree and without allocating. Where a key repeats, the
// last one wins, as with encoding/json.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// counts is a usage (or SGLang meta_info) block.
type counts struct {
	set        bool
	prompt     int
	completion int
	cached     int  // prompt_tokens_details.cached_tokens, or meta_info cached_tokens
	cachedSet  bool // cached is a number the engine sent
}

// chunk is what the tap reads from one event's JSON object.
type chunk struct {
	errorKey  bool   // "error" present and not null
	objectErr bool   // "object": "error"
	id        []byte // "id" string contents as on the wire (escapes kept)
	idEscaped bool
	choices   int  // len of the "choices" array; -1 when absent or not an array
	tok       bool // a choice carries output
	text      bool // a top-level "text" key (SGLang native)
	usage     counts
	meta      counts
	cacheN    int // llama.cpp timings.cache_n
	cacheNSet bool
}

func (c *chunk) isError() bool { return c.errorKey || c.objectErr }

// strSafe marks bytes a JSON string may hold as they are.
var strSafe = func() (t [256]bool) {
	for i := 0x20; i < 256; i++ {
		t[i] = i != '"' && i != '\\'
	}
	return t
}()

var hexDigit = func() (t [256]bool) {
	for _, c := range "0123456789abcdefABCDEF" {
		t[c] = true
	}
	return t
}()

type jreader struct {
	b     []byte
	i     int
	depth int
	bad   bool
}

// parseChunk reads b into c and reports whether b is one valid JSON object.
// r is scratch space the caller keeps so the hot path does not allocate.
func parseChunk(r *jreader, b []byte, c *chunk) bool {
	*c = chunk{choices: -1}
	*r = jreader{b: b}
	r.ws()
	if r.peek() != '{' {
		return false
	}
	r.object(func(r *jreader, key []byte, esc bool) {
		switch {
		case keyIs(key, esc, "choices"):
			c.choices, c.tok = -1, false
			if r.peek() == '[' {
				c.choices, c.tok = r.choices()
				return
			}
		case keyIs(key, esc, "usage"):
			c.usage = counts{}
			if r.peek() == '{' {
				r.counts(&c.usage)
				return
			}
		case keyIs(key, esc, "error"):
			c.errorKey = !r.isNull()
			return
		case keyIs(key, esc, "object"):
			c.objectErr = false
			if r.peek() == '"' {
				s, e := r.str()
				c.objectErr = keyIs(s, e, "error")
				return
			}
		case keyIs(key, esc, "id"):
			c.id = nil
			if r.peek() == '"' {
				c.id, c.idEscaped = r.str()
				return
			}
		case keyIs(key, esc, "meta_info"):
			c.meta = counts{}
			if r.peek() == '{' {
				r.counts(&c.meta)
				return
			}
		case keyIs(key, esc, "timings"):
			c.cacheNSet = false
			if r.peek() == '{' {
				r.object(func(r *jreader, key []byte, esc bool) {
					if keyIs(key, esc, "cache_n") {
						c.cacheN, c.cacheNSet = r.int()
						return
					}
					r.skip()
				})
				return
			}
		case keyIs(key, esc, "text"):
			c.text = true
		}
		r.skip()
	})
	r.ws()
	return !r.bad && r.i == len(r.b)
}

// choices reads a "choices" array: its length and whether any choice
// carries output.
func (r *jreader) choices() (n int, tok bool) {
	r.array(func(r *jreader) {
		n++
		if r.peek() != '{' {
			r.skip()
			return
		}
		var delta, text bool
		r.object(func(r *jreader, key []byte, esc bool) {
			switch {
			case keyIs(key, esc, "delta"):
				delta = false
				if r.peek() == '{' {
					delta = r.delta()
					return
				}
			case keyIs(key, esc, "text"):
				text = r.nonEmptyString()
				return
			}
			r.skip()
		})
		tok = tok || delta || text
	})
	return n, tok
}

// delta reads a chat delta and reports whether it carries output.
func (r *jreader) delta() bool {
	var content, rc, reasoning, tools bool
	r.object(func(r *jreader, key []byte, esc bool) {
		switch {
		case keyIs(key, esc, "content"):
			content = r.nonEmptyString()
		case keyIs(key, esc, "reasoning_content"):
			rc = r.nonEmptyString()
		case keyIs(key, esc, "reasoning"):
			reasoning = r.nonEmptyString()
		case keyIs(key, esc, "tool_calls"):
			tools = false
			if r.peek() != '[' {
				r.skip()
				return
			}
			r.array(func(r *jreader) {
				if r.peek() != '{' {
					r.skip()
					return
				}
				var fn bool
				r.object(func(r *jreader, key []byte, esc bool) {
					if !keyIs(key, esc, "function") || r.peek() != '{' {
						if keyIs(key, esc, "function") {
							fn = false
						}
						r.skip()
						return
					}
					var args, name bool
					r.object(func(r *jreader, key []byte, esc bool) {
						switch {
						case keyIs(key, esc, "arguments"):
							args = r.nonEmptyString()
						case keyIs(key, esc, "name"):
							name = r.nonEmptyString()
						default:
							r.skip()
						}
					})
					fn = args || name
				})
				tools = tools || fn
			})
		default:
			r.skip()
		}
	})
	return content || rc || reasoning || tools
}

// counts reads a usage or meta_info object.
func (r *jreader) counts(u *counts) {
	u.set = true
	var details, direct counts
	r.object(func(r *jreader, key []byte, esc bool) {
		switch {
		case keyIs(key, esc, "prompt_tokens"):
			u.prompt, _ = r.int()
		case keyIs(key, esc, "completion_tokens"):
			u.completion, _ = r.int()
		case keyIs(key, esc, "cached_tokens"):
			direct.cached, direct.cachedSet = r.int()
		case keyIs(key, esc, "prompt_tokens_details"):
			details.cachedSet = false
			if r.peek() != '{' {
				r.skip()
				return
			}
			r.object(func(r *jreader, key []byte, esc bool) {
				if keyIs(key, esc, "cached_tokens") {
					details.cached, details.cachedSet = r.int()
					return
				}
				r.skip()
			})
		default:
			r.skip()
		}
	})
	switch {
	case details.cachedSet:
		u.cached, u.cachedSet = details.cached, true
	case direct.cachedSet:
		u.cached, u.cachedSet = direct.cached, true
	}
}

func (r *jreader) peek() byte {
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *jreader) ws() {
	if r.i < len(r.b) && r.b[r.i] > ' ' {
		return // the common case: compact JSON
	}
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// object reads an object at r.i ('{'), calling f for each key with r at
// the start of its value; f must consume the value.
func (r *jreader) object(f func(r *jreader, key []byte, esc bool)) {
	if r.bad || !r.enter() {
		return
	}
	r.i++ // '{'
	r.ws()
	if r.peek() == '}' {
		r.i++
		r.depth--
		return
	}
	for !r.bad {
		if r.peek() != '"' {
			r.bad = true
			return
		}
		key, esc := r.str()
		r.ws()
		if r.peek() != ':' {
			r.bad = true
			return
		}
		r.i++
		r.ws()
		f(r, key, esc)
		r.ws()
		switch r.peek() {
		case ',':
			r.i++
			r.ws()
		case '}':
			r.i++
			r.depth--
			return
		default:
			r.bad = true
		}
	}
}

// array reads an array at r.i ('['), calling f with r at each element;
// f must consume it.
func (r *jreader) array(f func(r *jreader)) {
	if r.bad || !r.enter() {
		return
	}
	r.i++ // '['
	r.ws()
	if r.peek() == ']' {
		r.i++
		r.depth--
		return
	}
	for !r.bad {
		f(r)
		r.ws()
		switch r.peek() {
		case ',':
			r.i++
			r.ws()
		case ']':
			r.i++
			r.depth--
			return
		default:
			r.bad = true
		}
	}
}

func (r *jreader) enter() bool {
	r.depth++
	if r.depth > maxDepth {
		r.bad = true
		return false
	}
	return true
}

// skip consumes any value.
func (r *jreader) skip() {
	if r.bad {
		return
	}
	switch c := r.peek(); {
	case c == '{':
		r.object(func(r *jreader, _ []byte, _ bool) { r.skip() })
	case c == '[':
		r.array(func(r *jreader) { r.skip() })
	case c == '"':
		r.str()
	case c == '-' || (c >= '0' && c <= '9'):
		r.number()
	case c == 't':
		r.lit("true")
	case c == 'f':
		r.lit("false")
	case c == 'n':
		r.lit("null")
	default:
		r.bad = true
	}
}

func (r *jreader) lit(s string) {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		r.bad = true
		return
	}
	r.i += len(s)
}

// isNull consumes a value and reports whether it was null.
func (r *jreader) isNull() bool {
	if r.peek() == 'n' {
		r.lit("null")
		return true
	}
	r.skip()
	return false
}

// str consumes a string at r.i ('"') and returns its contents as on the
// wire, and whether they hold escapes.
func (r *jreader) str() (raw []byte, esc bool) {
	b := r.b
	i := r.i + 1
	start := i
	for {
		// Eight bytes at a time while none is '"', '\\' or a control
		// character, then byte by byte.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if (x-lo*0x20)&^x&hi|hasZero(x^(lo*'"'))|hasZero(x^(lo*'\\')) != 0 {
				break
			}
			i += 8
		}
		for i < len(b) && strSafe[b[i]] {
			i++
		}
		if i >= len(b) {
			r.bad = true
			return nil, false
		}
		switch b[i] {
		case '"':
			r.i = i + 1
			return b[start:i], esc
		case '\\':
			esc = true
			if i+1 >= len(b) {
				r.bad = true
				return nil, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !hexDigit[b[i+2]] || !hexDigit[b[i+3]] || !hexDigit[b[i+4]] || !hexDigit[b[i+5]] {
					r.bad = true
					return nil, false
				}
				i += 6
			default:
				r.bad = true
				return nil, false
			}
		default: // a control character
			r.bad = true
			return nil, false
		}
	}
}

const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// hasZero is non-zero when one of x's bytes is zero.
func hasZero(x uint64) uint64 { return (x - lo) & ^x & hi }

// nonEmptyString consumes a value and reports whether it was a non-empty
// string (every escape stands for at least one character).
func (r *jreader) nonEmptyString() bool {
	if r.peek() != '"' {
		r.skip()
		return false
	}
	s, _ := r.str()
	return len(s) > 0
}

// number consumes a number and returns it when it is an integer of at most
// 18 digits (token counts are far smaller; larger ones read as 0).
func (r *jreader) number() (n int, isInt bool) {
	b := r.b
	i := r.i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	digits := 0
	switch {
	case i < len(b) && b[i] == '0':
		i++
		digits = 1
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if digits < 18 {
				n = n*10 + int(b[i]-'0')
			}
			digits++
			i++
		}
	default:
		r.bad = true
		return 0, false
	}
	isInt = digits <= 18
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			r.bad = true
			return 0, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		isInt = false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			r.bad = true
			return 0, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		isInt = false
	}
	r.i = i
	if !isInt {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// int consumes a value; n is its value when it is an integer, and ok says
// whether it was a number at all (a non-integer number reads as 0).
func (r *jreader) int() (n int, ok bool) {
	c := r.peek()
	if c != '-' && (c < '0' || c > '9') {
		r.skip()
		return 0, false
	}
	n, _ = r.number()
	return n, true
}

// keyIs compares a string as on the wire with an ASCII literal, decoding
// escapes when there are any.
func keyIs(raw []byte, esc bool, lit string) bool {
	if !esc {
		return string(raw) == lit
	}
	j := 0
	for i := 0; i < len(raw); {
		var c byte
		if raw[i] != '\\' {
			c = raw[i]
			i++
		} else {
			switch e := raw[i+1]; e {
			case 'u':
				v := 0
				for _, h := range raw[i+2 : i+6] {
					v = v<<4 | int(unhex(h))
				}
				if v >= 0x80 {
					return false // lit is ASCII
				}
				c = byte(v)
				i += 6
			case 'b':
				c, i = '\b', i+2
			case 'f':
				c, i = '\f', i+2
			case 'n':
				c, i = '\n', i+2
			case 'r':
				c, i = '\r', i+2
			case 't':
				c, i = '\t', i+2
			default: // '"', '\\', '/'
				c, i = e, i+2
			}
		}
		if j >= len(lit) || lit[j] != c {
			return false
		}
		j++
	}
	return j == len(lit)
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
