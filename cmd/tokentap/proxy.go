package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/proxy"
)

// proxyConfig holds the proxy's settings.
type proxyConfig struct {
	Upstream       string        `env:"UPSTREAM"`
	Listen         string        `env:"LISTEN"`
	Admin          string        `env:"ADMIN"`
	Capture        string        `env:"CAPTURE"`
	CapturePrompts bool          `env:"CAPTURE_PROMPTS"`
	NoInject       bool          `env:"NO_INJECT"`
	IdleTimeout    time.Duration `env:"IDLE_TIMEOUT"`
	MaxBodySize    byteSize      `env:"MAX_BODY_SIZE"`
	MaxBodyMemory  byteSize      `env:"MAX_BODY_MEMORY"`
	BodyTimeout    time.Duration `env:"BODY_TIMEOUT"`
	MaxConns       int           `env:"MAX_CONNS"`
	Procs          int           `env:"PROCS"`
	SLO            string        `env:"SLO"`

	ReadHeaderTimeout time.Duration `env:"READ_HEADER_TIMEOUT"`
	KeepAliveTimeout  time.Duration `env:"KEEP_ALIVE_TIMEOUT"`
	MaxConnsPerIP     int           `env:"MAX_CONNS_PER_IP"`
	MaxClientConns    int           `env:"MAX_CLIENT_CONNS"`
	ShutdownTimeout   time.Duration `env:"SHUTDOWN_TIMEOUT"`
	UpstreamCA        string        `env:"UPSTREAM_CA"`
	TLSCert           string        `env:"TLS_CERT"`
	TLSKey            string        `env:"TLS_KEY"`
	LogFlags
}

func defaultProxyConfig() proxyConfig {
	return proxyConfig{
		Listen:      "127.0.0.1:8080",
		Admin:       "127.0.0.1:8081",
		IdleTimeout: proxy.DefaultIdleTimeout,
		MaxBodySize: proxy.DefaultMaxBodySize,
		BodyTimeout: proxy.DefaultBodyTimeout,
		MaxConns:    proxy.DefaultMaxConns,

		ReadHeaderTimeout: proxy.DefaultReadHeaderTimeout,
		KeepAliveTimeout:  proxy.DefaultKeepAliveTimeout,
		ShutdownTimeout:   proxy.DefaultShutdownTimeout,
		LogFlags:          LogFlags{Level: "warn"},
	}
}

// setProcs sets GOMAXPROCS for the proxy: n when given, else 1 unless the
// GOMAXPROCS environment variable already chose. One P is the default
// because each streamed event wakes the proxy for a few microseconds of
// work: with more Ps idle, Go wakes a second thread to look for work on
// every event (futex wake-ups and context switches that cost more than the
// event's own forwarding; BenchmarkPassThrough measured about 10% more CPU
// per event with 2 than with 1), and an engine's host has better uses for
// that CPU. One thread forwards far more events per second than any engine
// streams, but forwards a burst (an engine's decode step gives every
// running stream its token at once) one event after another: at 256
// streams it added a median 0.5-1.2 ms where two threads added 0.26-0.5.
// --procs raises it. Streams from a plain-HTTP engine on Linux are passed
// on by an event loop (package evloop), which keeps a P of its own beside
// these: GOMAXPROCS is one more once the first stream runs.
// setMemoryLimit gives the Go runtime the cgroup's memory limit (less a
// tenth for what the runtime does not count) where GOMEMLIMIT is unset, as
// it does with the CPU quota for GOMAXPROCS: the collector then works
// harder near the limit instead of letting the kernel end the process.
func setMemoryLimit(log zerolog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if l, ok := proxy.CgroupMemoryLimit(); ok {
		debug.SetMemoryLimit(l - l/10)
		log.Debug().Int64("cgroup_limit", l).Int64("gomemlimit", l-l/10).Msg("GOMEMLIMIT from the cgroup's memory limit")
	}
}

func setProcs(n int) {
	switch {
	case n > 0:
		runtime.GOMAXPROCS(n)
	case os.Getenv("GOMAXPROCS") == "":
		runtime.GOMAXPROCS(1)
	}
}

// byteSize is a size flag: a number of bytes with an optional K, M or G
// suffix (binary: 1K = 1,024), e.g. 128M or 64MiB.
type byteSize int

// String is the size as a flag takes it: in K, M or G where it is a
// whole number of them (so help shows "128M", not 134217728).
func (b *byteSize) String() string {
	n := int(*b)
	for _, u := range []struct {
		suffix string
		size   int
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.Itoa(n/u.size) + u.suffix
		}
	}
	return strconv.Itoa(n)
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// UnmarshalText lets caarlos0/env read TOKENTAP_MAX_BODY_SIZE.
func (b *byteSize) UnmarshalText(t []byte) error { return b.Set(string(t)) }

func parseByteSize(s string) (int, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, optionally with K, M or G (e.g. 128M)", s)
	}
	return n * mult, nil
}

const proxySummary = `Measuring reverse proxy: point your clients at --listen instead of the engine. Every
method and path goes to --upstream unchanged; /v1/chat/completions and /v1/completions
(streaming or not) are measured: time to first token, time between tokens, token counts.
A streaming client that did not ask for usage still gets exactly what it would have got:
the proxy asks the engine for usage and removes the usage chunk (--no-inject turns this off).
Admin (loopback by default): GET /metrics (Prometheus), GET /stats (JSON percentiles per
model; POST with the header X-Tokentap-Reset: 1 resets), GET /healthz. --capture appends
every record as JSONL for report and replay. Authorization headers and API keys pass through and are never logged or captured.

A request is sent to the engine again only when a reused keep-alive connection failed under
it and that cannot run it twice: none of it had been written, or it carries an
Idempotency-Key (or is a GET/HEAD without a body) and no answer had begun; never after a
fresh connection failed. A POST the engine read and then dropped gets a 502, and a record.
Client limits: headers must arrive within --read-header-timeout, a body with at most
--body-timeout between two reads; idle connections close after --keep-alive-timeout; request
and response headers up to 72 KiB each way; a body over --max-body-size gets a 413, and one
that would take the bodies still arriving over --max-body-memory a 503. The defaults of
--max-client-conns and --max-body-memory come from the memory the proxy may use (GOMEMLIMIT,
else the cgroup's limit, which also sets GOMEMLIMIT when it is unset) as well as ulimit -n.
TLS: --tls-cert/--tls-key serve clients over HTTPS; an https --upstream is verified against
the system's roots ($SSL_CERT_FILE / $SSL_CERT_DIR replace them) or --upstream-ca.
Prints the proxy's URL on stdout. On Ctrl-C or SIGTERM it stops accepting, answers 503 on
/healthz, lets open requests finish for up to --shutdown-timeout, then cuts the rest; every
request is recorded, and it exits 130.`

func runProxy(args []string, stdout, stderr io.Writer) (code int) {
	cfg := defaultProxyConfig()
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	fs := newCLI("proxy", proxySummary, stdout, stderr)
	fs.StringVar(&cfg.Upstream, "upstream", cfg.Upstream, "the engine's base URL, e.g. http://127.0.0.1:8000 (required) [TOKENTAP_UPSTREAM]")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address clients connect to, host:port (0.0.0.0:8080 for other machines) [TOKENTAP_LISTEN]")
	fs.StringVar(&cfg.Admin, "admin", cfg.Admin, "address of /metrics and /stats; empty turns it off [TOKENTAP_ADMIN]")
	fs.StringVar(&cfg.Capture, "capture", cfg.Capture, "append every record to this JSONL file [TOKENTAP_CAPTURE]")
	fs.BoolVar(&cfg.CapturePrompts, "capture-prompts", cfg.CapturePrompts, "keep request bodies (prompt text) in captured records [TOKENTAP_CAPTURE_PROMPTS]")
	fs.BoolVar(&cfg.NoInject, "no-inject", cfg.NoInject, "never add stream_options.include_usage for clients; output tokens are then counted [TOKENTAP_NO_INJECT]")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "longest wait for the next byte from the engine (prefill and non-streaming generation included) or for the client to read; there is no whole-response deadline [TOKENTAP_IDLE_TIMEOUT]")
	fs.Var(&cfg.MaxBodySize, "max-body-size", "largest request body accepted, bytes with optional K/M/G [TOKENTAP_MAX_BODY_SIZE]")
	fs.Var(&cfg.MaxBodyMemory, "max-body-memory", "most memory the request bodies still arriving may hold, added up by their Content-Length; a body over what is left gets a 503 at once, unread; 0: a quarter of the memory the proxy may use, at least --max-body-size [TOKENTAP_MAX_BODY_MEMORY]")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", cfg.BodyTimeout, "longest wait between two reads of a request body (as nginx's client_body_timeout); a body that stalls longer gets a 408 [TOKENTAP_BODY_TIMEOUT]")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "most connections to the engine; more requests wait for one [TOKENTAP_MAX_CONNS]")
	fs.IntVar(&cfg.Procs, "procs", cfg.Procs, "threads running the proxy's Go code at once (GOMAXPROCS), besides the event loop that passes streams on; 0 means $GOMAXPROCS when set, else 1: the least CPU per event; 2 or more lower the latency added when hundreds of streams get their tokens at the same moment [TOKENTAP_PROCS]")
	fs.StringVar(&cfg.SLO, "slo", cfg.SLO, sloHelp+"; live good and judged request counts per model on /metrics and /stats")
	fs.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", cfg.ReadHeaderTimeout, "a client must send a request's headers within this of the request's first byte, else it gets a 408 and is closed; a new connection that sends nothing for this long is closed; 0 turns it off [TOKENTAP_READ_HEADER_TIMEOUT]")
	fs.DurationVar(&cfg.KeepAliveTimeout, "keep-alive-timeout", cfg.KeepAliveTimeout, "how long an idle client connection stays open between requests [TOKENTAP_KEEP_ALIVE_TIMEOUT]")
	fs.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", cfg.MaxConnsPerIP, "most open connections from one client address; more get a 429 and are closed; 0: the client connection ceiling less a tenth (at least 8), so one address cannot take every connection; -1: unlimited [TOKENTAP_MAX_CONNS_PER_IP]")
	fs.IntVar(&cfg.MaxClientConns, "max-client-conns", cfg.MaxClientConns, "most client connections open at once; more get a 503 and are closed at once, so the proxy never runs out of file descriptors or memory; 0: half of the open-file limit (ulimit -n) less a reserve, and at most one per 256 KiB of the memory the proxy may use; -1: no ceiling [TOKENTAP_MAX_CLIENT_CONNS]")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "on SIGTERM or Ctrl-C: stop accepting, answer 503 on /healthz, and let open requests finish for up to this long; then cut the rest (every request keeps its record) [TOKENTAP_SHUTDOWN_TIMEOUT]")
	fs.StringVar(&cfg.UpstreamCA, "upstream-ca", cfg.UpstreamCA, "PEM file of the CA certificate(s) an https --upstream's certificate must chain to, instead of the system's roots (verification is never turned off) [TOKENTAP_UPSTREAM_CA]")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate (chain) to serve clients over HTTPS, with --tls-key; for a proxy clients reach over a network [TOKENTAP_TLS_CERT]")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key of --tls-cert [TOKENTAP_TLS_KEY]")
	cfg.LogFlags.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tokentap proxy: unexpected arguments %q (every setting is a flag; see --help)\n", fs.Args())
		return exitUsage
	}
	if cfg.ReadHeaderTimeout < 0 || cfg.KeepAliveTimeout < 0 || cfg.ShutdownTimeout < 0 || cfg.MaxBodyMemory < 0 {
		fmt.Fprintf(stderr, "tokentap proxy: --read-header-timeout, --keep-alive-timeout, --shutdown-timeout and --max-body-memory cannot be negative\n")
		return exitUsage
	}
	if cfg.MaxConnsPerIP < -1 {
		fmt.Fprintf(stderr, "tokentap proxy: --max-conns-per-ip %d: want a positive cap, 0 (from --max-client-conns) or -1 (none)\n", cfg.MaxConnsPerIP)
		return exitUsage
	}
	if cfg.BodyTimeout <= 0 {
		fmt.Fprintf(stderr, "tokentap proxy: --body-timeout %v: want a positive duration, e.g. 60s (the longest wait between two reads of a request body)\n", cfg.BodyTimeout)
		return exitUsage
	}
	if cfg.IdleTimeout <= 0 {
		fmt.Fprintf(stderr, "tokentap proxy: --idle-timeout %v: want a positive duration, e.g. 10m (the longest wait for the engine's next byte)\n", cfg.IdleTimeout)
		return exitUsage
	}
	if cfg.MaxClientConns < -1 {
		fmt.Fprintf(stderr, "tokentap proxy: --max-client-conns %d: want a positive ceiling, 0 (from the open-file limit) or -1 (none)\n", cfg.MaxClientConns)
		return exitUsage
	}
	if cfg.Procs < 0 {
		fmt.Fprintf(stderr, "tokentap proxy: --procs %d: want 0 (default) or a positive number of threads\n", cfg.Procs)
		return exitUsage
	}
	err := checkListen(fs.source("listen"), cfg.Listen)
	if err == nil && cfg.Admin != "" { // empty turns the admin address off
		err = checkListen(fs.source("admin"), cfg.Admin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	if cfg.Upstream == "" {
		fmt.Fprintf(stderr, "tokentap proxy: --upstream is required: the engine's base URL, e.g. --upstream http://127.0.0.1:8000\n")
		return exitUsage
	}
	objectives, err := parseSLO(cfg.SLO)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	upstream, err := targetURL(cfg.Upstream, fs.source("upstream"))
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	cfg.Upstream = upstream
	shown := upstream // messages show it with any password redacted
	if u, err := url.Parse(upstream); err == nil {
		shown = u.Redacted()
	}
	log, err := cfg.LogFlags.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	pc := proxy.Config{SLO: objectives,
		Upstream: cfg.Upstream, IdleTimeout: cfg.IdleTimeout, MaxBodySize: int(cfg.MaxBodySize),
		MaxConns: cfg.MaxConns, NoInject: cfg.NoInject, CapturePrompts: cfg.CapturePrompts, Logger: log,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, KeepAliveTimeout: cfg.KeepAliveTimeout, MaxConnsPerIP: cfg.MaxConnsPerIP,
		MaxClientConns: cfg.MaxClientConns, MaxBodyMemory: int64(cfg.MaxBodyMemory), BodyTimeout: cfg.BodyTimeout,
	}
	if pc.ReadHeaderTimeout == 0 {
		pc.ReadHeaderTimeout = -1 // the flag's 0 is "off"; the Config's 0 is the default
	}
	if cfg.UpstreamCA != "" {
		pool, err := loadCAs(cfg.UpstreamCA)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap proxy: --upstream-ca: %v\n", err)
			return exitUsage
		}
		pc.UpstreamCAs = pool
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		fmt.Fprintf(stderr, "tokentap proxy: --tls-cert and --tls-key go together: give both to serve HTTPS, or neither\n")
		return exitUsage
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap proxy: --tls-cert/--tls-key: %v\n", err)
			return exitUsage
		}
		pc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.Capture != "" {
		f, err := os.OpenFile(cfg.Capture, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap proxy: --capture: %v\n", err)
			return exitUsage // a file it cannot open is a wrong flag, as matrix --out's
		}
		defer func() {
			// The proxy flushed every record into f at its close; a file
			// that fails even now (a full disk, NFS) lost them: say so.
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "tokentap proxy: --capture %s: closing the file: %v (the last records may be lost)\n", cfg.Capture, err)
				code = max(code, exitError)
			}
		}()
		pc.Capture = f
	}
	p, err := proxy.New(pc)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: %v\n", err)
		return exitUsage
	}
	// A hang-up (the terminal or SSH session closed) shuts down as SIGTERM
	// does, records kept, instead of killing the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A log written to a pipe whose reader is gone (… 2>&1 | tee, tee
	// killed) must fail the write, not end the proxy with SIGPIPE: Go
	// does the latter for stdout and stderr unless SIGPIPE is notified.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	setProcs(cfg.Procs)
	setMemoryLimit(log)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap proxy: --listen: %v\n", err)
		return exitError
	}
	var admin *http.Server
	adminURL := "off"
	if cfg.Admin != "" {
		aln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "tokentap proxy: --admin: %v\n", err)
			return exitError
		}
		admin = &http.Server{Handler: p.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = admin.Serve(aln) }()
		adminURL = "http://" + aln.Addr().String()
		if ta, ok := aln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
			fmt.Fprintf(stderr, "tokentap proxy: warning: --admin %s is reachable from other machines: /metrics and /stats show which models clients use; keep it on loopback (127.0.0.1:8081) unless a firewall guards it\n", cfg.Admin)
		}
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- p.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	if pc.TLS != nil {
		url = "https://" + ln.Addr().String()
	}
	log.Info().Str("listen", url).Str("upstream", shown).Str("admin", adminURL).Msg("proxy serving")
	fmt.Fprintf(stderr, "tokentap proxy: %s -> %s (metrics: %s/metrics, stats: %s/stats)\n", url, shown, adminURL, adminURL)
	fmt.Fprintln(stdout, url)
	// Serve whatever the engine's state, but say what it is.
	var listErr *proxy.ListError
	switch models, err := p.WatchModels(ctx, 5*time.Minute); {
	case errors.As(err, &listErr):
		fmt.Fprintf(stderr, "tokentap proxy: the upstream %s answers, but not with its models (%v); metrics label requests by the model clients name (at most 100) until it lists them\n", shown, err)
	case err != nil:
		fmt.Fprintf(stderr, "tokentap proxy: the upstream %s does not answer (%v); serving anyway: requests fail until it does\n", shown, err)
	default:
		fmt.Fprintf(stderr, "tokentap proxy: the upstream serves %s; metrics label requests by these models, others as \"other\"\n", strings.Join(models, ", "))
	}

	code = exitOK
	select {
	case <-ctx.Done():
		code = exitInterrupted
	case err := <-serveErr:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintf(stderr, "tokentap proxy: serving: %v\n", err)
			code = exitError
		}
	}
	// Shut down as a load balancer expects: no new connections, /healthz
	// answers 503, open requests get --shutdown-timeout to end; then the
	// rest are cut, and every request keeps its record. The admin server
	// stays up until then, so the drain is seen.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if n := p.Open(); n > 0 {
		fmt.Fprintf(stderr, "tokentap proxy: stopping: waiting up to %v (--shutdown-timeout) for %d open requests to finish (Ctrl-C again cuts them now)\n", cfg.ShutdownTimeout, n)
	}
	// Whatever the count: a body still arriving, or a request that starts
	// in the drain, is not in it, and Ctrl-C again must still cut.
	defer cutOnSignal(sctx, cancel)()
	switch err := p.Close(sctx); {
	case errors.Is(err, context.Canceled):
		// A second Ctrl-C: the open requests were cut, as asked.
		fmt.Fprintf(stderr, "tokentap proxy: stopped at once; the open requests were cut and recorded\n")
	case err != nil:
		fmt.Fprintf(stderr, "tokentap proxy: shutting down: %v\n", err)
		code = exitError
	}
	if admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		_ = admin.Shutdown(actx)
		acancel()
	}
	return code
}

// loadCAs reads a PEM file of CA certificates into a pool.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate (want -----BEGIN CERTIFICATE----- blocks)", file)
	}
	return pool, nil
}
