package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/record"
)

// rejectReason says why the proxy refused a client's request or
// connection (the reason label of tokentap_client_rejected_total).
type rejectReason int

const (
	rejectReadTimeout     rejectReason = iota // headers (or body) not in by their deadline
	rejectHeadersTooLarge                     // request line and headers over MaxHeaderBytes
	rejectBodyTooLarge                        // body over Config.MaxBodySize
	rejectBadRequest                          // not HTTP/1.x fasthttp could read
	rejectBadTarget                           // CONNECT, or a target that is not a path or an http(s) URL
	rejectConnsPerIP                          // a connection over Config.MaxConnsPerIP
	rejectClientConns                         // a connection over Config.MaxClientConns
	rejectBodyMemory                          // a body over what is left of Config.MaxBodyMemory
	rejectShutdown                            // stopped by the shutdown before the engine: a body still arriving, a request after the cut, or one closed unanswered (unanswered)
	nRejectReasons
)

var rejectReasonNames = [nRejectReasons]string{
	"read_timeout", "headers_too_large", "body_too_large", "bad_request", "bad_target", "conns_per_ip", "max_client_conns",
	"body_memory", "shutdown",
}

// reservedFDs are the descriptors kept free of client connections: the
// listeners, the admin server's connections, the capture, event loops,
// and dials to the engine's model list.
const reservedFDs = 64

// defaultMaxClientConns is the client connection ceiling for a process
// allowed limit descriptors and memory bytes: half of the descriptors the
// reserve leaves, since every client streaming holds a connection to the
// engine too, and no more than half the memory holds at connMemory each.
// 0 (no ceiling) where neither is known.
func defaultMaxClientConns(limit int, memory int64) int {
	n := 0
	if limit > 0 {
		n = max(8, (limit-reservedFDs)/2)
	}
	if memory > 0 {
		m := int(max(8, memory/2/connMemory))
		if n == 0 || m < n {
			n = m
		}
	}
	return n
}

// defaultMaxConnsPerIP leaves a tenth of the client connection ceiling
// (at least 8) to the other addresses: one client, however many streams
// it opens, cannot take every connection. 0 (no cap) without a ceiling.
func defaultMaxConnsPerIP(maxClientConns int) int {
	if maxClientConns <= 0 {
		return 0
	}
	return max(1, maxClientConns-max(maxClientConns/10, 8))
}

// clientError is the server's ErrorHandler: it answers a request fasthttp
// could not read whole, in OpenAI's error shape, saying what to do. The
// connection is closed after the answer, lingering so the client can read
// it. A refused chat or completions request whose headers were read (a
// body over the limit, a body that did not come in time) becomes a record
// blamed on the client.
func (p *Proxy) clientError(ctx *fasthttp.RequestCtx, err error) {
	overBudget, post := p.bodies.give(&ctx.Request.Header)
	cc := baseConn(ctx.Conn())
	if cc != nil {
		cc.bodyIn()
	}
	status, reason := fasthttp.StatusBadRequest, rejectBadRequest
	blame := record.BlameClient
	var msg string
	var small *fasthttp.ErrSmallBuffer
	switch {
	case cc != nil && cc.cut.Load():
		status, reason, blame = fasthttp.StatusServiceUnavailable, rejectShutdown, record.BlameTokentap
		msg = "tokentap proxy: the proxy shut down while this request was still arriving; it was not sent to the engine: send it again (to another replica)"
		ctx.Response.Header.Set("Retry-After", "1")
	case overBudget && errors.Is(err, fasthttp.ErrBodyTooLarge):
		// Refused at its head for want of body budget (HeaderReceived).
		status, reason, blame = fasthttp.StatusServiceUnavailable, rejectBodyMemory, record.BlameTokentap
		msg = fmt.Sprintf("tokentap proxy: request bodies still arriving hold %d MiB, and this one's %d bytes would take them over the proxy's budget (--max-body-memory %d MiB); it was not read: retry shortly",
			p.bodies.used.Load()>>20, ctx.Request.Header.ContentLength(), p.cfg.MaxBodyMemory>>20)
		ctx.Response.Header.Set("Retry-After", "1")
	case errors.As(err, &small):
		status, reason = fasthttp.StatusRequestHeaderFieldsTooLarge, rejectHeadersTooLarge
		msg = fmt.Sprintf("tokentap proxy: the request line and headers exceed %d KiB; send shorter headers", MaxHeaderBytes>>10)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, reason = fasthttp.StatusRequestEntityTooLarge, rejectBodyTooLarge
		msg = fmt.Sprintf("tokentap proxy: the request body is over --max-body-size (%d bytes); it was not sent to the engine (raise --max-body-size to pass it)", p.cfg.MaxBodySize)
	case errors.Is(err, errBareLF):
		msg = "tokentap proxy: the request is not valid HTTP/1.1: " + errBareLF.Error()
	case isTimeout(err):
		status, reason = fasthttp.StatusRequestTimeout, rejectReadTimeout
		msg = fmt.Sprintf("tokentap proxy: the request did not arrive in time: headers within --read-header-timeout (%v), the body with at most --body-timeout (%v) between two reads",
			p.cfg.ReadHeaderTimeout, p.cfg.BodyTimeout)
	default:
		// fasthttp's text, with SecureErrorLogMessage, names the fault
		// without the request's bytes; redact is for safety.
		msg = "tokentap proxy: the request is not valid HTTP/1.1 (" + redact(dropQuoted(err.Error())) + ")"
	}
	p.m.rejected(reason)
	p.log.Debug().Str("client", ctx.RemoteAddr().String()).Str("reason", rejectReasonNames[reason]).Int("status", status).Msg(msg)
	setLinger(ctx.Conn())
	if measuredRequest(ctx) || post != "" {
		p.refusedRecord(ctx, status, blame, msg)
	}
	retry := ctx.Response.Header.Peek("Retry-After")
	ctx.Response.Reset()
	if len(retry) > 0 {
		ctx.Response.Header.SetBytesV("Retry-After", retry)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(openAIError(msg, "invalid_request_error", status))
	if cc != nil {
		cc.served()
	}
}

// measuredRequest says whether the request is a measured POST: from its
// parsed head, or, where fasthttp reset that before calling the error
// handler (a chunked body over the limit), from the request line the
// client connection saw.
func measuredRequest(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsPost() && measuredPath(ctx.Path()) {
		return true
	}
	method, path := requestLine(ctx)
	return method == fasthttp.MethodPost && measuredPath([]byte(path))
}

// requestLine is the method and path of the request fasthttp reads or
// answers now, from the request line the client connection's scan kept
// for it (plain connections), or the parsed head's.
func requestLine(ctx *fasthttp.RequestCtx) (method, path string) {
	if cc := baseConn(ctx.Conn()); cc != nil && len(cc.requestLine()) > 0 {
		f := strings.Fields(string(cc.requestLine()))
		if len(f) >= 2 {
			path, _, _ = strings.Cut(f[1], "?")
			return f[0], path
		}
	}
	return string(ctx.Method()), string(ctx.Path())
}

// refusedRecord records a chat or completions request the proxy refused
// before sending it to the engine: the client's fault, with the status the
// client got.
func (p *Proxy) refusedRecord(ctx *fasthttp.RequestCtx, status int, blame record.Blame, msg string) {
	now := p.clock.Now()
	rec := recordPool.Get().(*record.Record)
	rec.ID = p.idPrefix + strconv.FormatUint(p.seq.Add(1), 10)
	rec.API = record.Chat
	if _, path := requestLine(ctx); string(ctx.Path()) == string(completionsPath) || path == string(completionsPath) {
		rec.API = record.Completions
	}
	rec.Sent, rec.End = now, now
	if cc := baseConn(ctx.Conn()); cc != nil {
		rec.Sent = cc.sent(p.clock, now)
	}
	rec.Wall = p.clock.Wall(rec.Sent)
	rec.Status, rec.Outcome, rec.Blame, rec.Error = status, record.HTTPError, blame, msg
	p.emit(rec)
}

// unanswered records the measured requests whose heads were scanned on a
// client connection that ends at shutdown before fasthttp read them: ones
// pipelined behind an answer that closed the connection (fasthttp drops
// what its reader holds then), or a head cut off by Close's last sweep.
// No handler ran for them, so no other record is theirs; the client got
// no answer, which the record says. It runs where the connection is let
// go, on the goroutine that scanned it.
func (p *Proxy) unanswered(cc *clientConn) {
	if !p.closing.Load() {
		return
	}
	for _, line := range cc.lines[:cc.nLines] {
		f := strings.Fields(string(line))
		if len(f) < 2 || f[0] != fasthttp.MethodPost {
			continue
		}
		// The path as the handler would have read it (ctx.Path()): an
		// absolute form, %xx, dot segments and // normalised. A host is
		// given, so that "//v1/..." is a path, not an authority.
		var u fasthttp.URI
		if u.Parse([]byte("h"), []byte(f[1])) != nil {
			continue
		}
		path := string(u.Path())
		if !measuredPath([]byte(path)) {
			continue
		}
		p.m.rejected(rejectShutdown)
		now := p.clock.Now()
		rec := recordPool.Get().(*record.Record)
		rec.ID = p.idPrefix + strconv.FormatUint(p.seq.Add(1), 10)
		rec.API = record.Chat
		if path == string(completionsPath) {
			rec.API = record.Completions
		}
		rec.Sent, rec.End = cc.sent(p.clock, now), now
		rec.Wall = p.clock.Wall(rec.Sent)
		rec.Outcome, rec.Blame, rec.Error = record.Broken, record.BlameTokentap, errUnanswered.Error()
		p.emit(rec)
	}
	cc.nLines = 0
}

// errUnanswered ends a request the shutdown closed the connection of
// before the proxy read it.
var errUnanswered = errors.New("not answered: the proxy shut down and closed the connection before it read this request (pipelined behind another, or still arriving); it was not sent to the engine: send it again")

// emit hands a finished record to the recorder (dropped once the proxy is
// closed).
func (p *Proxy) emit(rec *record.Record) {
	p.recMu.RLock()
	closed := p.recClosed
	if !closed {
		p.recs <- rec
	}
	p.recMu.RUnlock()
	if closed {
		// Close waited for every open request and then some: a record
		// finished after it is counted and logged, never dropped unseen.
		p.m.recordsLate.Add(1)
		p.log.Error().Str("request", rec.ID).Str("outcome", string(rec.Outcome)).
			Msg("a request ended after the proxy had shut down its recorder; its record is lost (counted in tokentap_records_lost_total; please report)")
	}
}

// setLinger marks a client connection to close lingering (lingerClose).
func setLinger(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	switch b := c.(type) {
	case *clientConn:
		b.linger.Store(true)
	case *countedConn:
		b.linger.Store(true)
	}
}

// upstreamTLS is the TLS configuration for an https engine: nil (fasthttp's
// default: the system's roots) unless Config.UpstreamCAs gives roots.
// Nothing here turns verification off.
func upstreamTLS(host string, cas *x509.CertPool) *tls.Config {
	if cas == nil {
		return nil
	}
	return &tls.Config{RootCAs: cas, ServerName: host, MinVersion: tls.VersionTLS12}
}
