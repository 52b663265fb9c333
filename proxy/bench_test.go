//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/benchcpu"
	"github.com/tokentap/tokentap/internal/test/nginxref"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/tap"
)

// BenchmarkPassThrough is the proxy's side of `make bench`: one fake engine
// (in this process, ground-truth ledger on), reached directly, through
// tokentap's proxy (the built binary, a child process) and through nginx
// (Debian's, proxy_buffering off, a child process), side by side.
//
// Per event latency is the client's arrival time minus the fake's write
// time (ledger), so "added" is a path's percentile minus the direct one.
// CPU per event is the proxy process's CPU time (its CPU clock, read with
// clock_gettime on the child's process CPU clock: nanosecond resolution,
// nothing of the fake or the client in it) over the measured run divided by
// the token events that went through; CPU per request the same over
// streams of one token (requests/streams=64), with the system calls a
// request makes (where perf can count them). Resident memory per open stream is
// the growth of the proxy's VmRSS from idle to 1,024 open streams, divided
// by 1,024. Every figure is also taken for two floors, relays that measure
// nothing (floor_test.go: Go's net package, and plain fasthttp), which say
// what part of tokentap's is its own and what part a Go proxy pays anyway.
//
// Where taskset and two CPUs exist, this process (fake and clients) runs
// on CPU 0 and each proxy on CPU 1 (nginx with one worker).
//
// Run alone: go test -run '^$' -bench PassThrough -benchtime 1x ./proxy/
// (TOKENTAP_BIN picks the binary, else it is built; set
// TOKENTAP_BENCH_PROXY_GOMAXPROCS to run the proxy with that GOMAXPROCS).
func BenchmarkPassThrough(b *testing.B) {
	env := newBenchEnv(b)
	paths := env.paths()

	// Each scenario is one sub-benchmark reporting every path, metric names
	// prefixed with the path. The machine is shared: rounds alternate the
	// paths, so a burst of outside load hits every path alike, and figures
	// are medians of rounds. A scenario takes seconds, so b.N stays 1 at the
	// default -benchtime; a larger b.N repeats it.
	for _, c := range []struct{ streams, tokens, rounds int }{{1, 100, 5}, {64, 150, 3}, {256, 100, 3}} {
		b.Run(fmt.Sprintf("gap=10ms/streams=%d", c.streams), func(b *testing.B) {
			env.engine.SetModel(benchModel(10 * time.Millisecond))
			for _, p := range paths {
				env.run(b, p.url, c.streams, 10, nil) // warm up connections
			}
			rounds := make([][]runResult, len(paths))
			for i := 0; i < b.N; i++ {
				for r := 0; r < c.rounds; r++ {
					for j, p := range paths {
						rounds[j] = append(rounds[j], env.run(b, p.url, c.streams, c.tokens, p.pids))
					}
				}
			}
			cpu := map[string]float64{}
			for j, p := range paths {
				cpu[p.name] = reportRounds(b, p.name, rounds[j], rounds[0], j > 0)
			}
			if cpu["nginx"] > 0 {
				for _, p := range paths[1:] {
					if p.name != "nginx" && cpu[p.name] > 0 {
						b.ReportMetric(cpu[p.name]/cpu["nginx"], p.name+"/nginx_cpu")
					}
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("gap=0/streams=64", func(b *testing.B) {
		env.engine.SetModel(benchModel(0))
		for i := 0; i < b.N; i++ {
			for _, p := range paths {
				env.run(b, p.url, 64, 50, nil)
				r := env.run(b, p.url, 64, 2000, p.pids)
				b.ReportMetric(float64(r.events)/r.wall.Seconds(), p.name+"_events/s")
				if r.cpu > 0 {
					b.ReportMetric(float64(r.cpu.Nanoseconds())/1e3/float64(r.events), p.name+"_cpu_us/event")
				}
			}
		}
		b.ReportMetric(0, "ns/op")
	})
	// The request path: streams of one token, 64 at a time, so what a
	// request costs (its head and body read, the engine's connection, the
	// response head, the record) outweighs its one event. On a core the
	// load generator shares, a burst of new requests waits for this, one
	// after another: the TTFT a hop adds (make bench-wire) grows with it.
	b.Run("requests/streams=64", func(b *testing.B) {
		env.engine.SetModel(benchModel(0))
		for _, p := range paths[1:] {
			env.run(b, p.url, 64, 1, nil) // warm up connections
		}
		cpu := map[string]time.Duration{}
		reqs := map[string]int{}
		for i := 0; i < b.N; i++ {
			for r := 0; r < 40; r++ {
				for _, p := range paths[1:] {
					res := env.run(b, p.url, 64, 1, p.pids)
					if res.failures > 0 {
						b.Fatalf("%s: %d of 64 one-token streams failed", p.name, res.failures)
					}
					cpu[p.name] += res.cpu
					reqs[p.name] += res.streams
				}
			}
		}
		for _, p := range paths[1:] {
			if reqs[p.name] > 0 && cpu[p.name] > 0 {
				b.ReportMetric(float64(cpu[p.name].Nanoseconds())/1e3/float64(reqs[p.name]), p.name+"_cpu_us/request")
			}
		}
		if cpu["nginx"] > 0 {
			for _, p := range paths[1:] {
				if p.name != "nginx" && cpu[p.name] > 0 {
					b.ReportMetric(float64(cpu[p.name])/float64(cpu["nginx"])*float64(reqs["nginx"])/float64(reqs[p.name]), p.name+"/nginx_cpu_request")
				}
			}
		}
		// System calls a request, counted apart from the CPU rounds (the
		// count's tracepoint adds to the cost of every system call): a
		// figure a busy machine does not move, where CPU time is.
		for _, p := range paths[1:] {
			calls, err := countSyscalls(p.pids, func() {
				for range 10 {
					env.run(b, p.url, 64, 1, nil)
				}
			})
			if err != nil {
				b.Logf("%s: system calls not counted: %v", p.name, err)
				continue
			}
			b.ReportMetric(float64(calls)/640, p.name+"_syscalls/request")
		}
		b.ReportMetric(0, "ns/op")
	})
	// Memory per open stream, in processes of their own (what a process
	// freed stays resident, so an earlier measurement's peak would hide
	// the next one's growth): 1,024 streams opened at once, where the
	// burst's requests being read and handled at the same time weigh as
	// much as the streams, and in batches of 64, each opened once the one
	// before is streaming: what open streams themselves hold.
	for _, batch := range []int{0, 64} {
		name := "open=1024"
		if batch > 0 {
			name += fmt.Sprintf("/by=%d", batch)
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				fresh := startBenchEnv(b, env.pinned, false)
				fresh.engine.SetModel(benchModel(100 * time.Millisecond))
				for _, p := range fresh.paths()[1:] {
					b.ReportMetric(fresh.memoryPerStream(b, p.url, 1024, batch, p.pids), p.name+"_KiB/stream")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// paths are the ways to the engine: direct, through tokentap, through
// nginx where it is installed.
func (env *benchEnv) paths() []benchPath {
	paths := []benchPath{{"direct", env.fake, nil}, {"tokentap", env.proxy, []int{env.proxyPID}}}
	if env.nginx != "" {
		paths = append(paths, benchPath{"nginx", env.nginx, env.nginxPIDs})
	}
	return append(paths, env.floors...)
}

type benchPath struct {
	name string
	url  string
	pids []int // processes whose CPU and memory are the path's (none: direct)
}

// reportRounds reports a path's medians over rounds; added latency is
// taken round by round against the direct run of the same round. It
// returns the path's CPU per event in µs (0 when not measured).
func reportRounds(b *testing.B, name string, rs, direct []runResult, added bool) float64 {
	var p50, p99, a50, a99 []time.Duration
	var cpu time.Duration
	events, failures, streams := 0, 0, 0
	for i, r := range rs {
		p50 = append(p50, r.pct(0.50))
		p99 = append(p99, r.pct(0.99))
		a50 = append(a50, r.pct(0.50)-direct[i].pct(0.50))
		a99 = append(a99, r.pct(0.99)-direct[i].pct(0.99))
		cpu += r.cpu
		events += r.events
		failures += r.failures
		streams += r.streams
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if added {
		b.ReportMetric(us(medianOf(a50)), name+"_added_p50_us")
		b.ReportMetric(us(medianOf(a99)), name+"_added_p99_us")
	} else {
		b.ReportMetric(us(medianOf(p50)), name+"_lag_p50_us")
		b.ReportMetric(us(medianOf(p99)), name+"_lag_p99_us")
	}
	if failures > 0 {
		b.Errorf("%s: %d of %d streams failed", name, failures, streams)
	}
	if cpu <= 0 || events == 0 {
		return 0
	}
	perEvent := us(cpu) / float64(events)
	b.ReportMetric(perEvent, name+"_cpu_us/event")
	return perEvent
}

// benchModel is the fake's model for the benchmark: a fixed gap between
// tokens, no prefill to speak of, room for thousands of streams.
func benchModel(gap time.Duration) fixtures.Model {
	m := fixtures.DefaultModel()
	m.PrefillTokPerSec, m.PrefillSlowdown, m.FirstEventDelay = 1e9, 0, time.Millisecond
	m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = gap, 0, 0
	m.MaxRunning, m.KVCapacity = 4096, 1<<24
	return m
}

type benchEnv struct {
	pinned    bool // this process on CPU 0, the proxies on CPU 1
	engine    *swappableEngine
	fake      string
	proxy     string
	proxyPID  int
	nginx     string
	nginxPIDs []int
	floors    []benchPath
}

// swappableEngine lets the benchmark change the fake's timing between runs
// without changing its address (the proxies point at it).
type swappableEngine struct {
	mu  sync.Mutex
	e   *fixtures.Engine
	h   http.Handler
	srv *http.Server
}

func (s *swappableEngine) SetModel(m fixtures.Model) {
	e := fixtures.New(m, fixtures.WithLedger(true))
	h := e.Handler()
	s.mu.Lock()
	s.e, s.h = e, h
	s.mu.Unlock()
}

func (s *swappableEngine) current() *fixtures.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e
}

func (s *swappableEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	return startBenchEnv(b, benchcpu.Pinnable(), true)
}

// startBenchEnv starts the engine, the proxy and nginx; pinned places the
// proxies on CPU 1, and pin pins this process to CPU 0 (once: a fresh
// environment inside a benchmark that pinned already does not).
func startBenchEnv(b *testing.B, pinned, pin bool) *benchEnv {
	b.Helper()
	env := &benchEnv{engine: &swappableEngine{}, pinned: pinned}
	if pinned && pin {
		// The fake engine and the clients (this process) on CPU 0, the
		// proxy under test on CPU 1: what a proxy adds is then its own
		// work and wake-ups, not its fight for a core with the load.
		unpin, err := benchcpu.Pin(0)
		if err != nil {
			b.Fatalf("pin the benchmark to CPU 0: %v", err)
		}
		procs := runtime.GOMAXPROCS(1) // one CPU: two Ps would spin for each other
		b.Cleanup(func() { runtime.GOMAXPROCS(procs); unpin() })
	}
	env.engine.SetModel(benchModel(10 * time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	env.engine.srv = &http.Server{Handler: env.engine}
	go func() { _ = env.engine.srv.Serve(ln) }()
	b.Cleanup(func() { _ = env.engine.srv.Close() })
	env.fake = "http://" + ln.Addr().String()

	bin := buildTokentap(b)
	cmd := env.command(bin, "proxy", "--upstream", env.fake, "--listen", "127.0.0.1:0", "--admin", "", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if v := os.Getenv("TOKENTAP_BENCH_PROXY_GOMAXPROCS"); v != "" {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("tokentap proxy did not print its URL: %v", err)
	}
	env.proxy, env.proxyPID = strings.TrimSpace(line), cmd.Process.Pid

	env.nginx, env.nginxPIDs = env.startNginx(b, ln.Addr().String())
	if raceSlowdown == 1 { // a relay built with the race detector is no floor
		for _, role := range floorRelays {
			env.floors = append(env.floors, env.startFloor(b, role, ln.Addr().String()))
		}
	}
	return env
}

// command starts a proxy under test: on CPU 1 when the benchmark pins.
func (env *benchEnv) command(name string, args ...string) *exec.Cmd {
	if env.pinned {
		return benchcpu.Command(1, name, args...)
	}
	return exec.Command(name, args...)
}

// buildTokentap builds the binary the user runs (TOKENTAP_BIN wins).
func buildTokentap(b *testing.B) string {
	if bin := os.Getenv("TOKENTAP_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "tokentap")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/tokentap")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/tokentap: %v\n%s", err, out)
	}
	return bin
}

// startNginx runs Debian's nginx as a plain pass-through (proxy_buffering
// off, upstream keep-alive) on a free port; it is stopped when the
// benchmark ends. Without nginx installed (make deps installs it) the
// comparison is left out and said so.
func (env *benchEnv) startNginx(b *testing.B, upstream string) (string, []int) {
	bin := "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("nginx"); err != nil {
			b.Log("nginx is not installed (make deps installs it): the nginx comparison is left out")
			return "", nil
		}
	}
	dir := b.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	workers := 0 // one per CPU
	if env.pinned {
		workers = 1 // one CPU, as tokentap's proxy has
	}
	ng := nginxref.Config{Dir: dir, Upstream: upstream, Listen: addr, Workers: workers, Keepalive: 2048}
	args, err := ng.Write()
	if err != nil {
		b.Fatal(err)
	}
	cmd := env.command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start nginx: %v", err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGQUIT); _ = cmd.Wait() })
	url := "http://" + addr
	pids, err := ng.WaitUp(url, cmd.Process.Pid, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	return url, pids
}

// countSyscalls counts the system calls pids make while fn runs, with
// perf stat's raw_syscalls:sys_enter tracepoint (perf, and the right to
// trace them, needed).
func countSyscalls(pids []int, fn func()) (int64, error) {
	if len(pids) == 0 {
		return 0, errors.New("no process")
	}
	ids := make([]string, len(pids))
	for i, p := range pids {
		ids[i] = strconv.Itoa(p)
	}
	out, err := os.CreateTemp("", "perfstat")
	if err != nil {
		return 0, err
	}
	defer os.Remove(out.Name())
	out.Close()
	cmd := exec.Command("perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o", out.Name(), "-p", strings.Join(ids, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	fn()
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "interrupt") {
		return 0, fmt.Errorf("perf stat: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	text, err := os.ReadFile(out.Name())
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(text), "\n") {
		if f := strings.Split(line, ","); len(f) > 2 && strings.Contains(line, "raw_syscalls:sys_enter") {
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("perf stat printed %q", line)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("perf stat counted nothing: %s %s", text, strings.TrimSpace(stderr.String()))
}

// procCPU reads the CPU time a process has used so far from its process
// CPU-time clock (clock_getcpuclockid's clock: ((^pid)<<3)|CPUCLOCK_SCHED).
func procCPU(pid int) time.Duration {
	clk := int64(^uint64(pid)<<3 | 2)
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, uintptr(clk), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

func cpuOf(pids []int) time.Duration {
	var sum time.Duration
	for _, p := range pids {
		sum += procCPU(p)
	}
	return sum
}

func rssKiB(pids []int) float64 {
	var sum float64
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum += v
			}
		}
	}
	return sum
}

var benchClient = &http.Client{Transport: &http.Transport{
	MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true, IdleConnTimeout: 3 * time.Second,
}}

// stampedReader records when each network read returned.
type stampedReader struct {
	r    io.Reader
	last time.Time
}

func (s *stampedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.last = time.Now()
	return n, err
}

// streamResult is what a benchmark client saw of one stream.
type streamResult struct {
	id       string
	arrivals []time.Time
	err      error
}

func stream(url string, tokens int) streamResult {
	body := fmt.Sprintf(`{"model":"fake-4b","messages":[{"role":"user","content":"bench"}],"max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
	resp, err := benchClient.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return streamResult{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	sr := &stampedReader{r: resp.Body}
	br := bufio.NewReaderSize(sr, 64<<10)
	res := streamResult{arrivals: make([]time.Time, 0, tokens)}
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 6 && bytes.HasPrefix(line, []byte("data: {")) {
			if res.id == "" {
				if i := bytes.Index(line, []byte(`"id":"`)); i >= 0 {
					rest := line[i+6:]
					res.id = string(rest[:bytes.IndexByte(rest, '"')])
				}
			}
			if i := bytes.Index(line, []byte(`"content":"`)); i >= 0 && line[i+11] != '"' {
				res.arrivals = append(res.arrivals, sr.last)
			}
		}
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			return res
		}
	}
}

type runResult struct {
	events   int
	wall     time.Duration
	cpu      time.Duration
	lags     []time.Duration // sorted
	streams  int
	failures int
}

func (r runResult) pct(q float64) time.Duration {
	if len(r.lags) == 0 {
		return 0
	}
	return r.lags[min(len(r.lags)-1, int(q*float64(len(r.lags))))]
}

// run sends n concurrent streams of tokens tokens each through url and
// measures every token event against the fake's ledger.
func (env *benchEnv) run(b *testing.B, url string, n, tokens int, pids []int) runResult {
	b.Helper()
	e := env.engine.current()
	e.ResetLedger()
	results := make([]streamResult, n)
	var wg sync.WaitGroup
	cpu0 := cpuOf(pids)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); results[i] = stream(url, tokens) }(i)
	}
	wg.Wait()
	r := runResult{wall: time.Since(start), cpu: cpuOf(pids) - cpu0, streams: n}
	ledger := map[string]*fixtures.LedgerEntry{}
	for _, le := range e.Ledger() {
		le := le
		ledger[le.ID] = &le
	}
	for _, s := range results {
		le := ledger[s.id]
		if s.err != nil || le == nil || len(le.Events) != len(s.arrivals) {
			r.failures++
			if r.failures == 1 {
				b.Logf("stream %s: %v (%d arrivals)", s.id, s.err, len(s.arrivals))
			}
			continue
		}
		for i, at := range s.arrivals {
			r.lags = append(r.lags, at.Sub(le.Events[i].At))
		}
		r.events += len(s.arrivals)
	}
	sort.Slice(r.lags, func(i, j int) bool { return r.lags[i] < r.lags[j] })
	return r
}

// memoryPerStream opens n slow streams through url, all at once or batch
// at a time, and returns the growth of the processes' resident memory per
// open stream, in KiB.
func (env *benchEnv) memoryPerStream(b *testing.B, url string, n, batch int, pids []int) float64 {
	env.run(b, url, 16, 5, nil)
	time.Sleep(200 * time.Millisecond)
	idle := rssKiB(pids)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opened sync.WaitGroup
	var done sync.WaitGroup
	body := `{"model":"fake-4b","messages":[{"role":"user","content":"bench"}],"max_tokens":2000,"ignore_eos":true,"stream":true}`
	for i := 0; i < n; i++ {
		if batch > 0 && i > 0 && i%batch == 0 {
			opened.Wait() // the streams before are open: a batch's request handling is over
		}
		opened.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			once := sync.OnceFunc(opened.Done)
			defer once()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
			resp, err := benchClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
				once()
			}
		}()
	}
	opened.Wait()
	time.Sleep(500 * time.Millisecond) // every stream has run a few events
	open := rssKiB(pids)
	cancel()
	done.Wait()
	b.Logf("%s: resident %.0f KiB idle, %.0f KiB with %d open streams", url, idle, open, n)
	return (open - idle) / float64(n)
}

// BenchmarkForward measures the proxy's per-event work without the
// network: decoding the chunked body from the connection buffer and passing
// it through the tap with the injected usage chunk stripped.
func BenchmarkForward(b *testing.B) {
	event := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	wire := fmt.Appendf(nil, "%x\r\n%s\r\n", len(event), event)
	clock := record.NewClock()
	st := tap.NewStream(clock)
	var rec record.Record
	rec.Stream = true
	st.Begin(&rec)
	st.StripUsage(true)
	st.Status(200)
	var x exchange
	x.tap, x.measure = st, true
	x.pieceFn = x.piece
	r := &repeatReader{b: wire}
	br := bufio.NewReaderSize(r, 4096)
	x.body.reset(br, frameChunked, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(event)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(rec.Arrivals) > 1<<16 {
			rec.Arrivals = rec.Arrivals[:0]
		}
		x.out = x.out[:0]
		r.n = 1 // one event per network read, as at a 10 ms gap
		if err := x.body.read(x.pieceFn); err != nil {
			b.Fatal(err)
		}
		if len(x.out) != len(event) {
			b.Fatalf("forwarded %d bytes, want %d", len(x.out), len(event))
		}
	}
}

func medianOf(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
