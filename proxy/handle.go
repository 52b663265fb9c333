package proxy

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/record"
)

// handle proxies one request, in named phases, as caddy's reverse proxy
// does (ServeHTTP → prepareRequest → reverseProxy → finalizeResponse):
//
//   - admit: what the proxy will not send to the engine is refused here;
//   - take: an exchange for the request, on its client's connection;
//   - prepare: the engine's request, and the record that measures it;
//   - roundTrip: sent to the engine, the answer's head read (resend.go);
//   - respond: the head to the client, the body handed to fasthttp as a
//     stream (exchange.go passes it on and measures it).
//
// It returns the exchange it took (nil when it refused the request), for
// serve's recovery.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) (x *exchange) {
	sent := p.clock.Now()
	target, slash, ok := p.admit(ctx)
	if !ok {
		return nil
	}
	if x = p.take(ctx, &sent); x == nil {
		// The stop of the last request's writes may have left its deadline
		// on the connection (the cut's grace, or one past): the refusal gets
		// one of its own, as short.
		_ = ctx.Conn().SetWriteDeadline(time.Now().Add(cutGraceWrites))
		if cc := baseConn(ctx.Conn()); cc != nil {
			cc.deadline = true
		}
		p.refuseShutdown(ctx)
		p.active.Add(-1) // after its record: Close waits for it
		return nil
	}
	x.prepare(ctx, target, slash, sent)
	watching := x.watch.start(x.client, x.goneFn)
	if err := x.roundTrip(); err != nil {
		if watching {
			x.watch.stop()
		}
		x.fail(ctx, err)
		x.finish()
		return x
	}
	if respondHook != nil {
		respondHook(x)
	}
	x.respond(ctx, watching)
	return x
}

// respondHook, when set (by tests), runs between the engine's head and
// respond: the moment before the body is passed on.
var respondHook func(x *exchange)

// admit gives the body's share of the budget back (it is in), and refuses
// what is not a request for the engine: CONNECT, a malformed head, a
// target that is no path, a path above the root. It returns the target in
// origin form.
func (p *Proxy) admit(ctx *fasthttp.RequestCtx) (target []byte, slash, ok bool) {
	_, _ = p.bodies.give(&ctx.Request.Header)
	if cc := baseConn(ctx.Conn()); cc != nil {
		cc.bodyIn()
	}
	if ctx.IsConnect() {
		p.refuse(ctx, fasthttp.StatusMethodNotAllowed, rejectBadTarget,
			"tokentap proxy: CONNECT is for forward proxies; tokentap is a reverse proxy in front of one engine: send requests such as POST /v1/chat/completions to it")
		return nil, false, false
	}
	if msg, status := malformedRequest(&ctx.Request.Header); msg != "" {
		p.refuse(ctx, status, rejectBadRequest, msg)
		return nil, false, false
	}
	target, slash, ok = originForm(ctx.Request.Header.RequestURI())
	if !ok {
		p.refuse(ctx, fasthttp.StatusBadRequest, rejectBadTarget,
			"tokentap proxy: the request target is not a path (/v1/...) or an http(s):// URL; send requests such as POST /v1/chat/completions")
		return nil, false, false
	}
	if aboveRoot(target) {
		p.refuse(ctx, fasthttp.StatusBadRequest, rejectBadTarget,
			"tokentap proxy: the request path climbs above the root with /../ segments; send requests such as POST /v1/chat/completions")
		return nil, false, false
	}
	return target, slash, true
}

// take takes an exchange for the request and readies its client's
// connection for it; sent becomes when the request's last byte arrived,
// where the connection knows (the kernel's receive stamp). It returns nil
// once the shutdown's cut has begun (live): the request is refused, and
// the caller gives back its count in active once it is recorded.
func (p *Proxy) take(ctx *fasthttp.RequestCtx, sent *time.Duration) *exchange {
	p.active.Add(1)
	x := p.getExchange()
	x.client = ctx.Conn() // before live: Close reads it from the open set
	if !p.live(x) {
		x.put()
		return nil
	}
	if cc := baseConn(x.client); cc != nil {
		*sent = cc.sent(p.clock, *sent)
		if cc.deadline {
			// The last exchange on this connection left a write deadline
			// for fasthttp's final flush (finish); this one starts without.
			_ = x.client.SetWriteDeadline(time.Time{})
			cc.deadline = false
		}
	}
	if p.cfg.ReadHeaderTimeout > 0 {
		// The request is in: the body's read deadline must not end the
		// client watcher's wait (a prefill may take longer).
		_ = x.client.SetReadDeadline(time.Time{})
	}
	return x
}

// prepare builds the engine's request and, for a chat or completions
// POST, starts its record.
func (x *exchange) prepare(ctx *fasthttp.RequestCtx, target []byte, slash bool, sent time.Duration) {
	x.head = ctx.IsHead()
	body := ctx.Request.Body()
	path := ctx.Path()
	x.buildRequest(ctx, target, slash, body)
	if ctx.IsPost() && measuredPath(path) {
		x.begin(body, path, sent)
	} else {
		x.p.m.passed.Add(1)
	}
}

// respond gives the client the engine's head, as the proxy's, and hands
// fasthttp the body to stream (x, as its body stream), or finishes an
// answer without one. watching says the client watcher runs.
func (x *exchange) respond(ctx *fasthttp.RequestCtx, watching bool) {
	resp := &ctx.Response
	x.hdr.CopyTo(&resp.Header)
	// CopyTo brings the engine header's default-Content-Type setting: an
	// answer the engine sent without one must reach the client without one.
	resp.Header.SetNoDefaultContentType(true)
	// The status line is the proxy's: its version is HTTP/1.1 whatever the
	// engine's was (RFC 9110 §6.2), so a 1.0 or 2.0 in the engine's line
	// does not make the client misread the chunked framing.
	resp.Header.SetProtocol(http11)
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	delConnectionNamed(&resp.Header, x.hdr.All())
	resp.Header.ResetConnectionClose()
	if x.measure {
		x.status(x.hdr.StatusCode())
	}
	if x.body.done {
		// No body to stream (HEAD, 204, 304, empty): finish now.
		if watching {
			x.watch.stop()
		}
		if cl := x.hdr.ContentLength(); x.head && cl >= 0 {
			resp.Header.SetContentLength(cl)
			resp.SkipBody = true
		} else {
			resp.SetBodyRaw(nil)
		}
		x.end(nil, record.BlameNone)
		x.finish()
		return
	}
	size := -1
	if x.body.frame == frameLength && !x.stripping() {
		size = int(x.body.left)
		x.direct = true
	}
	// The head goes out at once: a stream's, as the engine sent it before
	// its prefill (a client waiting for headers must not wait for the first
	// token); a body of known length's, since WriteTo then writes the body
	// to the connection itself (x.direct).
	// (Even a stream whose whole body seems to have come with its head:
	// bodyInHand is a guess, and the tap may hold back all it has.)
	resp.ImmediateHeaderFlush = true
	// fasthttp calls WriteTo (which streams the body, flushing every
	// upstream read) after this handler returns, then CloseWithError.
	x.handed = true
	if size < 0 && !ctx.Request.Header.IsHTTP11() {
		// An HTTP/1.0 client cannot read chunked framing, which fasthttp
		// gives every body of unknown length (RFC 9112 §6.1): the body is
		// delimited by the connection's close instead, written here.
		resp.Header.SetConnectionClose()
		head := append([]byte(nil), resp.Header.Header()...)
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			_, err := c.Write(head)
			if err == nil {
				_, err = x.WriteTo(c)
			}
			_ = x.CloseWithError(err)
			_ = c.Close() // the server keeps hijacked connections open
		})
		return
	}
	if size < 0 {
		if srv := x.loopServer(resp); srv != nil {
			x.respondOnLoop(ctx, srv)
			return
		}
	}
	resp.SetBodyStream(x, size)
}
