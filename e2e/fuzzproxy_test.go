//go:build e2e && fuzzproxy

package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFuzzProxy is `make fuzz-proxy` (not in CI): a fuzzer outside the
// proxy, at the socket level, for TOKENTAP_FUZZ_TIME (default 10m). Workers
// send the built proxy, all at once:
//
//   - well-formed requests whose engine answers well-formed responses of
//     every framing (SSE in chunks cut anywhere, Content-Length, read to
//     close, no body, errors), written in random pieces at random pace:
//     the client must get exactly what the engine sent, and the engine
//     exactly what the client sent;
//   - mutated requests (bytes flipped, inserted, cut; conflicting or absurd
//     framing; huge lines; cut off or dripped), answered by a well-formed
//     engine;
//   - well-formed requests whose engine answers mutated responses (bad
//     status lines and chunk sizes, short or long bodies, stalls, resets,
//     huge heads, 1xx first);
//   - (issue 22) requests whose model name holds arbitrary bytes or is up
//     to 900 KB long; engines whose malformed answer echoes the request's
//     head, keys included (no key may reach the client); giant SSE events
//     (1 to 15 MB, passed on byte for byte);
//   - a descriptor-pressure phase: a second proxy runs under ulimit -n
//     (TOKENTAP_FUZZ_NOFILE, default 128) and gets bursts of 300 held
//     connections, each followed by a request that must get its 200 (its
//     model name, half the time, mutated as above, the engine's model
//     list being unknown to it).
//
// It fails on a crash (the proxy exits), a hang (a connection neither
// answered nor closed within the proxy's own limits plus slack), a leaked
// connection, descriptor or goroutine (every 30 s the workers pause and the
// proxy must come back to its idle counts), or a client stream broken while
// the engine's was well-formed, or a lost record (a measured request the
// client got whole, with no record in the capture by the round's end).
// Findings are written to a directory with
// the bytes that caused them; TOKENTAP_FUZZ_SEED replays a run's choices.
func TestFuzzProxy(t *testing.T) {
	duration, seed, workers := fuzzSettings(t)
	findingsDir := os.Getenv("TOKENTAP_FUZZ_FINDINGS")
	if findingsDir == "" {
		findingsDir = filepath.Join(os.TempDir(), "tokentap-fuzz-proxy", strconv.FormatUint(seed, 10))
	}
	_ = os.MkdirAll(findingsDir, 0o755)
	t.Logf("seed %d, %d workers, %v; findings go to %s", seed, workers, duration, findingsDir)

	eng := startFuzzEngine(t)
	p := startProxyProc(t, eng.url, fuzzProxyFlags...)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	// Waiting for the exit here: stop (at cleanup) must not wait again.
	p.waited = exited

	f := &fuzzer{t: t, p: p, eng: eng, dir: findingsDir, counts: map[string]int{}}
	if code, _, err := post(t, p.url+"/v1/chat/completions", `{"model":"m","warm":1}`); err != nil || code != 200 {
		t.Fatalf("warm-up: %d %v", code, err)
	}
	f.wantRecords.Add(1)

	// The descriptor-pressure phase's proxy, under a low descriptor limit.
	nofile := envInt(t, "TOKENTAP_FUZZ_NOFILE", 128)
	// Its engine answers GET /v1/models with a 401 (as vLLM with
	// --api-key does): the model list unknown, model names reach the
	// metrics' labels as they come.
	ppEng := startFuzzEngine(t)
	ppEng.unknownModels = true
	pp := startProxyProcIn(t, withNofile(nofile), ppEng.url, fuzzProxyFlags...)
	ppExited := make(chan error, 1)
	go func() { ppExited <- pp.cmd.Wait() }()
	pp.waited = ppExited
	var ppDead atomic.Bool
	if code, _, err := post(t, pp.url+"/v1/chat/completions", `{"model":"m","warm":1}`); err != nil || code != 200 {
		t.Fatalf("warm-up of the proxy under ulimit -n %d: %d %v", nofile, code, err)
	}
	base := p.settled(t)
	t.Logf("idle proxy: %d descriptors besides connections, %d goroutines", base.fds, base.goroutines)

	deadline := time.Now().Add(duration)
	for round := 0; time.Now().Before(deadline); round++ {
		roundEnd := time.Now().Add(30 * time.Second)
		if roundEnd.After(deadline) {
			roundEnd = deadline
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(round*1000+999)))
			for time.Now().Before(roundEnd) && !f.crashed.Load() && !ppDead.Load() {
				f.pressure(rng, pp, ppExited)
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(round*1000+w)))
				for time.Now().Before(roundEnd) && !f.crashed.Load() {
					f.one(rng)
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-exited:
			f.crashed.Store(true)
			p.stopped = true
			t.Logf("at the crash: %s", f.summary())
			t.Fatalf("the proxy exited (%v): a crash\n%s", err, tail(p.stderr.String(), 4000))
		default:
		}
		// The pressure proxy's crash is a finding; the rest goes on.
		select {
		case err := <-ppExited:
			pp.stopped = true
			ppDead.Store(true)
			f.finding("crash", fmt.Sprintf("the proxy under ulimit -n %d exited (%v)\n%s", nofile, err, tail(pp.stderr.String(), 2000)), nil)
		default:
		}
		// The leak check: with every worker paused, the proxy must come
		// back to its idle counts.
		if ok, got := f.backToIdle(base); !ok {
			f.finding("leak", fmt.Sprintf("round %d: the proxy did not come back to idle in 30 s: %s (idle: %+v)", round, got, base), nil)
		}
		// The capture is written in batches: its records may come a
		// moment after the answers.
		got, want := f.records(), f.wantRecords.Load()
		for deadline := time.Now().Add(10 * time.Second); int64(got) < want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			got = f.records()
		}
		if int64(got) < want {
			f.finding("lost record", fmt.Sprintf("round %d: the capture holds %d records, but %d measured requests were answered whole", round, got, want), nil)
		}
		t.Logf("round %d: %s", round, f.summary())
	}
	t.Logf("done: %s", f.summary())
	if n := f.findings.Load(); n > 0 {
		t.Errorf("%d findings; see %s", n, findingsDir)
	}
}

var fuzzProxyFlags = []string{"--read-header-timeout", "2s", "--idle-timeout", "3s", "--body-timeout", "3s", "--keep-alive-timeout", "5s",
	"--max-body-size", "1M", "--log-level", "error"}

// hangLimit is how long a connection may go without an answer or a close:
// the proxy's header and idle timeouts, with slack for a busy machine.
const hangLimit = 15 * time.Second

type fuzzer struct {
	t        *testing.T
	p        *proxyProc
	eng      *fuzzEngine
	dir      string
	seq      atomic.Int64
	crashed  atomic.Bool
	findings atomic.Int64
	// wantRecords counts measured requests the client got whole: each
	// must have its record in the capture.
	wantRecords atomic.Int64
	mu          sync.Mutex
	counts      map[string]int
}

func (f *fuzzer) count(k string) {
	f.mu.Lock()
	f.counts[k]++
	f.mu.Unlock()
}

func (f *fuzzer) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.counts))
	for k := range f.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d; ", k, f.counts[k])
	}
	fmt.Fprintf(&b, "findings %d", f.findings.Load())
	return b.String()
}

// finding reports a failure and keeps its bytes.
func (f *fuzzer) finding(kind, msg string, data map[string][]byte) {
	n := f.findings.Add(1)
	f.t.Errorf("finding %d (%s): %s", n, kind, msg)
	if n > 50 {
		return
	}
	for name, b := range data {
		_ = os.WriteFile(filepath.Join(f.dir, fmt.Sprintf("%03d-%s-%s", n, kind, name)), b, 0o644)
	}
}

func (f *fuzzer) backToIdle(base usage) (bool, string) {
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		m := f.p.metrics(f.t)
		u := usage{int(m["process_open_fds"] - m["tokentap_client_connections"] - m["tokentap_upstream_connections"]), int(m["go_goroutines"])}
		got = fmt.Sprintf("%d client connections, %d engine connections, %d other descriptors, %d goroutines",
			int(m["tokentap_client_connections"]), int(m["tokentap_upstream_connections"]), u.fds, u.goroutines)
		if m["tokentap_client_connections"] == 0 && u.fds <= base.fds && u.goroutines <= base.goroutines {
			return true, got
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false, got
}

// records counts the records in the main proxy's capture.
func (f *fuzzer) records() int {
	raw, _ := os.ReadFile(f.p.capture)
	return bytes.Count(raw, []byte("\n"))
}

// one runs one case.
func (f *fuzzer) one(rng *rand.Rand) {
	id := f.seq.Add(1)
	req := randomRequest(rng, id)
	resp := randomResponse(rng)
	switch k := rng.IntN(13); {
	case k == 10:
		f.count("mutated model name")
		req = mutateModel(rng, req)
		f.eng.plan(id, resp)
		f.wellFormed(id, req, resp)
	case k == 11:
		f.count("echoed request head")
		req.headers = append(req.headers, "Authorization: Bearer "+fuzzKey(id), "X-Api-Key: "+fuzzKey(id))
		bad := fuzzResponse{echo: 1 + rng.IntN(3), how: "echo of the request head", close: true}
		f.eng.plan(id, bad)
		f.echoed(id, req, bad)
	case k == 12:
		f.count("giant SSE event")
		resp = giantEvent(rng)
		f.eng.plan(id, resp)
		f.wellFormed(id, req, resp)
	case k < 4:
		f.count("well-formed")
		f.eng.plan(id, resp)
		f.wellFormed(id, req, resp)
	case k < 7:
		f.count("mutated request")
		f.eng.plan(id, resp)
		f.mutatedRequest(rng, id, req)
	default:
		f.count("mutated response")
		bad := mutateResponse(rng, resp)
		f.eng.plan(id, bad)
		f.mutatedResponse(id, req, bad)
	}
}

// dial connects to the proxy; a proxy that refuses is a finding (nil).
func (f *fuzzer) dial() net.Conn {
	c, err := net.Dial("tcp", f.p.addr())
	if err != nil {
		f.finding("dial", err.Error(), nil)
		return nil
	}
	return c
}

// wellFormed sends a valid request for a valid response: the client must
// get the engine's status and body exactly, and the engine the client's
// body.
func (f *fuzzer) wellFormed(id int64, req fuzzRequest, resp fuzzResponse) {
	c := f.dial()
	if c == nil {
		return
	}
	defer c.Close()
	raw := req.bytes()
	_ = c.SetDeadline(time.Now().Add(hangLimit + resp.duration()))
	if _, err := c.Write(raw); err != nil {
		f.finding("broken", fmt.Sprintf("case %d: writing a well-formed request: %v", id, err), map[string][]byte{"request": raw})
		return
	}
	r, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: req.method})
	var body []byte
	if err == nil {
		body, err = io.ReadAll(r.Body)
	}
	data := map[string][]byte{"request": raw, "response": resp.bytes()}
	got, read := f.eng.received(id)
	// The proxy's own answer: its JSON error, whose body a HEAD's answer
	// leaves out.
	proxys := bytes.Contains(body, []byte("tokentap proxy:")) ||
		(req.method == "HEAD" && err == nil && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"))
	if !read && err == nil && (r.StatusCode == 502 || r.StatusCode == 504) && proxys {
		// The engine never read this request: it went on a kept-alive
		// connection the engine was done with after a broken response
		// (it closes, stalls or sends more, unasked, after one). The
		// proxy's answer is the engine's fault, and honest; a well-formed
		// engine that says Connection: close before closing is never hit.
		f.count("collateral of a broken response on a kept-alive connection")
		return
	}
	if !read && err == nil && r.StatusCode == 200 && string(body) == unaskedBody {
		// The engine never read this request, and the client got the
		// answer it sent unasked after a broken response's case: its
		// bytes came after this request was written on the kept-alive
		// connection, where HTTP/1.1 cannot tell them from this request's
		// answer (any client or proxy is fooled alike). Bytes that come
		// earlier, with the first answer's end or while the connection is
		// idle, close it (proxy.TestUnaskedAnswerIsNotPassedOn).
		f.count("collateral of an unasked response that came after the next request was written")
		return
	}
	switch {
	case isTimeoutErr(err):
		f.finding("hang", fmt.Sprintf("case %d: no answer to a well-formed request in %v", id, hangLimit+resp.duration()), data)
	case err != nil:
		f.finding("broken", fmt.Sprintf("case %d: the client's stream broke while the engine's was well-formed: %v", id, err), data)
	case r.StatusCode != resp.status:
		f.finding("broken", fmt.Sprintf("case %d: status %d, the engine sent %d (%s; the engine read the request: %t)", id, r.StatusCode, resp.status, body, read), data)
	case !bytes.Equal(body, resp.body) && req.method != "HEAD":
		f.finding("broken", fmt.Sprintf("case %d: the client got %d bytes that differ from the engine's %d", id, len(body), len(resp.body)), data)
	}
	if read && err == nil && r.StatusCode == resp.status && req.measured() {
		f.wantRecords.Add(1)
	}
	if read && req.checkBody && !bytes.Equal(got, req.body) {
		f.finding("request changed", fmt.Sprintf("case %d: the engine got a body of %d bytes, the client sent %d", id, len(got), len(req.body)), data)
	}
}

// mutatedRequest sends a broken request: the proxy must answer it or close
// the connection, in time, and stay up.
func (f *fuzzer) mutatedRequest(rng *rand.Rand, id int64, req fuzzRequest) {
	raw, how := mutateRequest(rng, req.bytes())
	c := f.dial()
	if c == nil {
		return
	}
	defer c.Close()
	start := time.Now()
	drip := how == "drip"
	// A drip is 16 bytes (more for a large request: at most 100 pieces)
	// every 50 ms, so it lasts 5 s at most.
	step := max(16, (len(raw)+99)/100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if drip {
			for i := 0; i < len(raw); i += step {
				if _, err := c.Write(raw[i:min(i+step, len(raw))]); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			return
		}
		_, _ = c.Write(raw)
	}()
	f.count("mutation " + how)
	// A dripped request is still arriving while it drips, and the body
	// timeout is between reads (nginx's client_body_timeout): the proxy
	// has hangLimit from its last byte.
	limit := hangLimit
	if drip {
		limit += time.Duration((len(raw)+step-1)/step) * 50 * time.Millisecond
	}
	_ = c.SetReadDeadline(start.Add(limit))
	// Read until the proxy closes (or a response is read whole and the
	// proxy then waits for a next request, which also ends the case).
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			f.count(fmt.Sprintf("answer %d", r.StatusCode))
			if err == nil && !r.Close {
				// Answered, connection kept: done with it.
				break
			}
		}
		if err != nil {
			if isTimeoutErr(err) {
				f.finding("hang", fmt.Sprintf("case %d: mutated request (%s): no answer and no close in %v", id, how, limit),
					map[string][]byte{"request": raw})
			}
			break
		}
	}
	c.Close()
	<-done
}

// mutatedResponse sends a valid request for a broken response: the client
// gets something or a close, in time.
func (f *fuzzer) mutatedResponse(id int64, req fuzzRequest, bad fuzzResponse) {
	c := f.dial()
	if c == nil {
		return
	}
	defer c.Close()
	raw := req.bytes()
	limit := hangLimit + bad.duration()
	_ = c.SetDeadline(time.Now().Add(limit))
	if _, err := c.Write(raw); err != nil {
		return
	}
	f.count("bad response " + bad.how)
	r, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: req.method})
	if err == nil {
		_, err = io.Copy(io.Discard, r.Body)
		f.count(fmt.Sprintf("answer %d", r.StatusCode))
	}
	if isTimeoutErr(err) {
		f.finding("hang", fmt.Sprintf("case %d: the engine's response was broken (%s): no answer and no close in %v", id, bad.how, limit),
			map[string][]byte{"request": raw, "response": bad.bytes()})
	}
}

// fuzzKey is the key a case's echoed request carries.
func fuzzKey(id int64) string { return "sk-fuzzkey-" + strconv.FormatInt(id, 36) + "-0c1d2e3f" }

// echoed sends a request with keys whose engine answers with its head
// echoed in a malformed response: the client gets an answer or a close,
// in time, and no byte of a key.
func (f *fuzzer) echoed(id int64, req fuzzRequest, bad fuzzResponse) {
	c := f.dial()
	if c == nil {
		return
	}
	defer c.Close()
	raw := req.bytes()
	_ = c.SetDeadline(time.Now().Add(hangLimit))
	if _, err := c.Write(raw); err != nil {
		return
	}
	got, err := io.ReadAll(c)
	data := map[string][]byte{"request": raw, "answer": got}
	if isTimeoutErr(err) && len(got) == 0 {
		f.finding("hang", fmt.Sprintf("case %d: an echoing engine's answer: no answer and no close in %v", id, hangLimit), data)
	}
	if bytes.Contains(got, []byte("fuzzkey")) {
		f.finding("key leak", fmt.Sprintf("case %d: the client's answer holds the key after a malformed echo (%d)", id, bad.echo), data)
	}
}

// pressure is one burst of the descriptor-pressure phase: 300 connections
// held a second against the proxy under a low descriptor limit, then a
// request that must get its 200 once they are closed.
func (f *fuzzer) pressure(rng *rand.Rand, pp *proxyProc, exited chan error) {
	f.count("descriptor-pressure burst")
	n := 200 + rng.IntN(200)
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", pp.addr(), 2*time.Second)
		if err != nil {
			f.count("descriptor-pressure dial refused")
			continue
		}
		if rng.IntN(4) == 0 {
			// Some start a request and never end it.
			_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second) // the burst's hold: the pressure itself
	for _, c := range conns {
		c.Close()
	}
	// The proxy may take a moment to take new connections after
	// EMFILE (a backoff); it must answer within 10 s.
	var code int
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case e := <-exited:
			exited <- e // for the round's end to see
			return
		default:
		}
		body := `{"model":"m","pressure":1}`
		if rng.IntN(2) == 0 {
			// A model name of arbitrary bytes, to the proxy whose model
			// list is unknown.
			body = string(mutateModel(rng, fuzzRequest{method: "POST", body: []byte(body)}).body)
		}
		code, _, err = post(f.t, pp.url+"/v1/chat/completions", body)
		if err == nil && code == 200 {
			return
		}
	}
	f.finding("descriptor pressure", fmt.Sprintf("after a burst of %d connections: %d %v, want a 200 within 10 s\n%s", n, code, err, tail(pp.stderr.String(), 2000)), nil)
}

// mutateModel gives a request's JSON body a model name of arbitrary bytes
// (JSON's quote and backslash among them, at times) or a huge one.
func mutateModel(rng *rand.Rand, r fuzzRequest) fuzzRequest {
	if r.method != "POST" || !bytes.HasPrefix(r.body, []byte(`{"model":"m"`)) {
		r.method, r.body = "POST", []byte(`{"model":"m","messages":[]}`)
		r.chunked = false
		r.checkBody = true
	}
	var name []byte
	switch rng.IntN(3) {
	case 0:
		// Long, but the whole body stays under the proxy's 1M
		// --max-body-size: a 413 for a body over it is right.
		room := max(1<<20-len(r.body)-64, 1)
		name = bytes.Repeat([]byte("M"), min(100_000+rng.IntN(800_000), room))
	default:
		name = make([]byte, 1+rng.IntN(64))
		for i := range name {
			name[i] = byte(rng.IntN(256))
			if (name[i] == '"' || name[i] == '\\') && rng.IntN(4) > 0 {
				name[i] = 0xff
			}
		}
	}
	r.body = bytes.Replace(r.body, []byte(`"model":"m"`), append(append([]byte(`"model":"`), name...), '"'), 1)
	return r
}

// giantEvent is a well-formed SSE answer with one event of 1 to 15 MB,
// in 16 KiB chunks.
func giantEvent(rng *rand.Rand) fuzzResponse {
	r := fuzzResponse{status: 200}
	r.body = []byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" +
		strings.Repeat("g", (1+rng.IntN(15))<<20) + "\"}}]}\n\ndata: [DONE]\n\n")
	r.head = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	var f bytes.Buffer
	for rest := r.body; len(rest) > 0; {
		n := min(len(rest), 16<<10)
		fmt.Fprintf(&f, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	f.WriteString("0\r\n\r\n")
	r.framed = f.Bytes()
	for total := len(r.head) + len(r.framed); total > 0; total -= min(total, 64<<10) {
		r.pieces = append(r.pieces, min(total, 64<<10))
	}
	return r
}

// measured says the proxy measures the request, and so writes its record.
func (r fuzzRequest) measured() bool {
	return r.method == "POST" && (r.path == "/v1/chat/completions" || r.path == "/v1/completions") && bytes.HasPrefix(r.body, []byte("{"))
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fuzzRequest is a valid request.
type fuzzRequest struct {
	method, path string
	headers      []string // "Name: value"
	body         []byte
	chunked      bool
	checkBody    bool // the engine must get body as it is (no usage asked on the client's behalf)
}

var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health", "/v1/x?y=1&z=%20"}

func randomRequest(rng *rand.Rand, id int64) fuzzRequest {
	r := fuzzRequest{method: "POST", path: fuzzPaths[rng.IntN(len(fuzzPaths))]}
	if rng.IntN(5) == 0 {
		r.method = []string{"GET", "HEAD", "DELETE", "PUT", "OPTIONS"}[rng.IntN(5)]
	}
	r.headers = append(r.headers, "Host: fuzz", "X-Fuzz-Id: "+strconv.FormatInt(id, 10))
	if rng.IntN(3) > 0 {
		r.headers = append(r.headers, "Content-Type: application/json")
	}
	if rng.IntN(2) == 0 {
		r.headers = append(r.headers, "Authorization: Bearer sk-fuzz-"+strconv.Itoa(rng.IntN(1e6)))
	}
	if rng.IntN(6) == 0 {
		r.headers = append(r.headers, "Connection: X-Hop", "X-Hop: 1")
	}
	if rng.IntN(10) == 0 {
		r.headers = append(r.headers, "X-Large: "+strings.Repeat("l", rng.IntN(60<<10)))
	}
	if r.method == "POST" || r.method == "PUT" {
		stream := rng.IntN(2) == 0
		opts := ""
		if stream && rng.IntN(2) == 0 {
			opts = `,"stream_options":{"include_usage":true}`
		}
		pad := strings.Repeat("x", rng.IntN(2000))
		if rng.IntN(20) == 0 {
			pad = strings.Repeat("y", 100_000+rng.IntN(200_000))
		}
		r.body = fmt.Appendf(nil, `{"model":"m","stream":%v%s,"messages":[{"role":"user","content":"%s"}]}`, stream, opts, pad)
		if rng.IntN(4) == 0 {
			r.body = []byte(pad) // not JSON
		}
		// The proxy asks the engine for usage on a streaming client's
		// behalf on the measured paths only.
		measured := r.method == "POST" && (r.path == "/v1/chat/completions" || r.path == "/v1/completions")
		r.checkBody = !(measured && stream && opts == "" && bytes.HasPrefix(r.body, []byte("{")))
		r.chunked = rng.IntN(4) == 0
	}
	return r
}

func (r fuzzRequest) bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", r.method, r.path)
	for _, h := range r.headers {
		b.WriteString(h + "\r\n")
	}
	switch {
	case r.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := r.body; len(rest) > 0; {
			n := min(len(rest), 1+len(rest)/3)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
	case r.body != nil:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(r.body))
		b.Write(r.body)
	default:
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// fuzzResponse is what the engine writes: head and framed body, in pieces
// with pauses, then a close (or a reset) or not.
type fuzzResponse struct {
	status  int
	head    []byte
	body    []byte // the body as the client must see it (well-formed only)
	framed  []byte // the body as written
	pieces  []int  // write sizes over head+framed
	pause   time.Duration
	stall   time.Duration // one pause in the middle (mutations)
	close   bool          // close after writing
	reset   bool          // reset instead of closing
	how     string        // the mutation, for mutated ones
	preface []byte        // 1xx responses first
	echo    int           // 1: the request head as the status line; 2: its header lines without colons; 3: as garbage
}

func (r fuzzResponse) bytes() []byte {
	return append(append(append([]byte(nil), r.preface...), r.head...), r.framed...)
}

func (r fuzzResponse) duration() time.Duration {
	return time.Duration(len(r.pieces))*r.pause + r.stall
}

func randomResponse(rng *rand.Rand) fuzzResponse {
	var r fuzzResponse
	kind := rng.IntN(6)
	switch kind {
	case 0, 1: // SSE, chunked
		r.status = 200
		var b bytes.Buffer
		for i := range 1 + rng.IntN(40) {
			fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		b.WriteString("data: [DONE]\n\n")
		r.body = b.Bytes()
		r.head = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		var f bytes.Buffer
		for rest := r.body; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(300))
			ext := ""
			if rng.IntN(10) == 0 {
				ext = ";x=1"
			}
			fmt.Fprintf(&f, "%x%s\r\n%s\r\n", n, ext, rest[:n])
			rest = rest[n:]
		}
		f.WriteString("0\r\n")
		if rng.IntN(5) == 0 {
			f.WriteString("X-Trailer: 1\r\n")
		}
		f.WriteString("\r\n")
		r.framed = f.Bytes()
	case 2: // JSON with a length
		r.status = []int{200, 200, 400, 404, 429, 500, 503}[rng.IntN(7)]
		r.body = fmt.Appendf(nil, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"%s"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			strings.Repeat("a", rng.IntN(3000)))
		r.head = fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: X-Gone\r\nX-Gone: 1\r\n\r\n",
			r.status, http.StatusText(r.status), len(r.body))
		r.framed = r.body
	case 3: // read to close
		r.status = 200
		r.body = []byte(strings.Repeat("data: {\"choices\":[]}\n\n", 1+rng.IntN(20)))
		r.head = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
		r.framed = r.body
		r.close = true
	case 4: // no body
		r.status = 204
		r.head = []byte("HTTP/1.1 204 No Content\r\n\r\n")
	default: // a large body
		r.status = 200
		r.body = bytes.Repeat([]byte("0123456789abcdef"), 1000+rng.IntN(20000))
		r.head = fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", len(r.body))
		r.framed = r.body
	}
	total := len(r.head) + len(r.framed)
	for total > 0 {
		n := min(total, 1+rng.IntN(1+total/(1+rng.IntN(8))))
		r.pieces = append(r.pieces, n)
		total -= n
	}
	if rng.IntN(3) == 0 {
		r.pause = time.Duration(rng.IntN(20)) * time.Millisecond
	}
	if len(r.pieces) > 30 {
		r.pause = 0
	}
	return r
}

// unaskedResponse is the answer a broken engine sends after its answer.
const (
	unaskedBody     = "bad"
	unaskedResponse = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n" + unaskedBody
)

// mutateResponse breaks a well-formed response.
func mutateResponse(rng *rand.Rand, r fuzzResponse) fuzzResponse {
	all := r.bytes()
	r.preface = nil
	r.body = nil
	set := func(b []byte, how string) {
		r.head, r.framed, r.how = nil, b, how
	}
	switch rng.IntN(14) {
	case 0:
		b := append([]byte(nil), all...)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		set(b, "flipped bytes")
	case 1:
		set(all[:rng.IntN(len(all))], "cut off, then closed")
		r.close = true
	case 2:
		set(all[:rng.IntN(len(all))], "cut off, then reset")
		r.reset = true
	case 3:
		set(bytes.Replace(all, []byte("Content-Length: "), []byte("Content-Length: 9"), 1), "longer Content-Length, then closed")
		r.close = true
	case 4:
		set(bytes.Replace(all, []byte("\r\n\r\n"), []byte("\r\nContent-Length: 5\r\n\r\n"), 1), "a second Content-Length")
	case 5:
		set(bytes.Replace(all, []byte("chunked"), []byte("gzip, chunked"), 1), "Transfer-Encoding gzip")
	case 6:
		set(bytes.Replace(all, []byte("\r\n\r\n"), []byte("\r\n\r\nffffffffffffffff\r\n"), 1), "huge chunk size")
	case 7:
		i := bytes.Index(all, []byte("\r\n\r\n"))
		set(append(append(append([]byte(nil), all[:i+2]...), "X-Huge: "+strings.Repeat("h", 80<<10)+"\r\n"...), all[i+2:]...), "head over 72 KiB")
	case 8:
		set(all, "stall longer than the idle timeout")
		r.stall = 4 * time.Second
	case 9:
		set(append([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"), all...), "1xx first")
	case 10:
		set([]byte("garbage that is not HTTP at all\r\n\r\n"), "not HTTP")
		r.close = true
	case 11:
		set(nil, "closed before any byte")
		r.close = true
	case 12:
		set(bytes.Replace(all, []byte("HTTP/1.1"), []byte("HTTP/1.0"), 1), "HTTP/1.0")
		r.close = rng.IntN(2) == 0
	default:
		set(append(append([]byte(nil), all...), unaskedResponse...), "an unasked second response")
	}
	total := len(r.framed)
	r.pieces = nil
	for total > 0 {
		n := min(total, 1+rng.IntN(1+total))
		r.pieces = append(r.pieces, n)
		total -= n
	}
	return r
}

// mutateRequest breaks a request's bytes.
func mutateRequest(rng *rand.Rand, b []byte) ([]byte, string) {
	b = append([]byte(nil), b...)
	head := bytes.Index(b, []byte("\r\n\r\n"))
	switch rng.IntN(16) {
	case 0:
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		return b, "flipped bytes"
	case 1:
		return b[:rng.IntN(len(b))], "cut off"
	case 2:
		i := rng.IntN(len(b))
		junk := make([]byte, 1+rng.IntN(64))
		for j := range junk {
			junk[j] = byte(rng.IntN(256))
		}
		return append(append(append([]byte(nil), b[:i]...), junk...), b[i:]...), "inserted bytes"
	case 3:
		return bytes.Replace(b, []byte("\r\n\r\n"), []byte("\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"), 1), "CL and TE"
	case 4:
		return bytes.Replace(b, []byte("\r\n\r\n"), []byte("\r\nContent-Length: 99999999999999999999\r\n\r\n"), 1), "absurd Content-Length"
	case 5:
		return bytes.Replace(b, []byte("\r\n\r\n"), []byte("\r\nContent-Length: -1\r\n\r\n"), 1), "negative Content-Length"
	case 6:
		return bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")), "bare LF"
	case 7:
		return bytes.Replace(b, []byte("\r\n"), []byte("\r\nX-Big: "+strings.Repeat("B", 100<<10)+"\r\n"), 1), "headers over 72 KiB"
	case 8:
		return append([]byte("CONNECT evil.example:443"), b[bytes.Index(b, []byte(" HTTP/1.1")):]...), "CONNECT"
	case 9:
		return bytes.Replace(b, []byte(" /"), []byte(" http://evil.example/"), 1), "absolute-form"
	case 10:
		return bytes.Replace(b, []byte("HTTP/1.1"), []byte("HTTP/2.0"), 1), "HTTP/2.0 line"
	case 11:
		return append(b, b...), "pipelined twice"
	case 12:
		return b, "drip"
	case 13:
		if head < 0 {
			return b, "unchanged"
		}
		return b[:head+2], "headers never end"
	case 14:
		return bytes.Replace(b, []byte("\r\n"), []byte("\r\nExpect: 100-continue\r\n"), 1), "Expect 100-continue"
	default:
		return bytes.Replace(b, []byte("Host: fuzz\r\n"), []byte("Host: a\r\nHost: b\r\n"), 1), "two Hosts"
	}
}

// fuzzEngine answers each request by its X-Fuzz-Id's plan, and keeps the
// body it got.
type fuzzEngine struct {
	url   string
	mu    sync.Mutex
	plans map[int64]fuzzResponse
	got   map[int64][]byte
	// unknownModels: GET /v1/models answers 401.
	unknownModels bool
}

func startFuzzEngine(t *testing.T) *fuzzEngine {
	e := &fuzzEngine{plans: map[int64]fuzzResponse{}, got: map[int64][]byte{}}
	e.url = serveLoopback(t, e.serve)
	return e
}

func (e *fuzzEngine) plan(id int64, r fuzzResponse) {
	e.mu.Lock()
	e.plans[id] = r
	e.mu.Unlock()
}

func (e *fuzzEngine) received(id int64) ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.got[id]
	delete(e.got, id)
	return b, ok
}

func (e *fuzzEngine) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		id, _ := strconv.ParseInt(req.Header.Get("X-Fuzz-Id"), 10, 64)
		e.mu.Lock()
		r, ok := e.plans[id]
		delete(e.plans, id)
		if ok {
			e.got[id] = body
		}
		e.mu.Unlock()
		if !ok && req.URL.Path == "/v1/models" && e.unknownModels {
			out := `{"error":{"message":"invalid api key","code":401}}`
			fmt.Fprintf(c, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
			continue
		}
		if !ok && req.URL.Path == "/v1/models" {
			// The proxy lists the engine's models (WatchModels): "m", the
			// warm-up's, is one, so no listing is due while the proxy settles.
			out := `{"object":"list","data":[{"id":"m","object":"model"}]}`
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
			continue
		}
		if !ok {
			out := `{"ok":true}`
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
			continue
		}
		all := r.bytes()
		if r.echo > 0 {
			var h bytes.Buffer
			_ = req.Header.Write(&h)
			lines := strings.TrimRight(h.String(), "\r\n")
			switch r.echo {
			case 1:
				all = []byte("HTTP/1.1 2x0 " + req.Method + " " + req.RequestURI + " " + strings.ReplaceAll(lines, "\r\n", " ") + "\r\n\r\n")
			case 2:
				all = []byte("HTTP/1.1 200 OK\r\n" + strings.ReplaceAll(strings.ReplaceAll(lines, ": ", " "), "\r\n", "\r\n") + "\r\n\r\n")
			default:
				all = []byte(strings.ReplaceAll(lines, "\r\n", "\x00\n") + "\r\n\r\n")
			}
			r.pieces = []int{len(all)}
		}
		if req.Method == "HEAD" && r.how == "" {
			all = r.head // no body after a HEAD's head
		}
		off := 0
		for i, n := range r.pieces {
			if off >= len(all) {
				break
			}
			n = min(n, len(all)-off)
			if _, err := c.Write(all[off : off+n]); err != nil {
				return
			}
			off += n
			if r.pause > 0 {
				time.Sleep(r.pause)
			}
			if r.stall > 0 && i == len(r.pieces)/2 {
				time.Sleep(r.stall)
			}
		}
		if off < len(all) {
			if _, err := c.Write(all[off:]); err != nil {
				return
			}
		}
		if r.reset {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			return
		}
		if r.close || r.how != "" {
			return
		}
	}
}

// fuzzSettings are a fuzz run's length (TOKENTAP_FUZZ_TIME, default 10m),
// its seed (TOKENTAP_FUZZ_SEED replays a run's choices; else the clock)
// and its workers (TOKENTAP_FUZZ_WORKERS, default 8).
func fuzzSettings(t *testing.T) (time.Duration, uint64, int) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TOKENTAP_FUZZ_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	return envDuration(t, "TOKENTAP_FUZZ_TIME", 10*time.Minute), seed, envInt(t, "TOKENTAP_FUZZ_WORKERS", 8)
}
