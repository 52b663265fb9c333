package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// seenRequest is one request a scripted engine read.
type seenRequest struct {
	Line   string // request line
	Header http.Header
	Body   string
	Conn   int // the connection's number (1 = first accepted)
	Nth    int // the request's number on its connection
}

// scriptEngine is an engine on a raw socket: it reads each request whole
// (net/http's parser) and lets answer write what it likes, or drop the
// connection (return false). Every request it read is kept, in order.
type scriptEngine struct {
	url    string
	mu     sync.Mutex
	seen   []seenRequest
	answer func(c net.Conn, r seenRequest) bool
}

func startScriptEngine(t *testing.T, answer func(c net.Conn, r seenRequest) bool) *scriptEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &scriptEngine{url: "http://" + ln.Addr().String(), answer: answer}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func(c net.Conn, id int) {
				defer conns.Done()
				defer c.Close()
				go func() { <-t.Context().Done(); c.Close() }()
				br := bufio.NewReader(c)
				for k := 1; ; k++ {
					line, err := br.Peek(1)
					if err != nil || len(line) == 0 {
						return
					}
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					r := seenRequest{Line: req.Method + " " + req.RequestURI + " " + req.Proto, Header: req.Header, Body: string(body), Conn: id, Nth: k}
					e.mu.Lock()
					e.seen = append(e.seen, r)
					e.mu.Unlock()
					if !e.answer(c, r) {
						return
					}
				}
			}(c, n)
		}
	}()
	return e
}

func (e *scriptEngine) requests() []seenRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seenRequest(nil), e.seen...)
}

// count is how many requests whose body holds marker the engine read.
func (e *scriptEngine) count(marker string) int {
	n := 0
	for _, r := range e.requests() {
		if strings.Contains(r.Body, marker) {
			n++
		}
	}
	return n
}

func writeJSON(c net.Conn, status int, body string, hdr ...string) {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", status, http.StatusText(status), len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n" + body)
	_, _ = io.WriteString(c, b.String())
}

// reset closes c with a reset (RST), as an engine that crashes does.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

type openAIErr struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

// wantOpenAIError checks a body is an OpenAI-style error with status code
// and a message holding every one of words.
func wantOpenAIError(t *testing.T, body []byte, code int, words ...string) {
	t.Helper()
	var e openAIErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("body is not an OpenAI error with code %d: %s", code, body)
	}
	for _, w := range words {
		if !strings.Contains(e.Error.Message, w) {
			t.Errorf("error message %q lacks %q", e.Error.Message, w)
		}
	}
}

// metric reads one line's value from /metrics ("" when absent).
func (h *harness) metric(t *testing.T, series string) string {
	t.Helper()
	_, body, err := do(t, "GET", h.admin+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestRetries checks the proxy sends a request to the engine again only
// when that cannot run it twice (issue 13, item 1). The engine reads a
// request on a reused keep-alive connection and then drops the connection
// (closed or reset, at once or after working on it): a POST reaches it once
// and the client gets a 502 and a record; a POST with an Idempotency-Key,
// and a GET, are sent again on another connection, and the record and
// /metrics say so.
func TestRetries(t *testing.T) {
	for _, tt := range []struct {
		name    string
		method  string
		path    string
		hdr     []string
		drop    func(net.Conn)
		work    time.Duration
		resent  bool
		measure bool
	}{
		{"POST, closed after 300ms of work", "POST", "/v1/chat/completions", nil, func(c net.Conn) { c.Close() }, 300 * time.Millisecond, false, true},
		{"POST, reset at once", "POST", "/v1/chat/completions", nil, reset, 0, false, true},
		{"POST, other path, closed", "POST", "/v1/embeddings", nil, func(c net.Conn) { c.Close() }, 0, false, false},
		{"POST with Idempotency-Key, reset", "POST", "/v1/chat/completions", []string{"Idempotency-Key", "k-1"}, reset, 100 * time.Millisecond, true, true},
		{"POST with X-Idempotency-Key, closed", "POST", "/v1/chat/completions", []string{"X-Idempotency-Key", "k-2"}, func(c net.Conn) { c.Close() }, 0, true, true},
		{"GET without a body, closed", "GET", "/v1/models", nil, func(c net.Conn) { c.Close() }, 0, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
				// Only on a reused connection: a resend goes on a new one.
				if r.Nth >= 2 && (strings.Contains(r.Body, "DROP") || r.Line[:3] == "GET") {
					time.Sleep(tt.work)
					tt.drop(c)
					return false
				}
				writeJSON(c, 200, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
				return true
			})
			h := startProxy(t, e.url, nil)
			// The first request opens the keep-alive connection the second reuses.
			if resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m","warm":1}`); err != nil || resp.StatusCode != 200 {
				t.Fatalf("warm-up: %v %v", resp, err)
			}
			body := `{"model":"m","DROP":1}`
			if tt.method == "GET" {
				body = ""
			}
			resp, got, err := do(t, tt.method, h.url+tt.path, body, tt.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			reached := e.count("DROP")
			if tt.method == "GET" {
				reached = 0
				for _, r := range e.requests() {
					if strings.HasPrefix(r.Line, "GET") {
						reached++
					}
				}
			}
			records := 1
			if tt.measure {
				records = 2
			}
			if tt.resent {
				if reached != 2 || resp.StatusCode != 200 {
					t.Fatalf("a replayable request reached the engine %d times and got %d, want 2 and 200", reached, resp.StatusCode)
				}
				reason := "nothing_written"
				if tt.method == "POST" || tt.method == "GET" {
					reason = "replayable"
				}
				if v := h.metric(t, `tokentap_upstream_retries_total{reason="`+reason+`"}`); v != "1" {
					t.Errorf("retries{%s} = %q, want 1", reason, v)
				}
				if tt.measure {
					if r := h.waitRecords(t, records)[1]; r.Retries != 1 || r.Outcome != record.OK {
						t.Errorf("record: %s, %d retries; want ok, 1", r.Outcome, r.Retries)
					}
				}
				return
			}
			if reached != 1 {
				t.Fatalf("a written POST reached the engine %d times", reached)
			}
			if resp.StatusCode != 502 {
				t.Fatalf("status %d, want 502", resp.StatusCode)
			}
			wantOpenAIError(t, got, 502, "not sent again", "Idempotency-Key")
			for _, reason := range []string{"nothing_written", "replayable"} {
				if v := h.metric(t, `tokentap_upstream_retries_total{reason="`+reason+`"}`); v != "0" {
					t.Errorf("retries{%s} = %q, want 0", reason, v)
				}
			}
			if !tt.measure {
				return
			}
			r := h.waitRecords(t, records)[1]
			if r.Outcome != record.Broken || r.Blame != record.BlameEngine || r.Retries != 0 || !strings.Contains(r.Error, "not sent again") {
				t.Fatalf("record %s/%s, %d retries, %q", r.Outcome, r.Blame, r.Retries, r.Error)
			}
			if took := r.End - r.Sent; took < tt.work {
				t.Errorf("the record took %v, less than the engine's %v of work", took, tt.work)
			}
		})
	}
}

// TestStaleConnectionIsNotARetry has the engine close each keep-alive
// connection right after answering (as uvicorn does when its keep-alive
// ends): the next request must find that out before writing, and go on a
// new connection with no retry and no error.
func TestStaleConnectionIsNotARetry(t *testing.T) {
	closed := make(chan struct{}, 3)
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		writeJSON(c, 200, `{"ok":true}`)
		c.Close() // after the answer, without Connection: close
		closed <- struct{}{}
		return false
	})
	h := startProxy(t, e.url, nil)
	for i := range 3 {
		resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", fmt.Sprintf(`{"model":"m","n":%d}`, i))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		<-closed // on loopback the FIN is in the proxy's socket once close returns
	}
	if len(e.requests()) != 3 {
		t.Fatalf("the engine read %d requests, want 3", len(e.requests()))
	}
	for _, r := range h.waitRecords(t, 3) {
		if r.Retries != 0 || r.Outcome != record.OK {
			t.Errorf("record %s with %d retries", r.Outcome, r.Retries)
		}
	}
	if v := h.metric(t, "tokentap_upstream_stale_connections_total"); v != "2" {
		t.Errorf("stale connections %q, want 2", v)
	}
}

// TestUnaskedAnswerIsNotPassedOn has an engine send a second answer
// nobody asked for after its first: with the first's end (read in the same
// read, so it waits in the proxy's buffer, not the socket a reuse peeks
// at), or a moment later, while the connection sits idle. Either way the
// connection is out of step with its requests and must not carry the next
// one: reused, it would hand that request the unasked answer.
func TestUnaskedAnswerIsNotPassedOn(t *testing.T) {
	const unasked = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nstray"
	sse := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	chunked := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(sse), sse)
	json := `{"id":"x","object":"chat.completion","choices":[]}`
	plain := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(json), json)
	for _, tc := range []struct {
		name   string
		first  string        // the first answer
		later  time.Duration // the unasked one comes this long after it (0: in the same write)
		stream bool
		metric string // the counter that must say the connection was dropped
	}{
		{"with a JSON answer's end", plain, 0, false, "tokentap_upstream_out_of_step_connections_total"},
		{"with a stream's end", chunked, 0, true, "tokentap_upstream_out_of_step_connections_total"},
		{"while idle", plain, 30 * time.Millisecond, false, "tokentap_upstream_stale_connections_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := make(chan struct{}, 2)
			e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
				if r.Nth > 1 || r.Conn > 1 {
					writeJSON(c, 200, `{"second":true}`)
					return true
				}
				if tc.later == 0 {
					_, _ = io.WriteString(c, tc.first+unasked) // one write, one read
				} else {
					_, _ = io.WriteString(c, tc.first)
					time.Sleep(tc.later)
					_, _ = io.WriteString(c, unasked)
				}
				sent <- struct{}{}
				return true
			})
			h := startProxy(t, e.url, nil)
			body := `{"model":"m"}`
			if tc.stream {
				body = `{"model":"m","stream":true}`
			}
			resp, got, err := do(t, "POST", h.url+"/v1/chat/completions", body)
			if err != nil || resp.StatusCode != 200 || strings.Contains(string(got), "stray") {
				t.Fatalf("first: %v %q %v", resp, got, err)
			}
			<-sent
			time.Sleep(20 * time.Millisecond) // the unasked bytes are in the proxy's socket
			resp, got, err = do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m","n":2}`)
			if err != nil || resp.StatusCode != 200 || string(got) != `{"second":true}` {
				t.Fatalf("second request: got %v %q %v, want the engine's answer to it", resp, got, err)
			}
			reqs := e.requests()
			if len(reqs) != 2 || reqs[1].Conn != 2 {
				t.Fatalf("the engine read %d requests, the second on connection %d, want it on a new one", len(reqs), reqs[len(reqs)-1].Conn)
			}
			if v := h.metric(t, tc.metric); v != "1" {
				t.Errorf("%s = %q, want 1", tc.metric, v)
			}
			for _, r := range h.waitRecords(t, 2) {
				if r.Retries != 0 || r.Outcome != record.OK {
					t.Errorf("record %s with %d retries, want ok with none", r.Outcome, r.Retries)
				}
			}
		})
	}
}

// TestNothingWrittenIsResent breaks the upstream connection just before
// the request is written (a test hook closes it): nothing of the request
// left, so it goes again on a new connection, whatever its method.
func TestNothingWrittenIsResent(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		writeJSON(c, 200, `{"id":"x","object":"chat.completion","choices":[]}`)
		return true
	})
	h := startProxy(t, e.url, nil)
	if resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("warm-up: %v %v", resp, err)
	}
	var once sync.Once
	hook := func(c net.Conn) { once.Do(func() { c.Close() }) }
	testBeforeSend.Store(&hook)
	defer testBeforeSend.Store(nil)
	resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m","again":1}`)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if n := e.count(`"again"`); n != 1 {
		t.Fatalf("the engine read the request %d times, want 1", n)
	}
	if r := h.waitRecords(t, 2)[1]; r.Retries != 1 || r.Outcome != record.OK {
		t.Fatalf("record %s with %d retries, want ok with 1", r.Outcome, r.Retries)
	}
	if v := h.metric(t, `tokentap_upstream_retries_total{reason="nothing_written"}`); v != "1" {
		t.Errorf("retries{nothing_written} = %q, want 1", v)
	}
}

// TestEngineStallsAreTimeouts checks a stall before the response headers
// is recorded as the timeout it is, as the same stall mid-stream is (issue
// 13, item 9), and the client gets a 504 or a cut stream.
func TestEngineStallsAreTimeouts(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	for i, tt := range []struct{ name, fault string }{
		{"before headers", "header-delay=3s"},
		{"mid-stream", "stall=3s@3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 10, true, ""), fixtures.FaultHeader, tt.fault)
			if i == 0 {
				if err != nil || resp.StatusCode != 504 {
					t.Fatalf("%v %v, want a 504", resp, err)
				}
				wantOpenAIError(t, body, 504, "--idle-timeout")
			} else if err == nil {
				t.Fatalf("a stream cut by the idle timeout read cleanly: %s", body)
			}
			r := h.waitRecords(t, i+1)[i]
			if r.Outcome != record.Timeout || r.Blame != record.BlameEngine {
				t.Fatalf("record %s/%s (%s), want timeout/engine", r.Outcome, r.Blame, r.Error)
			}
		})
	}
}

// TestClientErrorsAreTheClients checks whose fault an engine's error
// status is in the record: a 4xx is the client's (a body that is not JSON,
// no such model), except 408 and 429; a 5xx is the engine's.
func TestClientErrorsAreTheClients(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		var code int
		fmt.Sscanf(r.Header.Get("X-Answer"), "%d", &code)
		writeJSON(c, code, `{"object":"error","message":"as asked","type":"BadRequestError","code":`+fmt.Sprint(code)+`}`)
		return true
	})
	h := startProxy(t, e.url, nil)
	codes := []int{400, 401, 404, 408, 422, 429, 500, 503}
	for _, code := range codes {
		resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m"`, "X-Answer", fmt.Sprint(code))
		if err != nil || resp.StatusCode != code {
			t.Fatalf("%d: %v %v", code, resp, err)
		}
	}
	for i, r := range h.waitRecords(t, len(codes)) {
		want := record.BlameEngine
		if c := codes[i]; c < 500 && c != 408 && c != 429 {
			want = record.BlameClient
		}
		if r.Outcome != record.HTTPError || r.Status != codes[i] || r.Blame != want {
			t.Errorf("HTTP %d: record %s/%s status %d, want http_error/%s", codes[i], r.Outcome, r.Blame, r.Status, want)
		}
	}
}

// TestNoContentTypeInvented checks a request without a Content-Type
// reaches the engine without one (fasthttp would add
// application/octet-stream, which FastAPI engines refuse to parse as JSON),
// and one with a Content-Type keeps it.
func TestNoContentTypeInvented(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	h := startProxy(t, e.url, nil)
	addr := strings.TrimPrefix(h.url, "http://")
	for _, ct := range []string{"", "application/json"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","ct":"` + ct + `"}`
		hdr := ""
		if ct != "" {
			hdr = "Content-Type: " + ct + "\r\n"
		}
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", hdr, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		c.Close()
	}
	reqs := e.requests()
	if len(reqs) != 2 {
		t.Fatalf("the engine read %d requests", len(reqs))
	}
	if got := reqs[0].Header.Values("Content-Type"); len(got) != 0 {
		t.Errorf("a request sent without a Content-Type reached the engine with %q", got)
	}
	if got := reqs[1].Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q, want application/json", got)
	}
}

// TestRequestTargets checks what the engine gets for each form of request
// target (issue 13, item 5): an absolute-form URL becomes its path and
// query (never a URL to somewhere else, never glued to the upstream's path
// prefix), CONNECT and other forms are refused without reaching it.
func TestRequestTargets(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	for _, tt := range []struct {
		name, method, target, prefix string
		status                       int
		want                         string // the engine's request line; "" when it must see nothing
	}{
		{"origin-form", "POST", "/v1/chat/completions", "", 200, "POST /v1/chat/completions HTTP/1.1"},
		{"absolute-form", "POST", "http://evil.example/v1/chat/completions", "", 200, "POST /v1/chat/completions HTTP/1.1"},
		{"absolute-form with prefix", "POST", "http://evil.example/v1/chat/completions?x=1", "/api", 200, "POST /api/v1/chat/completions?x=1 HTTP/1.1"},
		{"absolute-form, https, no path", "GET", "HTTPS://evil.example", "/api", 200, "GET /api/ HTTP/1.1"},
		{"absolute-form, query only", "GET", "http://evil.example?q=1", "", 200, "GET /?q=1 HTTP/1.1"},
		{"CONNECT", "CONNECT", "evil.example:443", "", 405, ""},
		{"asterisk-form", "OPTIONS", "*", "", 400, ""},
		{"no slash", "GET", "v1/models", "/api", 400, ""},
		{"other scheme", "GET", "ftp://evil.example/v1/models", "", 400, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startProxy(t, e.url+tt.prefix, nil)
			before := len(e.requests())
			c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 2\r\n\r\n{}", tt.method, tt.target)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: tt.method})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			reqs := e.requests()[before:]
			switch {
			case tt.want == "" && len(reqs) > 0:
				t.Fatalf("the engine got %q", reqs[0].Line)
			case tt.want == "":
				wantOpenAIError(t, body, tt.status)
			case len(reqs) != 1 || reqs[0].Line != tt.want:
				t.Fatalf("the engine got %v, want %q", reqs, tt.want)
			}
			if tt.want != "" && reqs[0].Header.Get("Host") == "evil.example" {
				t.Errorf("the engine got the client's Host header")
			}
		})
	}
}

// TestConnectionNamedHeaders checks headers a Connection header names are
// dropped both ways (RFC 9110 §7.6.1; issue 13, item 6), from every
// Connection header, while the rest pass.
func TestConnectionNamedHeaders(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		writeJSON(c, 200, `{}`, "Connection", "X-Hop-A", "Connection", "x-hop-b, keep-alive", "X-Hop-A", "secret-a", "X-Hop-B", "secret-b", "X-End", "kept")
		return true
	})
	h := startProxy(t, e.url, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: X-Req-A\r\nConnection: keep-alive, X-Req-B\r\nX-Req-A: 1\r\nX-Req-B: 2\r\nX-Req-C: 3\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Hop-A") != "" || resp.Header.Get("X-Hop-B") != "" || resp.Header.Get("X-End") != "kept" {
		t.Errorf("client got headers %v", resp.Header)
	}
	r := e.requests()[0]
	if r.Header.Get("X-Req-A") != "" || r.Header.Get("X-Req-B") != "" || r.Header.Get("X-Req-C") != "3" {
		t.Errorf("engine got headers %v", r.Header)
	}
}

// readUntilClosed reads c until the proxy closes it, and reports what it
// read and when the close came (zero: not within limit).
func readUntilClosed(c net.Conn, limit time.Duration) (string, time.Duration) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return string(b), 0
	}
	return string(b), time.Since(start)
}

// TestClientLimits checks the limits a proxy that clients reach over a
// network needs (issue 13, item 2): a client that does not finish its
// headers in time, a connection that never sends a byte, one idle after a
// request, and one over the per-address cap are each closed, with an
// OpenAI-style answer where an answer is due.
func TestClientLimits(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	const hdrTimeout, keepAlive = 400 * time.Millisecond, 600 * time.Millisecond
	h := startProxy(t, e.URL(), func(c *Config) {
		c.ReadHeaderTimeout, c.KeepAliveTimeout = hdrTimeout, keepAlive
	})
	addr := strings.TrimPrefix(h.url, "http://")
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// What each case tells apart is a connection closed at its timeout
	// (under a second) from one kept open (the slow client writes for 30 s,
	// the reads wait as long): a bound far above the timeouts, so a busy
	// machine's late timers cannot fail it.
	const slack, never = 10 * time.Second, 30 * time.Second
	t.Run("slowloris", func(t *testing.T) {
		c := dial(t)
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
		go func() { // a header line now and then, never the end
			for i := 0; i < int(never/(100*time.Millisecond)); i++ {
				time.Sleep(100 * time.Millisecond)
				if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
					return
				}
			}
		}()
		got, took := readUntilClosed(c, never)
		if took == 0 || took > hdrTimeout+slack {
			t.Fatalf("closed after %v, want about %v", took, hdrTimeout)
		}
		if !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, "--read-header-timeout") {
			t.Errorf("answer %q, want a 408 naming --read-header-timeout", got)
		}
	})
	t.Run("silent connection", func(t *testing.T) {
		_, took := readUntilClosed(dial(t), never)
		if took == 0 || took > hdrTimeout+slack {
			t.Fatalf("closed after %v, want about %v", took, hdrTimeout)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial(t)
		body := chatBody(e.Model().Name, 2, false, "")
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		start := time.Now()
		c.SetReadDeadline(start.Add(never))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("idle connection: %v, want the proxy to close it", err)
		}
		if took := time.Since(start); took < keepAlive/2 || took > keepAlive+slack {
			t.Fatalf("idle connection closed after %v, want %v", took, keepAlive)
		}
	})
	t.Run("connections per address", func(t *testing.T) {
		h := startProxy(t, e.URL(), func(c *Config) { c.MaxConnsPerIP = 3 })
		addr := strings.TrimPrefix(h.url, "http://")
		dial := func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		var open []net.Conn
		for range 3 {
			open = append(open, dial())
		}
		for deadline := time.Now().Add(5 * time.Second); h.metric(t, "tokentap_client_connections") != "3"; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s client connections open, want 3", h.metric(t, "tokentap_client_connections"))
			}
		}
		got, took := readUntilClosed(dial(), 5*time.Second)
		if took == 0 || !strings.HasPrefix(got, "HTTP/1.1 429") || !strings.Contains(got, "--max-conns-per-ip") {
			t.Fatalf("a 4th connection got %q (closed after %v), want a 429 naming --max-conns-per-ip", got, took)
		}
		open[0].Close()
		for deadline := time.Now().Add(5 * time.Second); h.metric(t, "tokentap_client_connections") != "2"; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s client connections open after one closed, want 2", h.metric(t, "tokentap_client_connections"))
			}
		}
		c := dial()
		body := chatBody(e.Model().Name, 2, false, "")
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("after one closed, a new connection got %v %v", resp, err)
		}
		if v := h.metric(t, `tokentap_client_rejected_total{reason="conns_per_ip"}`); v != "1" {
			t.Errorf("rejected{conns_per_ip} = %q, want 1", v)
		}
	})
}

// TestLargeHeaders checks headers up to 64 KiB pass both ways (a large JWT,
// an engine's long headers), and longer ones get clear errors: a 431 for
// the client's, a 502 and a record for the engine's (issue 13, item 7).
func TestLargeHeaders(t *testing.T) {
	big := func(n int) string { return strings.Repeat("j", n) }
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		var n int
		fmt.Sscanf(r.Header.Get("X-Answer-Header"), "%d", &n)
		writeJSON(c, 200, `{"got":`+fmt.Sprint(len(r.Header.Get("Authorization")))+`}`, "X-Big", big(n))
		return true
	})
	h := startProxy(t, e.url, nil)
	t.Run("64 KiB request header", func(t *testing.T) {
		resp, body, err := do(t, "POST", h.url+"/v1/embeddings", `{}`, "Authorization", "Bearer "+big(64<<10))
		if err != nil || resp.StatusCode != 200 || string(body) != fmt.Sprintf(`{"got":%d}`, 7+64<<10) {
			t.Fatalf("%v %v %s", resp, err, body)
		}
	})
	t.Run("64 KiB response header", func(t *testing.T) {
		resp, _, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m"}`, "X-Answer-Header", fmt.Sprint(64<<10))
		if err != nil || resp.StatusCode != 200 || len(resp.Header.Get("X-Big")) != 64<<10 {
			t.Fatalf("%v %v", resp, err)
		}
	})
	t.Run("request headers over the limit", func(t *testing.T) {
		resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", `{}`, "Authorization", "Bearer "+big(MaxHeaderBytes))
		if err != nil || resp.StatusCode != 431 {
			t.Fatalf("%v %v, want a 431", resp, err)
		}
		wantOpenAIError(t, body, 431, "KiB")
		// The refused chat request has its record too (the 64 KiB
		// response header's is the first).
		if r := h.waitRecords(t, 2)[1]; r.Status != 431 || r.Blame != record.BlameClient {
			t.Errorf("record of the refused request: %d %s", r.Status, r.Blame)
		}
	})
	t.Run("response headers over the limit", func(t *testing.T) {
		n := len(h.waitRecords(t, 2))
		resp, body, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m"}`, "X-Answer-Header", fmt.Sprint(80<<10))
		if err != nil || resp.StatusCode != 502 {
			t.Fatalf("%v %v, want a 502", resp, err)
		}
		wantOpenAIError(t, body, 502, "KiB")
		r := h.waitRecords(t, n+1)[n]
		if r.Outcome != record.Malformed || r.Blame != record.BlameEngine || !strings.Contains(r.Error, "KiB") {
			t.Fatalf("record %s/%s %q", r.Outcome, r.Blame, r.Error)
		}
	})
}

// TestBodyTooLarge checks a body over MaxBodySize gets a 413 in OpenAI's
// shape and, on a measured path, a record blamed on the client; the engine
// sees nothing of it (issue 13, item 8).
func TestBodyTooLarge(t *testing.T) {
	e := startScriptEngine(t, func(c net.Conn, r seenRequest) bool { writeJSON(c, 200, `{}`); return true })
	h := startProxy(t, e.url, func(c *Config) { c.MaxBodySize = 1024 })
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		// More than the socket buffers take: the client is still writing
		// when the proxy answers, and must still read the answer (the
		// proxy reads and drops up to lingerBytes before it closes).
		resp, body, err := do(t, "POST", h.url+path, strings.Repeat("x", lingerBytes/2))
		if err != nil || resp.StatusCode != 413 {
			t.Fatalf("%s: %v %v, want a 413", path, resp, err)
		}
		wantOpenAIError(t, body, 413, "--max-body-size")
	}
	if n := len(e.requests()); n != 0 {
		t.Fatalf("the engine read %d requests", n)
	}
	h.waitRecords(t, 1)
	time.Sleep(100 * time.Millisecond) // a second record would be here by now
	recs := h.waitRecords(t, 1)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1 (the measured path's)", len(recs))
	}
	if r := recs[0]; r.Outcome != record.HTTPError || r.Status != 413 || r.Blame != record.BlameClient || r.API != record.Chat {
		t.Fatalf("record %s/%s status %d api %s", r.Outcome, r.Blame, r.Status, r.API)
	}
	if v := h.metric(t, `tokentap_client_rejected_total{reason="body_too_large"}`); v != "2" {
		t.Errorf("rejected{body_too_large} = %q, want 2", v)
	}
}

// TestSecretsStayOut runs requests carrying a marker key in every header
// that holds one, through every path that writes something (a stream, a
// bad header line, headers and a body over the limits, an engine that
// echoes the key in its error, an engine that is down, a client too slow
// with its headers), with debug logs on, and looks for the marker in the
// logs, the capture, the records, /stats and /metrics (issue 13, item 3).
func TestSecretsStayOut(t *testing.T) {
	const marker = "sk-H13MARKER-9f2e61d0"
	var logs, capture strings.Builder
	var mu sync.Mutex
	out := &lockedWriter{w: &logs, mu: &mu}
	capOut := &lockedWriter{w: &capture, mu: &mu}
	keyHeaders := []string{"Authorization", "Bearer " + marker, "Api-Key", marker, "X-Api-Key", marker}
	mod := func(c *Config) {
		c.Logger = zerolog.New(out).Level(zerolog.DebugLevel)
		c.Capture = capOut
		c.MaxBodySize = 4096
		c.ReadHeaderTimeout = 300 * time.Millisecond
	}
	fake := fixtures.StartTest(t, fixtures.DefaultModel())
	echoing := startScriptEngine(t, func(c net.Conn, r seenRequest) bool {
		writeJSON(c, 401, `{"error":{"message":"Incorrect API key provided: `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`","code":401}}`)
		return true
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := "http://" + ln.Addr().String()
	ln.Close()

	hs := []*harness{startProxy(t, fake.URL(), mod), startProxy(t, echoing.url, mod), startProxy(t, down, mod)}
	model := fake.Model().Name
	for _, h := range hs {
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 5, true, ""), keyHeaders...)
		_, _, _ = do(t, "POST", h.url+"/v1/completions", `{"model":"`+model+`","prompt":"hi","max_tokens":3}`, keyHeaders...)
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", strings.Repeat("x", 8192), keyHeaders...)
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", `{}`, append(keyHeaders, "X-Big", strings.Repeat("b", MaxHeaderBytes))...)
		addr := strings.TrimPrefix(h.url, "http://")
		for _, raw := range []string{
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + marker + "\r\nBad Header Line\r\n\r\n",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + marker + "\r\nContent-Length: zz\r\n\r\n",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + marker + "\r\n", // never ends
			// A value fasthttp refuses and quotes in its error: a bare key
			// (no sk-, no marker redact knows) must not be in the 400.
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Api-Key: H13MARKERBARE77\x00\r\n\r\n",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nApi-Key: H13MARKERBARE77\x7f\r\n\r\n",
		} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, raw)
			if answer, _ := readUntilClosed(c, 3*time.Second); strings.Contains(answer, "H13MARKER") {
				t.Errorf("the client's answer to %q holds the key: %s", raw, answer)
			}
			c.Close()
		}
	}
	for _, h := range hs {
		for _, p := range []string{"/metrics", "/stats"} {
			_, body, _ := do(t, "GET", h.admin+p, "")
			if strings.Contains(string(body), "H13MARKER") {
				t.Errorf("the key is in %s: %s", p, body)
			}
		}
		h.mu.Lock()
		for _, r := range h.recs {
			if b, _ := json.Marshal(r); strings.Contains(string(b), "H13MARKER") {
				t.Errorf("the key is in a record: %s", b)
			}
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = h.p.Close(ctx)
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "H13MARKER") {
		t.Errorf("the key is in the logs:\n%s", logs.String())
	}
	if strings.Contains(capture.String(), "H13MARKER") {
		t.Errorf("the key is in the capture:\n%s", capture.String())
	}
	if !strings.Contains(capture.String(), `"status":401`) || !strings.Contains(logs.String(), `"level":"debug"`) {
		t.Fatalf("the run did not go through the echoing engine or log at debug:\n%s\n%s", capture.String(), logs.String())
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"no secret here", "no secret here"},
		{"Authorization: Bearer abc.def\r\nHost: x", "Authorization: [redacted]\r\nHost: x"},
		{`error "x-api-key: k1 k2" parsing`, `error "x-api-key: [redacted]" parsing`},
		{"key sk-proj-AbC_12.3 given", "key [redacted] given"},
		{"bearer tok and API-KEY: z\nnext", "bearer [redacted]\nnext"},
		{"authorization:", "authorization:"},
		{"cookie: a=b; c=d\r\n", "cookie: [redacted]\r\n"},
		{"task-queue and sk-short", "task-queue and sk-short"},
		{"(sk-abcdef123)", "([redacted])"},
	} {
		if got := redact(tt.in); got != tt.want {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{"Authorization: Bearer x", "sk-abc", "api-key: \r\n", "bearer ", "x-api-key:k"} {
		f.Add(s, "sk-secretvalue1")
	}
	f.Fuzz(func(t *testing.T, s, key string) {
		got := redact(s) // must not panic, whatever the bytes
		if again := redact(got); again != got {
			t.Fatalf("redact is not stable: %q -> %q -> %q", s, got, again)
		}
		// A key on an Authorization line never survives.
		if !strings.ContainsAny(key, "\r\n\"\\") && strings.TrimSpace(key) != "" {
			line := s + "\nAuthorization: Bearer " + key + "\n"
			if got := redact(line); !strings.HasSuffix(got, "\nAuthorization: [redacted]\n") {
				t.Fatalf("redact(%q) = %q kept the key", line, got)
			}
		}
	})
}

func FuzzOriginForm(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "http://h/v1?x=1", "HTTPS://h", "http://h?q", "*", "h:443", "http:/x", "://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, slash, ok := originForm([]byte(s))
		if !ok {
			return
		}
		full := string(got)
		if slash {
			full = "/" + full
		}
		if !strings.HasPrefix(full, "/") {
			t.Fatalf("originForm(%q) = %q, which does not start with /", s, full)
		}
		if !strings.HasPrefix(s, "/") && strings.Contains(full, "://") && !strings.Contains(s[strings.Index(s, "://")+3:], full) {
			t.Fatalf("originForm(%q) = %q is not its path", s, full)
		}
	})
}
