package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// secretHeaders are the request headers that carry credentials. Their
// values go to the engine and nowhere else: no log, record, capture or
// metric holds them.
var secretHeaders = []string{"Authorization", "Proxy-Authorization", "Api-Key", "X-Api-Key", "Cookie"}

const redacted = "[redacted]"

// redact removes what looks like a credential from a text tokentap is
// about to log or keep: the value of any secret header line in it
// ("Authorization: Bearer ..."), a bearer token, and OpenAI-style keys
// (sk-...). It is the safety net under the rule that such text never holds
// a request's bytes in the first place.
func redact(s string) string {
	if !mayHoldSecret(s) {
		return s
	}
	lower := asciiLower(s) // same length as s: indexes carry over
	var b strings.Builder
	i := 0
	for i < len(s) {
		j, end := nextSecret(lower, i)
		if j < 0 {
			break
		}
		b.WriteString(s[i:j])
		b.WriteString(redacted)
		i = end
	}
	b.WriteString(s[i:])
	return b.String()
}

// asciiLower lowers ASCII letters only, so the result has s's length
// (strings.ToLower turns invalid UTF-8 into longer replacement runes).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func mayHoldSecret(s string) bool {
	l := asciiLower(s)
	for _, m := range secretMarkers {
		if strings.Contains(l, m) {
			return true
		}
	}
	return keyStart(l, 0) >= 0
}

// secretMarkers start a secret value that runs to the end of its line (or
// of a quoted string).
var secretMarkers = []string{"authorization:", "api-key:", "x-api-key:", "cookie:", "bearer "}

// nextSecret finds the next secret value in lower at or after i: where it
// starts and ends (-1: none).
func nextSecret(lower string, i int) (start, end int) {
	start = -1
	for _, m := range secretMarkers {
		if k := strings.Index(lower[i:], m); k >= 0 && (start < 0 || i+k+len(m) < start) {
			start = i + k + len(m)
			for start < len(lower) && lower[start] == ' ' {
				start++
			}
			end = valueEnd(lower, start, true)
		}
	}
	if k := keyStart(lower, i); k >= 0 && (start < 0 || k < start) {
		start, end = k, valueEnd(lower, k, false)
	}
	if start >= 0 && end == start {
		// Nothing to hide here (a marker at the very end): go on after it.
		if next, e := nextSecret(lower, start); next >= 0 {
			return next, e
		}
		return -1, -1
	}
	return start, end
}

// keyStart finds the next OpenAI-style key (sk- at a word's start, then
// at least 6 key characters) at or after i, or -1.
func keyStart(lower string, i int) int {
	for {
		k := strings.Index(lower[i:], "sk-")
		if k < 0 {
			return -1
		}
		k += i
		if (k == 0 || !isKeyChar(lower[k-1])) && valueEnd(lower, k+3, false)-(k+3) >= 6 {
			return k
		}
		i = k + 3
	}
}

func isKeyChar(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z'
}

// valueEnd is where a secret value starting at i ends: the line's end (a
// header value may hold spaces) or, for a bare token, the first character
// a key cannot hold.
func valueEnd(s string, i int, line bool) int {
	for j := i; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\r' || c == '\n' || c == '"' || c == '\\':
			return j
		case !line && !isKeyChar(c):
			return j
		}
	}
	return len(s)
}

// scrubSecrets removes from a record's error text the request's own
// credentials (an engine may echo a key it refused) and anything redact
// catches: every value of every secret header (a header may come twice),
// as sent and as JSON escapes it (an engine's error body is JSON), and a
// bearer token without its scheme; longest first, so a short value cannot
// cut a longer one into pieces that survive.
func scrubSecrets(msg string, h *fasthttp.RequestHeader) string {
	if msg == "" {
		return msg
	}
	var vals []string
	add := func(v []byte) {
		if v = bytes.TrimSpace(v); len(v) == 0 {
			return
		}
		vals = append(vals, string(v))
		if q, err := json.Marshal(string(v)); err == nil && len(q) > 2 && string(q[1:len(q)-1]) != string(v) {
			vals = append(vals, string(q[1:len(q)-1]))
		}
	}
	for k, v := range h.All() {
		if !isSecretHeader(k) {
			continue
		}
		add(v)
		if _, tok, ok := bytes.Cut(bytes.TrimSpace(v), []byte(" ")); ok && len(bytes.TrimSpace(tok)) >= 8 {
			add(tok) // the key without "Bearer "
		}
	}
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, redacted)
	}
	return redact(msg)
}

// isSecretHeader says whether a header name is one of secretHeaders.
func isSecretHeader(name []byte) bool {
	for _, s := range secretHeaders {
		if bytes.EqualFold(name, []byte(s)) {
			return true
		}
	}
	return false
}

// fasthttpLogger routes fasthttp's messages to zerolog at debug level,
// redacted: with SecureErrorLogMessage they name faults without request
// bytes, and redact is the net under that.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if e := l.log.Debug(); e.Enabled() {
		e.Msg(redact(dropQuoted(fmt.Sprintf(format, args...))))
	}
}

// dropQuoted replaces what fasthttp quotes in its errors ("invalid header
// value \"…\"": a request's or response's bytes, a key among them even
// with SecureErrorLogMessage) by an ellipsis: the error names the fault,
// never the bytes.
func dropQuoted(s string) string {
	if !strings.ContainsRune(s, '"') {
		return s
	}
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\\' && i+1 < len(s):
			i++ // an escaped character stays inside the quote
		case c == '"':
			if in {
				b.WriteString("…")
			}
			b.WriteByte('"')
			in = !in
		case !in:
			b.WriteByte(c)
		}
	}
	return b.String()
}
