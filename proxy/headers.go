package proxy

import (
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"
)

// malformedRequest finds what fasthttp lets through but the engine must
// not get (RFC 9112): a version other than HTTP/1.0 or 1.1, a header name
// that is not a token (a space in it: a smuggling vector), trailer fields
// after a chunked body. It returns the refusal's message and status, or
// "".
func malformedRequest(h *fasthttp.RequestHeader) (string, int) {
	if proto := h.Protocol(); !bytes.Equal(proto, []byte("HTTP/1.1")) && !bytes.Equal(proto, []byte("HTTP/1.0")) {
		return "tokentap proxy: the request line's version is not HTTP/1.1 or HTTP/1.0 (tokentap speaks HTTP/1.1 to clients)", fasthttp.StatusHTTPVersionNotSupported
	}
	for k := range h.All() {
		if !isToken(k) {
			return "tokentap proxy: a header name holds a character a header name cannot (RFC 9110 §5.1: a token, no spaces); the request was not sent to the engine", fasthttp.StatusBadRequest
		}
	}
	if len(h.PeekTrailerKeys()) > 0 {
		return "tokentap proxy: the chunked body ends in trailer fields, which tokentap does not pass on; send the fields as headers", fasthttp.StatusBadRequest
	}
	return "", 0
}

// isToken says whether b is an RFC 9110 token (a header name).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	return true
}

func measuredPath(path []byte) bool {
	return bytes.Equal(path, chatPath) || bytes.Equal(path, completionsPath)
}

// hopHeaders are connection-level headers a proxy must not forward
// (RFC 9110 §7.6.1), plus Expect, which fasthttp answers itself.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// headerDeleter is a request or response header.
type headerDeleter interface{ DelBytes(key []byte) }

// delConnectionNamed deletes from h the headers named in any Connection
// header of all (RFC 9110 §7.6.1: they are hop-by-hop too).
func delConnectionNamed(h headerDeleter, all iter.Seq2[[]byte, []byte]) {
	var names [][]byte
	for k, v := range all {
		if !bytes.EqualFold(k, connectionHeader) {
			continue
		}
		for name := range bytes.SplitSeq(v, []byte(",")) {
			if name = bytes.TrimSpace(name); len(name) > 0 {
				names = append(names, name)
			}
		}
	}
	for _, name := range names {
		h.DelBytes(name)
	}
}

var connectionHeader = []byte("Connection")

// originForm returns the request target to send the engine. An
// origin-form target (/path?query) goes as it is; an absolute-form one
// (http://host/path?query, which RFC 9112 §3.2.2 has servers accept) goes
// as its path and query, since the engine is the only place tokentap sends
// anything (slash: a "/" must come first, the URL having no path). ok is
// false for every other form: authority-form (CONNECT's), asterisk-form,
// anything else.
func originForm(t []byte) (target []byte, slash, ok bool) {
	if len(t) > 0 && t[0] == '/' {
		return t, false, true
	}
	i := bytes.Index(t, []byte("://"))
	if i <= 0 || !(bytes.EqualFold(t[:i], []byte("http")) || bytes.EqualFold(t[:i], []byte("https"))) {
		return nil, false, false
	}
	rest := t[i+3:]
	j := bytes.IndexAny(rest, "/?")
	if j < 0 {
		return nil, true, true
	}
	return rest[j:], rest[j] == '?', true
}

// aboveRoot says whether a target's path climbs above the root with dot
// segments ("/../etc/passwd", "/v1/../../x"; %2e and %2f count as the
// characters they encode): nginx answers those 400, and an engine behind a
// path prefix must not be reached outside it.
func aboveRoot(target []byte) bool {
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	depth := 0
	seg := make([]byte, 0, 8)
	end := func() bool {
		switch string(seg) {
		case "..":
			depth--
		case ".", "":
		default:
			depth++
		}
		seg = seg[:0]
		return depth < 0
	}
	for i := 0; i < len(target); i++ {
		c := target[i]
		if c == '%' && i+2 < len(target) {
			switch string(bytes.ToLower(target[i+1 : i+3])) {
			case "2e":
				c, i = '.', i+2
			case "2f":
				c, i = '/', i+2
			}
		}
		if c == '/' {
			if end() {
				return true
			}
			continue
		}
		if len(seg) < 3 {
			seg = append(seg, c)
		} else {
			seg = append(seg[:0], "xxx"...) // longer than "..": a name
		}
	}
	return end()
}

func (x *exchange) buildRequest(ctx *fasthttp.RequestCtx, target []byte, slash bool, body []byte) {
	req := &x.req
	ctx.Request.Header.CopyTo(&req.Header)
	// A body without a Content-Type goes without one: fasthttp would add
	// application/octet-stream, which FastAPI engines (vLLM, SGLang) do not
	// parse as JSON.
	req.Header.SetNoDefaultContentType(true)
	delConnectionNamed(&req.Header, ctx.Request.Header.All())
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Header.Del("Expect")
	req.Header.ResetConnectionClose()
	req.Header.SetHost(x.p.host)
	uri := target
	if x.p.prefix != nil || slash {
		x.uri = append(x.uri[:0], x.p.prefix...)
		if slash {
			x.uri = append(x.uri, '/')
		}
		uri = append(x.uri, target...)
		x.uri = uri
	}
	req.Header.SetRequestURIBytes(uri)
	req.SetBodyRaw(body)
}
