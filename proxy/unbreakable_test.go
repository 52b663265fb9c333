package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/internal/test/benchcpu"
	"github.com/tokentap/tokentap/record"
)

// keylessEngine answers GET /v1/models with a 401 (vLLM started with
// --api-key, asked without one), so the proxy labels by the names clients
// send, and every other request with a small JSON 200.
func keylessEngine(t *testing.T) *scriptEngine {
	return startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		if strings.HasPrefix(r.Line, "GET /v1/models") {
			writeJSON(c, 401, `{"error":{"message":"missing API key"}}`)
			return true
		}
		writeJSON(c, 200, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		return true
	})
}

// rawPost sends body as it is (any bytes) and returns the status.
func rawPost(t *testing.T, url, body string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the proxy did not answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestAnyModelNameIsALabel: with the engine's model list unknown, a model
// name that is not UTF-8 (client_golang panics on such a label) or is a
// megabyte long is counted under a valid label of at most maxLabelLen
// bytes, /metrics stays small, and the proxy serves on.
func TestAnyModelNameIsALabel(t *testing.T) {
	e := keylessEngine(t)
	h := startProxy(t, e.url, nil)
	if _, err := h.p.WatchModels(t.Context(), time.Hour); err == nil {
		t.Fatal("the engine's 401 was taken for a model list")
	}
	names := []string{"bad\xffname", "\xc3", "ok", strings.Repeat("é", 300) + "\xff"}
	for i := range 5 {
		names = append(names, fmt.Sprintf("%d", i)+strings.Repeat("m", 1<<20))
	}
	for _, name := range names {
		body := `{"model":"` + name + `","messages":[{"role":"user","content":"hi"}]}`
		if code := rawPost(t, h.url, body); code != 200 {
			t.Fatalf("model %.20q: HTTP %d, want the engine's 200", name, code)
		}
	}
	recs := h.waitRecords(t, len(names))
	if recs[0].Model != "bad\xffname" {
		t.Errorf("the record's model is %q: the record keeps the name as sent", recs[0].Model)
	}
	_, body, err := do(t, "GET", h.admin+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 256<<10 {
		t.Errorf("/metrics is %d bytes after five 1 MB model names", len(body))
	}
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`model="((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(body), -1) {
		labels[m[1]] = true
	}
	if len(labels) != len(names) {
		t.Errorf("%d model labels, want %d (one per name)", len(labels), len(names))
	}
	for l := range labels {
		if len(l) > maxLabelLen || !utf8.ValidString(l) {
			t.Errorf("label %.40q: %d bytes, valid UTF-8 %v", l, len(l), utf8.ValidString(l))
		}
	}
	if code := rawPost(t, h.url, chatBody("ok", 1, false, "")); code != 200 {
		t.Errorf("after the odd names a plain request got %d", code)
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tt := range []struct{ in, want string }{
		{"llama", "llama"},
		{"bad\xffname", "bad\uFFFDname"},
		{long, long[:maxLabelLen-len("…")] + "…"},
		{strings.Repeat("é", 100), strings.Repeat("é", (maxLabelLen-len("…"))/2) + "…"},
		{"", ""},
		{"esc\x1b[31mred", `esc\x1b[31mred`},
		{"tab\tdel\x7fc1\u0085", `tab\x09del\x7fc1\x85`},
	} {
		got := labelValue(tt.in)
		if got != tt.want {
			t.Errorf("labelValue(%.30q) = %.40q, want %.40q", tt.in, got, tt.want)
		}
		if len(got) > maxLabelLen || !utf8.ValidString(got) {
			t.Errorf("labelValue(%.30q) = %d bytes, valid %v", tt.in, len(got), utf8.ValidString(got))
		}
	}
}

// TestModelSeriesExpire: a model's series leave /metrics and /stats once
// no request named it for the TTL.
func TestModelSeriesExpire(t *testing.T) {
	m := newMetrics()
	m.ttl = time.Millisecond
	m.add(&record.Record{Model: "once", Outcome: record.OK, Sent: 0, End: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	m.add(&record.Record{Model: "again", Outcome: record.OK, Sent: 0, End: time.Millisecond})
	if _, ok := m.models["once"]; ok {
		t.Error("a model not seen for longer than the TTL is still kept")
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.Metric {
			for _, l := range mt.Label {
				if l.GetName() == "model" && l.GetValue() == "once" {
					t.Errorf("%s still has model=once", mf.GetName())
				}
			}
		}
	}
	if _, ok := m.models["again"]; !ok {
		t.Error("the model just seen was dropped")
	}
}

// TestRecordKeptWhenBookkeepingPanics: a fault while keeping a record
// (here the OnRecord callback) is recovered and counted; the capture
// still gets the record and the proxy serves on.
func TestRecordKeptWhenBookkeepingPanics(t *testing.T) {
	e := keylessEngine(t)
	var capture bytes.Buffer
	var mu sync.Mutex
	h := startProxy(t, e.url, func(c *Config) {
		c.Capture = &lockedWriter{w: &capture, mu: &mu}
		inner := c.OnRecord
		c.OnRecord = func(r *record.Record) {
			inner(r)
			if r.Model == "boom" {
				panic("bookkeeping fault")
			}
		}
	})
	for _, model := range []string{"boom", "after"} {
		if code := rawPost(t, h.url, chatBody(model, 1, false, "")); code != 200 {
			t.Fatalf("%s: HTTP %d", model, code)
		}
	}
	h.waitRecords(t, 2)
	if got := h.metric(t, "tokentap_internal_errors_total"); got != "1" {
		t.Errorf("tokentap_internal_errors_total = %q, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(capture.String(), "\n"); n != 2 {
		t.Errorf("the capture has %d records, want 2:\n%s", n, capture.String())
	}
}

// TestNoContentTypeInventedOnResponses: an engine answer without a
// Content-Type reaches the client without one, with a length or streamed.
func TestNoContentTypeInventedOnResponses(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		if strings.Contains(r.Line, "/stream") {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		} else {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		}
		return true
	})
	h := startProxy(t, e.url, nil)
	for _, path := range []string{"/plain", "/stream"} {
		resp, body, err := do(t, "GET", h.url+path, "")
		if err != nil || string(body) != "hello" {
			t.Fatalf("%s: %q %v", path, body, err)
		}
		if ct, ok := resp.Header["Content-Type"]; ok {
			t.Errorf("%s: the engine sent no Content-Type; the client got %q", path, ct)
		}
	}
}

// TestMalformedHeadEchoingKeys: an engine whose broken response head
// repeats the request's headers: the client's 502, the log (debug) and the
// record hold no byte of the keys.
func TestMalformedHeadEchoingKeys(t *testing.T) {
	const key = "sk-ECHOKEY-4d9a2b7c1e"
	const bare = "ECHOBARE7f3a9c11d2e4"
	var logs strings.Builder
	var mu sync.Mutex
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		var head strings.Builder
		head.WriteString(r.Line + "\r\n")
		for k, vs := range r.Header {
			for _, v := range vs {
				head.WriteString(k + ": " + v + "\r\n")
			}
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"+head.String()+"\r\n\r\nok")
		return false
	})
	h := startProxy(t, e.url, func(c *Config) { c.Logger = zerolog.New(&lockedWriter{w: &logs, mu: &mu}).Level(zerolog.DebugLevel) })
	for _, path := range []string{"/echo", "/v1/chat/completions"} {
		resp, body, err := do(t, "POST", h.url+path, chatBody("m", 1, true, ""),
			"Authorization", "Bearer "+key, "X-Api-Key", bare, "Api-Key", bare)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 502 {
			t.Errorf("%s: HTTP %d, want 502 for a head that is not HTTP", path, resp.StatusCode)
		}
		if strings.Contains(string(body), "ECHO") {
			t.Errorf("%s: the client's 502 holds the key: %s", path, body)
		}
	}
	recs := h.waitRecords(t, 1)
	if b, _ := json.Marshal(recs); strings.Contains(string(b), "ECHO") {
		t.Errorf("the record holds the key: %s", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "ECHO") {
		t.Errorf("the log holds the key:\n%s", logs.String())
	}
}

// TestKeyCutByExcerptIsScrubbed: an engine error body that repeats the
// key where the record's excerpt is cut: no piece of the key of 8 bytes or
// more is left in the record (the scrub runs before the cut).
func TestKeyCutByExcerptIsScrubbed(t *testing.T) {
	const key = "QX7KEYPART0123456789abcdefghijkl" // 32 bytes, no sk- prefix
	for _, at := range []int{200, 212, 220, 230, 236, 239, 250, 505, 510} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
				pad := strings.Repeat("x", at-len(`{"error":{"message":"`))
				writeJSON(c, 400, `{"error":{"message":"`+pad+key+` was refused"}}`+strings.Repeat(" ", 600))
				return true
			})
			h := startProxy(t, e.url, nil)
			_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 1, true, ""), "Authorization", "Bearer "+key)
			rec := h.waitRecords(t, 1)[0]
			for i := 0; i+8 <= len(key); i++ {
				if strings.Contains(rec.Error, key[i:i+8]) {
					t.Fatalf("a piece of the key (%q) is in the record's error: %q", key[i:i+8], rec.Error)
				}
			}
			if !strings.Contains(rec.Error, "HTTP 400") {
				t.Errorf("error %q does not say what happened", rec.Error)
			}
		})
	}
}

// slowStream is an engine streaming max_tokens chat chunks (default 20)
// every gap, then usage and [DONE].
func slowStream(t *testing.T, gap time.Duration) *scriptEngine {
	return startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		var req struct {
			MaxTokens int `json:"max_tokens"`
		}
		_ = json.Unmarshal([]byte(r.Body), &req)
		if req.MaxTokens == 0 {
			req.MaxTokens = 20
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := func(s string) error { _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(s), s); return err }
		for range req.MaxTokens {
			if chunk(`data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" t"}}]}`+"\n\n") != nil {
				return false
			}
			time.Sleep(gap)
		}
		chunk(`data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":` + fmt.Sprint(req.MaxTokens) + `}}` + "\n\n")
		chunk("data: [DONE]\n\n")
		io.WriteString(c, "0\r\n\r\n")
		return true
	})
}

// TestShutdownDrainsThenCutsAndRecordsAll: Close lets a short stream end
// whole, cuts a long one when its time runs out, answers 503 on /healthz
// meanwhile, and records both before it returns.
func TestShutdownDrainsThenCutsAndRecordsAll(t *testing.T) {
	e := slowStream(t, 50*time.Millisecond)
	h := startProxy(t, e.url, nil)
	type got struct {
		body string
		err  error
	}
	results := make(chan got, 2)
	for _, n := range []int{8, 200} { // 0.4 s and 10 s
		go func() {
			resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", n, true, ""))
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			results <- got{string(body), err}
		}()
	}
	for h.p.Open() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- h.p.Close(ctx) }()
	for !h.p.Draining() {
		time.Sleep(time.Millisecond)
	}
	resp, _, err := do(t, "GET", h.admin+"/healthz", "")
	if err != nil || resp.StatusCode != 503 {
		t.Errorf("/healthz while draining: %v %v, want 503", resp, err)
	}
	start := time.Now()
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Close took %v", d)
	}
	recs := h.waitRecords(t, 2)
	var ok, cut int
	for _, r := range recs {
		switch {
		case r.Outcome == record.OK && r.CompletionTokens == 8:
			ok++
		case r.Blame == record.BlameTokentap && strings.Contains(r.Error, "shutdown"):
			cut++
		default:
			t.Errorf("record %+v", r)
		}
	}
	if ok != 1 || cut != 1 {
		t.Errorf("%d whole and %d cut records, want 1 and 1", ok, cut)
	}
	done := 0
	for range 2 {
		if g := <-results; strings.Contains(g.body, "[DONE]") {
			done++
		}
	}
	if done != 1 {
		t.Errorf("%d clients got [DONE], want the short stream's", done)
	}
}

// TestShedOverMaxClientConns: connections over the ceiling get a 503 at
// once and are counted; the ones under it are served.
func TestShedOverMaxClientConns(t *testing.T) {
	e := keylessEngine(t)
	h := startProxy(t, e.url, func(c *Config) { c.MaxClientConns, c.MaxConnsPerIP = 4, -1 })
	addr := strings.TrimPrefix(h.url, "http://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for h.p.m.clientConns.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	answer, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(answer), "HTTP/1.1 503") || !strings.Contains(string(answer), "--max-client-conns") {
		t.Errorf("a connection over the ceiling got %q, want a 503 naming --max-client-conns", answer)
	}
	if got := h.metric(t, `tokentap_client_rejected_total{reason="max_client_conns"}`); got != "1" {
		t.Errorf("max_client_conns rejections = %q, want 1", got)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	for h.p.m.clientConns.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	if code := rawPost(t, h.url, chatBody("m", 1, false, "")); code != 200 {
		t.Errorf("under the ceiling again, a request got %d", code)
	}
}

// fdLimitListener fails its first accepts with EMFILE, as a process out
// of descriptors does.
type fdLimitListener struct {
	net.Listener
	fails int
}

func (l *fdLimitListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptWaitsOutDescriptorShortage: accept failing with EMFILE does
// not end Serve (fasthttp returns on it): the proxy waits, accepts again,
// counts the failures and serves.
func TestAcceptWaitsOutDescriptorShortage(t *testing.T) {
	e := keylessEngine(t)
	p, err := New(Config{Upstream: e.url, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(&fdLimitListener{Listener: ln, fails: 5}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	if code := rawPost(t, "http://"+ln.Addr().String(), chatBody("m", 1, false, "")); code != 200 {
		t.Errorf("after EMFILE accepts, a request got %d", code)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
	if n := p.m.acceptErrs.Load(); n != 5 {
		t.Errorf("%d accept failures counted, want 5", n)
	}
}

// hugeEventEngine streams one chat event of n content bytes, then usage
// and [DONE].
func hugeEventEngine(t testing.TB, n int) string {
	event := `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", n) + `"}}]}` + "\n\n"
	return sseEngine(t, func(w func(string), raw io.Writer) {
		for b := event; len(b) > 0; {
			k := min(len(b), 32<<10)
			w(b[:k])
			b = b[k:]
		}
		w(`data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n")
		w("data: [DONE]\n\n")
		io.WriteString(raw, "0\r\n\r\n")
	})
}

// TestHugeEventThroughProxy: a 15 MB event of a stream whose usage the
// proxy asked for reaches the client whole, the usage chunk removed.
func TestHugeEventThroughProxy(t *testing.T) {
	h := startProxy(t, hugeEventEngine(t, 15<<20), nil)
	resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 1, true, ""))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if !bytes.Contains(body, []byte(strings.Repeat("x", 15<<20))) || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) || bytes.Contains(body, []byte(`"usage"`)) {
		t.Errorf("the client got %d bytes: not the event whole, then [DONE], without the usage chunk", len(body))
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.OK {
		t.Errorf("record %s %q", r.Outcome, r.Error)
	}
}

// BenchmarkHugeEventThroughProxy: the proxy's CPU for a 15 MB event with
// usage removal on (quadratic before: the held bytes were copied on every
// read).
func BenchmarkHugeEventThroughProxy(b *testing.B) {
	h := startProxy(b, hugeEventEngine(b, 15<<20), nil)
	b.SetBytes(15 << 20)
	start := benchcpu.Now()
	for b.Loop() {
		resp, _, err := do(b, "POST", h.url+"/v1/chat/completions", chatBody("m", 1, true, ""))
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(resp, err)
		}
	}
	benchcpu.Report(b, start)
}

// earlyAnswerEngine answers every request with status before reading its
// body, then closes (unread bytes make the close a reset).
func earlyAnswerEngine(t *testing.T, status int) string {
	return rawEngine(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		writeJSON(c, status, `{"error":{"message":"early answer"}}`)
		time.Sleep(50 * time.Millisecond)
	})
}

// rawEngine serves every connection accepted on a loopback port with
// handle (the connection closed after it), for the test's life, and
// returns its URL: an engine whose bytes a test writes itself.
func rawEngine(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// answerEach is a raw engine that reads each request on a connection, its
// body whole, and answers it with answer, which writes the answer itself
// (false ends the connection).
func answerEach(t *testing.T, answer func(c net.Conn, body []byte) bool) string {
	t.Helper()
	return rawEngine(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			if !answer(c, body) {
				return
			}
		}
	})
}

// TestEngineAnswersBeforeReadingTheBody: an engine that answers 413 or
// 401 before reading a large body and closes: the client gets that answer,
// not a 502, and the record has the engine's status.
func TestEngineAnswersBeforeReadingTheBody(t *testing.T) {
	for _, status := range []int{413, 401} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			h := startProxy(t, earlyAnswerEngine(t, status), nil)
			big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("y", 8<<20) + `"}]}`
			resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", big)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != status || !strings.Contains(string(body), "early answer") {
				t.Errorf("the client got %d %q, want the engine's %d", resp.StatusCode, body, status)
			}
			r := h.waitRecords(t, 1)[0]
			if r.Status != status || r.Outcome != record.HTTPError || r.Blame != record.BlameClient {
				t.Errorf("record: status %d, %s, blame %s; want %d, http_error, client", r.Status, r.Outcome, r.Blame, status)
			}
		})
	}
}

// TestRequestsTheEngineMustNotGet: what fasthttp reads but RFC 9112 does
// not allow is refused at the proxy, and never reaches the engine.
func TestRequestsTheEngineMustNotGet(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	h := startProxy(t, e.url, func(c *Config) { c.MaxBodySize = 1000 })
	addr := strings.TrimPrefix(h.url, "http://")
	for _, tt := range []struct {
		name, raw string
		status    int
	}{
		{"HTTP/2.0 request line", "GET /v1/models HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		{"space in a header name", "GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400},
		{"chunked trailer fields", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n", 400},
		{"100-continue over the body limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n", 413},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tt.raw)
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			head, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if want := fmt.Sprintf("HTTP/1.1 %d ", tt.status); !strings.HasPrefix(head, want) {
				t.Errorf("answer %q, want %q (and no 100 Continue before it)", head, want)
			}
		})
	}
	if n := len(e.requests()); n != 0 {
		t.Errorf("the engine got %d of the refused requests: %v", n, e.requests())
	}
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 1, true, ""))
	if reqs := e.requests(); len(reqs) != 1 || reqs[0].Header.Get("Accept-Encoding") != "identity" {
		t.Errorf("a measured request reached the engine with Accept-Encoding %q, want identity", reqs[0].Header.Get("Accept-Encoding"))
	}
}

// TestStatsResetNeedsItsHeader: a POST a web page can send (no custom
// header) does not reset /stats.
func TestStatsResetNeedsItsHeader(t *testing.T) {
	e := keylessEngine(t)
	h := startProxy(t, e.url, nil)
	rawPost(t, h.url, chatBody("m", 1, false, ""))
	h.waitRecords(t, 1)
	resp, _, _ := do(t, "POST", h.admin+"/stats", "")
	if resp.StatusCode != 403 || h.p.Stats(false).Models["m"] == nil {
		t.Errorf("POST /stats without %s: HTTP %d, figures kept %v; want 403 and kept", ResetHeader, resp.StatusCode, h.p.Stats(false).Models["m"] != nil)
	}
	resp, _, _ = do(t, "POST", h.admin+"/stats", "", ResetHeader, "1")
	if resp.StatusCode != 200 || h.p.Stats(false).Models["m"] != nil {
		t.Errorf("POST /stats with %s: HTTP %d; want 200 and a reset", ResetHeader, resp.StatusCode)
	}
}

// TestHTTP10ClientGetsACloseDelimitedStream: a stream to an HTTP/1.0
// client is not chunked (RFC 9112 §6.1): its end is the connection's.
func TestHTTP10ClientGetsACloseDelimitedStream(t *testing.T) {
	e := slowStream(t, time.Millisecond)
	h := startProxy(t, e.url, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := chatBody("m", 5, true, "")
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read %q: %v (the proxy must close the connection at the end)", all, err)
	}
	head, rest, _ := strings.Cut(string(all), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200") || strings.Contains(strings.ToLower(head), "transfer-encoding") || strings.Contains(strings.ToLower(head), "content-length") {
		t.Errorf("head %q: want a 200 without Transfer-Encoding or Content-Length", head)
	}
	if !strings.HasPrefix(rest, "data: ") || !strings.HasSuffix(rest, "data: [DONE]\n\n") || strings.Contains(rest, `"usage"`) {
		t.Errorf("body %q: want the events as sent, no chunk framing, no injected usage", rest)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.OK || r.CompletionTokens != 5 {
		t.Errorf("record %s, %d tokens", r.Outcome, r.CompletionTokens)
	}
}

// TestBareLFRequestIsRefusedAtOnce: a request head whose lines end in LF
// alone gets a 400 at once, not a 408 after the read timeout; one with
// CRLF whose body holds bare LFs passes.
func TestBareLFRequestIsRefusedAtOnce(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	h := startProxy(t, e.url, nil)
	addr := strings.TrimPrefix(h.url, "http://")
	for _, tt := range []struct {
		name, raw string
		status    string
	}{
		{"bare LF", "GET /v1/models HTTP/1.1\nHost: x\n\n", "HTTP/1.1 400 "},
		{"bare LF after CRLF lines", "GET /v1/models HTTP/1.1\r\nHost: x\n\r\n", "HTTP/1.1 400 "},
		{"LF in the body", "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{\n}\n\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tt.raw)
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			start := time.Now()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, tt.status) {
				t.Errorf("answer %q %v, want %q", line, err, tt.status)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered after %v", d)
			}
		})
	}
}

func TestDropQuoted(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`invalid header value "KEY\x00": buffer size=96`, `invalid header value "…": buffer size=96`},
		{`a "b\"c" d "e"`, `a "…" d "…"`},
		{`no quotes`, `no quotes`},
		{`unterminated "KEY`, `unterminated "`},
	} {
		if got := dropQuoted(tt.in); got != tt.want {
			t.Errorf("dropQuoted(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestScrubEveryValueOfEveryKeyHeader: an engine that echoes every key
// header's value, JSON-escaped: repeated headers, a short first value, a
// key with quotes, tabs or non-ASCII bytes leave no key in the record.
func TestScrubEveryValueOfEveryKeyHeader(t *testing.T) {
	for _, tt := range []struct {
		name string
		hdr  []string
	}{
		{"two X-Api-Key", []string{"X-Api-Key", "SECRETfirst1234", "X-Api-Key", "SECRETdup-xapikey"}},
		{"Bearer then Basic", []string{"Authorization", "Bearer SECRETbearer99", "Authorization", "Basic SECRETdupauth77"}},
		{"short first value", []string{"Api-Key", "z", "Api-Key", "KEYCCC333zzzSECRET"}},
		{"quote and tab", []string{"X-Api-Key", "SECRET-quote\"key\tand-tab-é"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			var echo []string
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				h.Add(tt.hdr[i], tt.hdr[i+1])
				echo = append(echo, tt.hdr[i+1])
			}
			body, _ := json.Marshal(map[string]any{"error": map[string]string{"message": "invalid key(s): " + strings.Join(echo, " | ")}})
			got := scrubSecrets("HTTP 401 from the engine: "+string(body), &h)
			for _, v := range echo {
				if len(v) >= 8 && (strings.Contains(got, v) || strings.Contains(got, "SECRET")) {
					t.Errorf("a key survived: %s", got)
				}
			}
		})
	}
}

// TestEveryRefusedMeasuredRequestIsRecorded: a chat request the proxy
// refuses (bad version, bad header name, trailers, a body over the limit
// announced, chunked or stalled, a client gone mid-body) has a record
// with the status the client got, blamed on the client.
func TestEveryRefusedMeasuredRequestIsRecorded(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	h := startProxy(t, e.url, func(c *Config) { c.MaxBodySize = 1000; c.BodyTimeout = 500 * time.Millisecond })
	addr := strings.TrimPrefix(h.url, "http://")
	const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	for i, raw := range []string{
		"POST /v1/chat/completions HTTP/1.2\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		head + "X Bad: 1\r\nContent-Length: 2\r\n\r\n{}",
		head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n",
		head + "Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
		head + "Transfer-Encoding: chunked\r\n\r\n1000\r\n" + strings.Repeat("x", 4096) + "\r\n0\r\n\r\n",
		head + "Content-Length: 100\r\n\r\n{\"model\":",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, raw)
		answer, _ := readUntilClosed(c, 3*time.Second)
		c.Close()
		recs := h.waitRecords(t, i+1)
		r := recs[i]
		if r.Outcome != record.HTTPError || r.Blame != record.BlameClient || !strings.Contains(answer, fmt.Sprintf(" %d ", r.Status)) {
			t.Errorf("%.60q: record %s/%s status %d; the client got %.40q", raw, r.Outcome, r.Blame, r.Status, answer)
		}
	}
}

// TestResponseHeadsTheClientMustNotGet: the engine's HTTP version is not
// passed on (the status line is the proxy's, HTTP/1.1); a 101 nobody asked
// for, a status outside 100-599 and a header name with a space are a 502.
func TestResponseHeadsTheClientMustNotGet(t *testing.T) {
	heads := map[string]string{
		"/v10":  "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello",
		"/v20":  "HTTP/2.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"/101":  "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
		"/999":  "HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
		"/name": "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 5\r\n\r\nhello",
	}
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		f := strings.Fields(r.Line)
		io.WriteString(c, heads[f[1]])
		return false
	})
	h := startProxy(t, e.url, nil)
	addr := strings.TrimPrefix(h.url, "http://")
	for path, want := range map[string]string{"/v10": "HTTP/1.1 200 ", "/v20": "HTTP/1.1 200 ", "/101": "HTTP/1.1 502 ", "/999": "HTTP/1.1 502 ", "/name": "HTTP/1.1 502 "} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		br := bufio.NewReader(c)
		line, _ := br.ReadString('\n')
		if !strings.HasPrefix(line, want) {
			t.Errorf("%s: status line %q, want %q", path, line, want)
		}
		if path == "/v10" {
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(line), br)), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != "hello" {
				t.Errorf("/v10: body %q through the proxy's framing, want hello", body)
			}
		}
		c.Close()
	}
}

// TestClientGoneGetsNoStatus: a client that half-closes after its request
// is taken as gone (its request cancelled at the engine) and gets nothing,
// not a 499, which is no HTTP status.
func TestClientGoneGetsNoStatus(t *testing.T) {
	e := slowStream(t, 50*time.Millisecond)
	h := startProxy(t, e.url, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := chatBody("m", 5, true, "")
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.(*net.TCPConn).CloseWrite()
	got, _ := readUntilClosed(c, 3*time.Second)
	if strings.Contains(got, "499") {
		t.Errorf("a client gone got %q", got)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Errorf("record %s/%s, want cancelled by the client", r.Outcome, r.Blame)
	}
}

// TestShutdownCutBeforeAnswerGets503: a request the engine has not
// answered when the shutdown's time runs out gets a 503 saying why, and a
// record (broken, tokentap's).
func TestShutdownCutBeforeAnswerGets503(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { time.Sleep(2 * time.Second); return false })
	h := startProxy(t, e.url, nil)
	got := make(chan string, 1)
	go func() {
		resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 5, true, ""))
		if err != nil {
			got <- err.Error()
			return
		}
		got <- fmt.Sprint(resp.StatusCode, " ", string(body))
	}()
	for h.p.Open() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the request is at the engine
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !strings.HasPrefix(g, "503 ") || !strings.Contains(g, "shutting down") {
		t.Errorf("the client got %q, want a 503 saying the proxy is shutting down", g)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.Broken || r.Blame != record.BlameTokentap {
		t.Errorf("record %s/%s %q", r.Outcome, r.Blame, r.Error)
	}
}
