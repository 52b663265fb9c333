package tap

import (
	"encoding/binary"
	"math/bits"
)

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
	promptUS  int64 // llama.cpp timings.prompt_ms, in microseconds
	promptSet bool
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
	kbuf  [24]byte // a key with escapes, decoded
	idOff int      // where c.id starts in b

	// A checkpoint: events of one stream start with the same bytes (id,
	// object, created, model), so the reader keeps the head of the last
	// event up to its top-level "choices" key and its state there. An
	// event whose first head bytes are the same resumes from that state:
	// reading those bytes again would give the same result.
	headLen   int // 0: no checkpoint
	headChunk chunk
	headIDOff int // where headChunk.id started
	headIDSet bool
	head      [maxHead]byte
}

// maxHead is the longest event head a checkpoint keeps; minHead the
// shortest worth keeping.
const (
	maxHead = 256
	minHead = 16
)

// parseChunk reads b into c and reports whether b is one valid JSON object.
// r is scratch space the caller keeps so the hot path does not allocate.
func parseChunk(r *jreader, b []byte, c *chunk) bool {
	r.b, r.i, r.depth, r.bad = b, 0, 0, false
	var more, resumed bool
	if n := r.headLen; n > 0 && n <= len(b) && string(b[:n]) == string(r.head[:n]) {
		*c = r.headChunk
		if r.headIDSet {
			r.idOff = r.headIDOff
			c.id = b[r.idOff : r.idOff+len(c.id)]
		}
		r.i, r.depth, more, resumed = n, 1, true, true
	} else {
		*c = chunk{choices: -1}
		r.ws()
		if r.peek() != '{' {
			return false
		}
		more = r.objStart()
	}
	for ; more; more = r.objNext() {
		at := r.i
		switch string(r.key()) {
		case "choices":
			if !(resumed && at == r.headLen) && at >= minHead && at <= maxHead {
				r.checkpoint(at, c)
			}
			c.choices, c.tok = -1, false
			if r.peek() == '[' {
				c.choices, c.tok = r.choices()
				continue
			}
		case "usage":
			c.usage = counts{}
			if r.peek() == '{' {
				r.counts(&c.usage)
				continue
			}
		case "error":
			c.errorKey = !r.isNull()
			continue
		case "object":
			c.objectErr = false
			if r.peek() == '"' {
				s, e := r.str()
				c.objectErr = keyIs(s, e, "error")
				continue
			}
		case "id":
			c.id = nil
			if r.peek() == '"' {
				r.idOff = r.i + 1
				c.id, c.idEscaped = r.str()
				continue
			}
		case "meta_info":
			c.meta = counts{}
			if r.peek() == '{' {
				r.counts(&c.meta)
				continue
			}
		case "timings":
			c.cacheNSet, c.promptSet = false, false
			if r.peek() == '{' {
				for more := r.objStart(); more; more = r.objNext() {
					switch string(r.key()) {
					case "cache_n":
						c.cacheN, c.cacheNSet = r.int()
					case "prompt_ms":
						c.promptUS, c.promptSet = r.micros()
					default:
						r.skip()
					}
				}
				continue
			}
		case "text":
			c.text = true
		}
		r.skip()
	}
	r.ws()
	return !r.bad && r.i == len(r.b)
}

// checkpoint keeps b[:at] and the state c of the reader there, at a
// top-level member's key.
func (r *jreader) checkpoint(at int, c *chunk) {
	r.headLen = copy(r.head[:], r.b[:at])
	r.headChunk = *c
	r.headIDSet = c.id != nil
	r.headIDOff = r.idOff
	r.headChunk.id = nil
	if r.headIDSet {
		r.headChunk.id = r.head[r.idOff : r.idOff+len(c.id)] // only its length is used
	}
}

// choices reads a "choices" array: its length and whether any choice
// carries output.
func (r *jreader) choices() (n int, tok bool) {
	for more := r.arrStart(); more; more = r.arrNext() {
		n++
		if r.peek() != '{' {
			r.skip()
			continue
		}
		var delta, text bool
		for more := r.objStart(); more; more = r.objNext() {
			switch string(r.key()) {
			case "delta":
				delta = false
				if r.peek() == '{' {
					delta = r.delta()
					continue
				}
			case "text":
				text = r.nonEmptyString()
				continue
			}
			r.skip()
		}
		tok = tok || delta || text
	}
	return n, tok
}

// delta reads a chat delta and reports whether it carries output.
func (r *jreader) delta() bool {
	var content, rc, reasoning, tools bool
	for more := r.objStart(); more; more = r.objNext() {
		switch string(r.key()) {
		case "content":
			content = r.nonEmptyString()
		case "reasoning_content":
			rc = r.nonEmptyString()
		case "reasoning":
			reasoning = r.nonEmptyString()
		case "tool_calls":
			tools = false
			if r.peek() != '[' {
				r.skip()
				continue
			}
			for more := r.arrStart(); more; more = r.arrNext() {
				if r.peek() != '{' {
					r.skip()
					continue
				}
				fn := false
				for more := r.objStart(); more; more = r.objNext() {
					if string(r.key()) != "function" {
						r.skip()
						continue
					}
					fn = false
					if r.peek() != '{' {
						r.skip()
						continue
					}
					var args, name bool
					for more := r.objStart(); more; more = r.objNext() {
						switch string(r.key()) {
						case "arguments":
							args = r.nonEmptyString()
						case "name":
							name = r.nonEmptyString()
						default:
							r.skip()
						}
					}
					fn = args || name
				}
				tools = tools || fn
			}
		default:
			r.skip()
		}
	}
	return content || rc || reasoning || tools
}

// counts reads a usage or meta_info object.
func (r *jreader) counts(u *counts) {
	u.set = true
	var details, direct counts
	for more := r.objStart(); more; more = r.objNext() {
		switch string(r.key()) {
		case "prompt_tokens":
			u.prompt, _ = r.int()
		case "completion_tokens":
			u.completion, _ = r.int()
		case "cached_tokens":
			direct.cached, direct.cachedSet = r.int()
		case "prompt_tokens_details":
			details.cachedSet = false
			if r.peek() != '{' {
				r.skip()
				continue
			}
			for more := r.objStart(); more; more = r.objNext() {
				if string(r.key()) == "cached_tokens" {
					details.cached, details.cachedSet = r.int()
				} else {
					r.skip()
				}
			}
		default:
			r.skip()
		}
	}
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

// objStart consumes the '{' at r.i and reports whether a member follows.
// Each member is read with key and then its value, and objNext moves on:
//
//	for more := r.objStart(); more; more = r.objNext() { k := r.key(); ...value... }
func (r *jreader) objStart() bool {
	if r.bad || !r.enter() {
		return false
	}
	r.i++ // '{'
	r.ws()
	if r.peek() == '}' {
		r.i++
		r.depth--
		return false
	}
	return true
}

// key reads a member's key and colon, leaving r at the value. A key with
// escapes is decoded (keys tokentap looks for are short and ASCII; a longer
// decoded key comes back as "\x00", which matches none).
func (r *jreader) key() []byte {
	if r.peek() != '"' {
		r.bad = true
		return nil
	}
	k, esc := r.str()
	r.ws()
	if r.peek() != ':' {
		r.bad = true
		return nil
	}
	r.i++
	r.ws()
	if esc {
		k = r.decodeKey(k)
	}
	return k
}

// objNext consumes the ',' or '}' after a member's value and reports
// whether another member follows.
func (r *jreader) objNext() bool { return r.next('}') }

// arrStart consumes the '[' at r.i and reports whether an element follows;
// arrNext consumes the ',' or ']' after one.
func (r *jreader) arrStart() bool {
	if r.bad || !r.enter() {
		return false
	}
	r.i++ // '['
	r.ws()
	if r.peek() == ']' {
		r.i++
		r.depth--
		return false
	}
	return true
}

func (r *jreader) arrNext() bool { return r.next(']') }

// next consumes the ',' or the closing byte after a member or an element
// and reports whether another follows.
func (r *jreader) next(closing byte) bool {
	if r.bad {
		return false
	}
	r.ws()
	switch r.peek() {
	case ',':
		r.i++
		r.ws()
		return true
	case closing:
		r.i++
		r.depth--
		return false
	}
	r.bad = true
	return false
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
		for more := r.objStart(); more; more = r.objNext() {
			r.key()
			r.skip()
		}
	case c == '[':
		for more := r.arrStart(); more; more = r.arrNext() {
			r.skip()
		}
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
		// Eight bytes at a time: the lowest flagged byte of the mask is
		// the first '"', '\\' or control character (the bit tricks can
		// flag bytes above a true hit, never below). Byte by byte near
		// the end.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if m := (x-lo*0x20)&^x&hi | hasZero(x^(lo*'"')) | hasZero(x^(lo*'\\')); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				if b[i] == '"' { // the common case: the end of the string
					r.i = i + 1
					return b[start:i], esc
				}
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

// micros consumes a value and, when it is a non-negative number of
// milliseconds without an exponent (llama.cpp's timings: 20.684), returns
// it in whole microseconds; ok is false for anything else.
func (r *jreader) micros() (us int64, ok bool) {
	c := r.peek()
	if c < '0' || c > '9' {
		r.skip()
		return 0, false
	}
	start := r.i
	r.number()
	if r.bad {
		return 0, false
	}
	b := r.b[start:r.i]
	i, digits := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if digits++; digits > 12 {
			return 0, false
		}
		us = us*10 + int64(b[i]-'0')
	}
	us *= 1000
	if i < len(b) && b[i] == '.' {
		scale := int64(100)
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			us += int64(b[i]-'0') * scale
			scale /= 10
		}
	}
	if i != len(b) { // an exponent
		return 0, false
	}
	return us, true
}

// keyIs compares a string as on the wire with an ASCII literal, decoding
// escapes when there are any.
func keyIs(raw []byte, esc bool, lit string) bool {
	if !esc {
		return string(raw) == lit
	}
	var r jreader
	return string(r.decodeKey(raw)) == lit
}

// noKey is what decodeKey returns for a key no field of interest has.
var noKey = [1]byte{0}

// decodeKey decodes the escapes of a string as on the wire (already
// validated by str) into r.kbuf. A string that does not fit, or holds a
// character beyond ASCII, comes back as "\x00": it equals no key tokentap
// looks for.
func (r *jreader) decodeKey(raw []byte) []byte {
	none := noKey[:]
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
					return none
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
		if j >= len(r.kbuf) {
			return none
		}
		r.kbuf[j] = c
		j++
	}
	return r.kbuf[:j]
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
