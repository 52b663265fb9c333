// Package proxy is tokentap's measuring reverse proxy: a fasthttp
// pass-through in front of any OpenAI-compatible engine that turns every
// chat and completions request going through it into a record.Record (via
// the tap), serves live Prometheus metrics and per-model percentiles, and
// can append every record to a JSONL capture for report and replay.
//
// The proxy is meant to be invisible: every method and path is forwarded,
// bytes are unchanged except where the proxy asks the engine for usage on a
// client's behalf and removes the usage chunk again, each upstream read is
// flushed to the client at once, and a client that leaves is noticed while
// the engine is still thinking (see watcher) so its request is cancelled.
package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/slo"
	"github.com/tokentap/tokentap/tap"
)

// Defaults of Config's zero values.
const (
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultMaxBodySize       = 128 << 20
	DefaultMaxConns          = 4096
	DefaultReadHeaderTimeout = 30 * time.Second
	DefaultKeepAliveTimeout  = 90 * time.Second
	// DefaultShutdownTimeout is how long a shutdown lets open requests end
	// (the command's --shutdown-timeout): below Kubernetes' default 30 s
	// grace period, so the cut requests are recorded before a SIGKILL.
	DefaultShutdownTimeout = 25 * time.Second
	// DefaultBodyTimeout is nginx's client_body_timeout.
	DefaultBodyTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's line and headers, and a response's
	// status line and headers, each way: a large JWT or an engine's long
	// headers pass, as they would reach the engine without tokentap.
	MaxHeaderBytes = 72 << 10
	// keepAliveIdle is how long an idle upstream connection is kept. Below
	// uvicorn's (vLLM, SGLang) 5 s keep-alive, so the proxy rarely sends on a
	// connection the engine is closing.
	keepAliveIdle = 4 * time.Second
	// upstreamBufferSize is the upstream read buffer every exchange keeps:
	// most response heads fit in it; a longer one moves to a buffer of
	// MaxHeaderBytes for that exchange only (see readHead).
	upstreamBufferSize = 4096
)

// Config configures a Proxy. Zero values take the documented defaults.
type Config struct {
	// Upstream is the engine's base URL, http(s)://host:port with an optional
	// path prefix. A trailing /v1 is dropped, since clients send /v1/... paths.
	Upstream string
	// IdleTimeout is the longest wait for the next byte from the engine
	// (including the wait for response headers, i.e. a prefill or a
	// non-streaming generation) or for the client to take the next write.
	// There is no whole-response deadline. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxBodySize is the largest request body accepted (default 128 MiB: a
	// batch of 248K-token prompts fits).
	MaxBodySize int
	// MaxBodyMemory bounds the request bodies still arriving, added up by
	// their Content-Length (bodies.go); a body that would go over gets a
	// 503 at once. Zero: DefaultMaxBodyMemory of the memory the process may
	// use; negative: none.
	MaxBodyMemory int64
	// BodyTimeout is the longest wait between two reads of a request body
	// (nginx's client_body_timeout); a stalled body gets a 408. Default
	// DefaultBodyTimeout. Over TLS the wait is for the whole body, and
	// IdleTimeout.
	BodyTimeout time.Duration
	// MaxConns caps connections to the engine (default 4096); requests
	// beyond it wait for a free connection.
	MaxConns int
	// ReadHeaderTimeout is how long a client has to send a request's
	// headers from the request's first byte (a new connection that sends
	// nothing is closed after it too); a client still sending then gets a
	// 408 and is closed. The body then has IdleTimeout. Default
	// DefaultReadHeaderTimeout; negative: none.
	ReadHeaderTimeout time.Duration
	// KeepAliveTimeout is how long an idle client connection is kept open
	// between requests. Default DefaultKeepAliveTimeout.
	KeepAliveTimeout time.Duration
	// MaxClientConns caps the client connections open at once; one over it
	// gets a 503 and is closed at once. Zero: half of the descriptors the
	// process may open (RLIMIT_NOFILE) less a reserve, so the proxy sheds
	// load before it runs out of them; negative: no cap.
	MaxClientConns int
	// MaxConnsPerIP caps a client address's open connections; a
	// connection over it gets a 429 and is closed. Zero:
	// DefaultMaxConnsPerIP of MaxClientConns, so that one address cannot
	// take every connection; negative: no cap.
	MaxConnsPerIP int
	// UpstreamCAs, when set, are the roots an https engine's certificate
	// must chain to (in place of the system's). Verification is never off.
	UpstreamCAs *x509.CertPool
	// TLS, when set, serves clients over TLS (it must hold a certificate).
	TLS *tls.Config
	// NoInject turns off asking the engine for usage on behalf of streaming
	// clients that did not ask for it; their token counts are then counted.
	NoInject bool
	// Capture, when set, receives every record as a JSON line.
	Capture io.Writer
	// CapturePrompts keeps request bodies in records (and captures).
	CapturePrompts bool
	// Clock is the run clock records are timed on; zero starts one in New.
	Clock record.Clock
	// Logger receives operational messages; secrets are never logged.
	Logger zerolog.Logger
	// SLO, when set, judges every finished record against these
	// objectives: live good and judged counts by model on /metrics and
	// /stats (slo.go, METHOD.md §6).
	SLO slo.Spec
	// OnRecord, when set, is called with every finished record, from one
	// goroutine, in order of completion. The record is reused after the call
	// returns: copy what must be kept.
	OnRecord func(*record.Record)
}

// Proxy is a measuring reverse proxy. Create it with New, serve clients
// with Serve (or Handler in a fasthttp.Server of your own) and the admin
// endpoints with AdminHandler, and stop it with Close.
type Proxy struct {
	cfg     Config
	shown   string // the upstream as messages show it: any password in it redacted
	hc      *fasthttp.HostClient
	lister  *http.Client // GET /v1/models (models.go)
	host    string
	prefix  []byte
	clock   record.Clock
	log     zerolog.Logger
	m       *metrics
	recs    chan *record.Record
	recDone chan struct{}
	capture *record.Writer
	// captureFailing says the capture's last flush failed (recorder, then
	// Close).
	captureFailing bool
	idPrefix       string
	seq            atomic.Uint64
	active         atomic.Int64 // requests being served
	closing        atomic.Bool

	recMu     sync.RWMutex // guards sending on recs against closing it
	recClosed bool

	bodies  *bodyBudget // request bodies arriving (bodies.go)
	workers *workers    // what follows a stream passed on from the loop (workers.go)

	liveMu   sync.Mutex
	open     map[*exchange]struct{}        // the requests being served, for a shutdown's cut
	cutting  bool                          // the shutdown's cut has begun: no request goes live (live)
	idle     map[*clientConn]struct{}      // connections waiting for their next request after a stream (keepAlive)
	held     map[*clientConn]chan net.Conn // hijacked connections fasthttp has not let go yet (releasing)
	heldN    atomic.Int64
	handing  map[*clientConn]struct{} // connections handed back the server has not counted yet (handIn)
	handingN atomic.Int64
	draining atomic.Bool // shutting down: /healthz says not ready

	exchanges sync.Pool

	mu  sync.Mutex
	srv *fasthttp.Server
	ln  net.Listener // the listener srv serves, closed by Close whatever the server did

	closed   chan struct{} // Close is done: a second Close waits for it
	closeErr error         // the first Close's error, once closed

	panicLogged    atomic.Bool
	internalLogged atomic.Bool
	failLogged     atomic.Int64 // unix ns of the last "engine did not answer" line
}

// upstreamDialer opens connections to the engine.
var upstreamDialer = net.Dialer{Timeout: 5 * time.Second}

var (
	http11          = []byte("HTTP/1.1")
	chatPath        = []byte("/v1/chat/completions")
	completionsPath = []byte("/v1/completions")
)

// New checks cfg and returns a proxy ready to serve.
func New(cfg Config) (*Proxy, error) {
	u, err := url.Parse(cfg.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q is not an http(s)://host:port URL of an engine", cfg.Upstream)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxBodySize <= 0 {
		cfg.MaxBodySize = DefaultMaxBodySize
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.KeepAliveTimeout <= 0 {
		cfg.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	memory := MemoryLimit()
	switch {
	case cfg.MaxClientConns == 0:
		cfg.MaxClientConns = defaultMaxClientConns(openFileLimit(), memory)
	case cfg.MaxClientConns < 0:
		cfg.MaxClientConns = 0
	}
	switch {
	case cfg.MaxConnsPerIP == 0:
		cfg.MaxConnsPerIP = defaultMaxConnsPerIP(cfg.MaxClientConns)
	case cfg.MaxConnsPerIP < 0:
		cfg.MaxConnsPerIP = 0
	}
	switch {
	case cfg.MaxBodyMemory == 0:
		cfg.MaxBodyMemory = defaultMaxBodyMemory(memory, cfg.MaxBodySize)
	case cfg.MaxBodyMemory < 0:
		cfg.MaxBodyMemory = 0
	}
	if cfg.UpstreamCAs != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream %q is plain http: a CA for the engine's certificate needs an https:// upstream", u.Redacted())
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil {
		return nil, errors.New("TLS for clients needs a certificate and its key")
	}
	clock := cfg.Clock
	if clock.Start().IsZero() {
		clock = record.NewClock()
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	prefix := strings.TrimRight(u.EscapedPath(), "/")
	prefix = strings.TrimSuffix(prefix, "/v1")
	p := &Proxy{
		closed: make(chan struct{}),
		cfg:    cfg,
		shown:  u.Redacted(),
		host:   u.Host,
		hc: &fasthttp.HostClient{
			Addr:                     addr,
			IsTLS:                    u.Scheme == "https",
			NoDefaultUserAgentHeader: true,
			MaxConns:                 cfg.MaxConns,
			MaxConnWaitTimeout:       cfg.IdleTimeout,
			MaxIdleConnDuration:      keepAliveIdle,
			SecureErrorLogMessage:    true,
			TLSConfig:                upstreamTLS(u.Hostname(), cfg.UpstreamCAs),
			DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
				// net's dialer, not fasthttp's: that one caps dials in flight
				// at 1,000, and a thousand clients arriving at once (the
				// soak's start) made some wait past the timeout: 502s.
				c, err := upstreamDialer.Dial("tcp", addr)
				if err != nil || u.Scheme == "https" {
					return c, err
				}
				return loopConn(c), nil
			},
		},
		clock:    clock,
		log:      cfg.Logger,
		m:        newMetrics(),
		recs:     make(chan *record.Record, 4096),
		recDone:  make(chan struct{}),
		idPrefix: "px" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-",
		open:     map[*exchange]struct{}{},
		idle:     map[*clientConn]struct{}{},
		held:     map[*clientConn]chan net.Conn{},
		handing:  map[*clientConn]struct{}{},
		bodies:   newBodyBudget(cfg.MaxBodyMemory),
		workers:  newWorkers(workerWait),
	}
	p.m.slo = cfg.SLO
	// The model list is read every few minutes: no connection is kept
	// idle for it (it would sit among the engine's connections as one the
	// proxy does not count), and an https engine's CA is the proxy's.
	p.lister = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: upstreamTLS(u.Hostname(), cfg.UpstreamCAs)}}
	p.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokentap_upstream_connections",
		Help: "Connections to the engine open now, busy or idle."}, func() float64 { return float64(p.hc.ConnsCount()) }))
	if prefix != "" {
		p.prefix = []byte(prefix)
	}
	if cfg.Capture != nil {
		p.capture = record.NewWriter(cfg.Capture)
		p.m.capturing = true
	}
	go p.recorder()
	return p, nil
}

// Clock returns the run clock the proxy's records are timed on.
func (p *Proxy) Clock() record.Clock { return p.clock }

// Handler returns the fasthttp handler that proxies one request.
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.serve }

// NewServer returns a fasthttp server configured for proxying: large
// request bodies and headers, no whole-response deadlines, upstream headers
// kept as they are, the client limits of Config, and errors in OpenAI's
// JSON shape.
func (p *Proxy) NewServer() *fasthttp.Server {
	srv := &fasthttp.Server{
		Handler:               p.serve,
		ErrorHandler:          p.clientError,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    p.cfg.MaxBodySize,
		ReadBufferSize:        MaxHeaderBytes,
		// A connection gives its read buffer back between requests, so
		// 1,000 idle or streaming clients do not hold 72 KiB each.
		ReduceMemoryUsage: true,
		IdleTimeout:       p.cfg.KeepAliveTimeout,
		// Idle worker goroutines end within 2 s (fasthttp keeps them 10 s),
		// so after a burst the goroutine count is soon back where it was: a
		// leak then shows (the fault suite and the soak check it). A worker
		// serves a connection for its life, so this costs a goroutine start
		// per new connection at most.
		MaxIdleWorkerDuration: time.Second,
		CloseOnShutdown:       true,
		// A stream the event loop passes on leaves fasthttp after its
		// head and comes back for its next request (loopresp.go).
		KeepHijackedConns: true,
		ConnState:         p.connState,
		// A body announced over the limit is refused before the client
		// is told to send it: no "100 Continue" before the 413.
		ExpectHandler: func(ctx *fasthttp.RequestCtx) int {
			if ctx.Request.Header.ContentLength() > p.cfg.MaxBodySize {
				p.m.rejected(rejectBodyTooLarge)
				if ctx.IsPost() && measuredPath(ctx.Path()) {
					p.refusedRecord(ctx, fasthttp.StatusRequestEntityTooLarge, record.BlameClient, fmt.Sprintf(
						"tokentap proxy: the request body is over --max-body-size (%d bytes); refused before the client sent it (Expect: 100-continue)", p.cfg.MaxBodySize))
				}
				if cc := baseConn(ctx.Conn()); cc != nil {
					cc.bodyIn() // its body will not come
					cc.served()
				}
				return fasthttp.StatusRequestEntityTooLarge
			}
			return fasthttp.StatusContinue
		},
		// fasthttp's own error texts then carry no request bytes (headers
		// with keys); the logger redacts besides.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{p.log},
	}
	if t := p.cfg.ReadHeaderTimeout; t > 0 {
		srv.ReadTimeout = t
	}
	// The head is in: the body gets its share of the body budget, or a
	// refusal before it is read (clientError: 503), and its timeout. On a
	// plain connection that is the first wait; every read then moves it
	// (clientConn.Read). Over TLS the body has IdleTimeout in all.
	bodyWait := p.cfg.BodyTimeout
	if p.cfg.TLS != nil {
		bodyWait = p.cfg.IdleTimeout
	}
	srv.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		rc := fasthttp.RequestConfig{ReadTimeout: bodyWait}
		if h.IsPost() && measuredPath(h.RequestURI()) {
			p.bodies.posted(h, string(h.RequestURI()))
		}
		if n := h.ContentLength(); n > 0 && n <= p.cfg.MaxBodySize && !p.bodies.take(h, int64(n)) {
			rc.MaxRequestBodySize = 1 // refused unread: ErrBodyTooLarge under --max-body-size
		}
		return rc
	}
	return srv
}

// Serve proxies the clients accepted on ln until Close (over TLS when
// Config.TLS is set).
func (p *Proxy) Serve(ln net.Listener) error {
	srv := p.NewServer()
	var cl net.Listener = newClientListener(ln, p)
	if p.cfg.TLS != nil {
		tc := p.cfg.TLS.Clone()
		if len(tc.NextProtos) == 0 {
			tc.NextProtos = []string{"http/1.1"}
		}
		cl = tls.NewListener(cl, tc)
	}
	p.mu.Lock()
	if p.closing.Load() {
		p.mu.Unlock()
		return errors.New("proxy is closed")
	}
	p.srv, p.ln = srv, cl
	p.mu.Unlock()
	if serveHook != nil {
		serveHook(p)
	}
	return srv.Serve(cl)
}

// serveHook, when set (by tests), runs in Serve between the server's
// setting up and its serving: where a Close can come in between.
var serveHook func(p *Proxy)

// live adds x to the requests being served, unless the shutdown's cut has
// begun (false). Close sets cutting and marks the open requests under the
// same lock: a request is either marked or never sent to the engine.
func (p *Proxy) live(x *exchange) bool {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	if p.cutting {
		return false
	}
	p.open[x] = struct{}{}
	return true
}

// eachOpen calls fn for every request being served.
func (p *Proxy) eachOpen(fn func(*exchange)) {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	for x := range p.open {
		fn(x)
	}
}

func (p *Proxy) unlive(x *exchange) {
	p.liveMu.Lock()
	delete(p.open, x)
	p.liveMu.Unlock()
}

// cutGrace is how long Close waits for the requests it cut to end and be
// recorded.
const cutGrace = 5 * time.Second

// Close shuts the proxy down as a proxy behind a load balancer should: it
// stops accepting, says not ready on /healthz, and lets the open requests
// end until ctx is done (its deadline: --shutdown-timeout); then it cuts
// the rest. Every request, cut ones included, is recorded, and the capture
// flushed, before Close returns; a capture that could not be written is
// an error, whether or not a stream was cut. A ctx cancelled (not timed
// out) returns context.Canceled after the same cut: a second Ctrl-C. A
// second Close, or one alongside, waits for the first (or its own ctx)
// and returns the first's error; so Close must not be called from
// OnRecord, which the first Close waits for.
func (p *Proxy) Close(ctx context.Context) error {
	if p.closing.Swap(true) {
		select {
		case <-p.closed:
			return p.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.closeErr = p.shutdown(ctx)
	close(p.closed)
	return p.closeErr
}

// shutdown is Close's work, done once.
func (p *Proxy) shutdown(ctx context.Context) error {
	p.draining.Store(true)
	p.closeIdle()
	p.workers.close()
	p.handedBack(ctx)
	p.mu.Lock()
	srv, ln := p.srv, p.ln
	p.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.ShutdownWithContext(ctx)
		// A Serve that had not yet given the server its listener left it
		// open (the server's shutdown found none to close): closed here,
		// its Serve returns and nothing is accepted after Close.
		_ = ln.Close()
	}
	for p.active.Load() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	// fasthttp's shutdown resets its stop flag when it returns (when ctx
	// is done, v1.78.0 server.go:2210): a connection the client kept alive
	// is served again. From here no request reaches the engine: one that
	// comes is refused (take); the open ones are cut below.
	p.liveMu.Lock()
	p.cutting = true
	p.liveMu.Unlock()
	if err == nil && p.active.Load() > 0 {
		// Open requests outlived ctx (the server's shutdown does not wait
		// for the streams the loop passes on, which left it): they are
		// cut below, and ctx says why.
		err = ctx.Err()
	}
	// A request whose body is still arriving has not reached the handler:
	// it is cut here, answered 503 and recorded (clientError).
	serving := map[net.Conn]bool{}
	p.eachOpen(func(x *exchange) { serving[x.client] = true })
	if cut := p.bodies.cutArriving(serving); len(cut) > 0 {
		p.log.Warn().Int("requests", len(cut)).Msg("shutting down: cutting requests whose bodies are still arriving; each gets a 503 and a record")
		for deadline := time.Now().Add(time.Second); p.bodies.waiting(cut) > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := p.active.Load(); n > 0 {
		p.log.Warn().Int64("open", n).Msg("shutting down: cutting the requests still open; each keeps its record")
		p.eachOpen((*exchange).markCut)
		p.eachOpen((*exchange).closeEngine)
		// A request cut before the engine answered gets its 503, and a
		// stream its end, in a moment; one still open then waits on its
		// client, whose connection is closed.
		wait := func(d time.Duration) {
			for deadline := time.Now().Add(d); p.active.Load() > 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		}
		wait(time.Second)
		p.eachOpen((*exchange).cutClient)
		wait(cutGrace)
	}
	// fasthttp's shutdown gave up when ctx ran out and serves the client
	// connections it holds again: each is ended here, so that nothing is
	// served after Close returns. A request that began arriving since the
	// first cut gets its 503 and record (clientError), a request pipelined
	// behind the last is refused with its record (take), a connection
	// waiting for a request is closed; what is still held after a second
	// is closed.
	serving = map[net.Conn]bool{}
	p.eachOpen(func(x *exchange) { serving[x.client] = true })
	p.bodies.cutHeld(serving)
	for deadline := time.Now().Add(time.Second); (p.bodies.heldConns() > 0 || p.active.Load() > 0) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	p.bodies.closeHeld()
	if n := p.active.Load(); n > 0 {
		p.log.Error().Int64("open", n).Msg("shutting down: requests still open after being cut; their records are lost (please report)")
	}
	p.recMu.Lock()
	p.recClosed = true
	close(p.recs)
	p.recMu.Unlock()
	<-p.recDone
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil // streams cut at shutdown are expected
	}
	if p.capture != nil {
		// A capture not written is output lost, however the shutdown went.
		if ferr := p.flushCapture(true); ferr != nil {
			err = errors.Join(fmt.Errorf("capture: %w", ferr), err)
		}
	}
	return err
}

// Draining says whether the proxy is shutting down (Close was called).
func (p *Proxy) Draining() bool { return p.draining.Load() }

// Stats returns the per-model summary served at /stats; reset starts a new
// period (Prometheus counters are never reset).
func (p *Proxy) Stats(reset bool) *Stats { return p.m.stats(reset) }

func (p *Proxy) recorder() {
	defer close(p.recDone)
	for r := range p.recs {
		// The record is kept whatever its bookkeeping does: a fault in
		// the metrics is recovered and counted, and the capture still
		// gets the record.
		p.guard("metrics", func() { p.m.add(r) })
		if p.capture != nil {
			p.captureRecord(r)
			if len(p.recs) == 0 {
				_ = p.flushCapture(false)
			}
		}
		if p.cfg.OnRecord != nil {
			p.guard("OnRecord", func() { p.cfg.OnRecord(r) })
		}
		r.Reset()
		recordPool.Put(r)
	}
}

// captureRecord writes one record to the capture. A record the capture
// cannot take (MaxHeld bytes already wait for a file that fails) is
// counted (tokentap_capture_errors_total, /stats) and logged, each one,
// with the reason: a capture never loses a record in silence.
func (p *Proxy) captureRecord(r *record.Record) {
	if err := p.capture.Write(r); err != nil {
		p.m.captureFailed.Add(1)
		p.log.Error().Err(err).Str("request", r.ID).Int("records_lost", 1).
			Msg("capture: a record could not be written; it is counted in tokentap_capture_errors_total")
	}
	p.m.captureHeld.Store(int64(p.capture.Held()))
}

// flushCapture writes the records waiting to the capture file. A write
// that fails keeps them, in order, for the next flush (a full disk that
// gets room again loses nothing): the failure is logged when it starts and
// when it ends, and the records waiting are shown meanwhile
// (tokentap_capture_held_records, /stats). final says nothing will retry
// them: what still waits is lost, counted and logged.
func (p *Proxy) flushCapture(final bool) error {
	before := p.capture.Written()
	err := p.capture.Flush()
	p.m.captured.Add(p.capture.Written() - before)
	held := p.capture.Held()
	p.m.captureHeld.Store(int64(held))
	switch {
	case err != nil && final:
		if held > 0 {
			p.m.captureFailed.Add(uint64(held))
			p.m.captureHeld.Store(0)
			p.log.Error().Err(err).Int("records_lost", held).
				Msg("capture: the records still waiting could not be written at shutdown; they are counted in tokentap_capture_errors_total")
		}
	case err != nil && !p.captureFailing:
		p.log.Error().Err(err).Int("records_held", held).
			Msg("capture: writing to the file failed; the records wait in memory (up to 16 MiB) and are written when it works again")
	case err == nil && p.captureFailing:
		p.log.Warn().Msg("capture: writing to the file works again; the records that waited are written")
	}
	p.captureFailing = err != nil
	return err
}

// guard runs fn, recovering a panic: counted in
// tokentap_internal_errors_total and logged once, so that no fault inside
// tokentap ends the process and the streams it serves.
func (p *Proxy) guard(what string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			p.internalError(what, r)
		}
	}()
	fn()
}

// internalError counts and logs (once) a recovered panic.
func (p *Proxy) internalError(what string, r any) {
	p.m.recPanics.Add(1)
	if !p.internalLogged.Swap(true) {
		p.log.Error().Str("where", what).Str("panic", redact(fmt.Sprint(r))).Str("stack", string(debug.Stack())).
			Msg("a fault inside tokentap was recovered (please report); the proxy goes on; further faults are counted in tokentap_internal_errors_total, not logged")
	}
}

// serve is the fasthttp handler. A fault inside it is recovered: the
// client gets a 502, the request's record is kept and the proxy serves on.
func (p *Proxy) serve(ctx *fasthttp.RequestCtx) {
	var x *exchange
	if cc := baseConn(ctx.Conn()); cc != nil {
		defer cc.served()
	}
	defer func() {
		if r := recover(); r != nil {
			p.internalError("handler", r)
			if x != nil && !x.handed {
				x.salvage()
			}
			ctx.Response.Reset()
			ctx.SetStatusCode(fasthttp.StatusBadGateway)
			ctx.SetContentType("application/json")
			ctx.SetBody(openAIError("tokentap proxy: a fault inside tokentap ended this request (please report it); the proxy serves on", "proxy_error", fasthttp.StatusBadGateway))
			ctx.SetConnectionClose()
		}
	}()
	x = p.handle(ctx)
}

// baseConn is the clientConn under a client connection (a TLS one's
// socket), or nil.
func baseConn(c net.Conn) *clientConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cc, _ := c.(*clientConn)
	return cc
}

// refuse answers a request the proxy will not send to the engine, the
// client's fault.
func (p *Proxy) refuse(ctx *fasthttp.RequestCtx, status int, reason rejectReason, msg string) {
	p.refuseAs(ctx, status, reason, record.BlameClient, "invalid_request_error", msg)
}

// refuseAs answers a request the proxy will not send to the engine, with
// the error type kind, and records it (every measured request has a
// record) with blame.
func (p *Proxy) refuseAs(ctx *fasthttp.RequestCtx, status int, reason rejectReason, blame record.Blame, kind, msg string) {
	p.m.rejected(reason)
	if ctx.IsPost() && measuredPath(ctx.Path()) {
		p.refusedRecord(ctx, status, blame, msg)
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(openAIError(msg, kind, status))
	ctx.SetConnectionClose()
}

// refuseShutdown answers a request that came after the shutdown gave up
// waiting (on a connection the client kept alive): it is not sent to the
// engine, and it is tokentap's doing, not the client's.
func (p *Proxy) refuseShutdown(ctx *fasthttp.RequestCtx) {
	p.refuseAs(ctx, fasthttp.StatusServiceUnavailable, rejectShutdown, record.BlameTokentap, "proxy_shutting_down",
		"tokentap proxy: the proxy is shutting down; this request came on a connection kept alive from before and was not sent to the engine: send it again (to another replica)")
	ctx.Response.Header.Set("Retry-After", "1")
	// The client may have sent more behind it: a close with that unread
	// would reset the answers on their way (clientError lingers the same).
	setLinger(ctx.Conn())
	_, overTLS := ctx.Conn().(*tls.Conn)
	if cc := baseConn(ctx.Conn()); cc != nil && (overTLS || cc.nLines > 1) {
		// More requests may be pipelined behind this one (scanned, or
		// over TLS not known): the connection stays open for their
		// refusals and records, and is cut, so that it reads nothing more
		// than what the proxy holds already, then closes.
		cc.cut.Store(true)
		ctx.Response.Header.ResetConnectionClose()
	}
}

// begin starts measuring a chat or completions request.
func (x *exchange) begin(body, path []byte, sent time.Duration) {
	p := x.p
	ri := inspect(body)
	rec := recordPool.Get().(*record.Record)
	rec.ID = p.idPrefix + strconv.FormatUint(p.seq.Add(1), 10)
	rec.Model = ri.model
	rec.API = record.Chat
	if bytes.Equal(path, completionsPath) {
		rec.API = record.Completions
	}
	rec.Stream = ri.stream
	rec.MaxTokens = ri.maxTokens
	rec.Sent = sent
	rec.Wall = p.clock.Wall(sent)
	if p.cfg.CapturePrompts {
		rec.Request = append([]byte(nil), body...)
	}
	strip := false
	if ri.wantsInjection() && !p.cfg.NoInject {
		if head, insert, tail, ok := usageSplice(body, ri); ok {
			x.spliced = true
			x.sp.set(head, insert, tail)
			strip = true
		}
	}
	// The tap must read the body as it is: ask the engine for no encoding
	// (without the header any encoding is acceptable, RFC 9110 §12.5.3).
	x.req.Header.Set("Accept-Encoding", "identity")
	x.rec = rec
	p.m.inFlight.Add(1)
	x.measure = x.safely(func() {
		if x.tap == nil {
			x.tap = tap.NewStream(p.clock)
		}
		x.tap.Begin(rec)
		x.tap.StripUsage(strip)
		x.tap.SetScrub(x.scrubFn)
	})
	x.strip = strip && x.measure
	if strip && !x.measure {
		x.sp, x.spliced = splice{}, false // unmeasured: nothing would remove the usage chunk
	}
}
