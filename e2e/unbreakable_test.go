//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tokentap/tokentap/record"
)

// The unbreakable suite (issue 22): one test per defect the outside audit
// of main 11e2b4d found, each against the built proxy in front of an engine
// scripted here on a raw socket. Each checks what the client got, that the
// proxy is still up, that the record is in the capture, and (through
// runFaults) that descriptors and goroutines come back to where they were.

// rawEngine is an engine on a raw socket: GET /v1/models answers 401 (the
// model list stays unknown, as behind vLLM's --api-key), everything else
// goes to script, or to an ordinary answer when script says it did not
// take it. Every request head it read is kept, byte for byte.
type rawEngine struct {
	url    string
	mu     sync.Mutex
	heads  []string
	script func(c net.Conn, br *bufio.Reader, req *engReq) (taken, keep bool)
}

// engReq is a request as the engine read it; body is nil when the script
// reads the body itself (bodyLeft is then what it has to read).
type engReq struct {
	head     string
	req      *http.Request
	body     []byte
	bodyLeft int64
}

func startRawEngine(t *testing.T, readBody bool, script func(c net.Conn, br *bufio.Reader, req *engReq) (taken, keep bool)) *rawEngine {
	e := &rawEngine{script: script}
	e.url = serveLoopback(t, func(c net.Conn) { e.serve(c, readBody) })
	return e
}

func (e *rawEngine) serve(c net.Conn, readBody bool) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 1<<16)
	for {
		var head bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" || line == "\n" {
				break
			}
		}
		e.mu.Lock()
		e.heads = append(e.heads, head.String())
		e.mu.Unlock()
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head.Bytes())))
		if err != nil {
			return
		}
		r := &engReq{head: head.String(), req: req, bodyLeft: req.ContentLength}
		if readBody || req.ContentLength < 0 {
			var body io.Reader = io.LimitReader(br, max(req.ContentLength, 0))
			if slicesContain(req.TransferEncoding, "chunked") {
				body = httputil.NewChunkedReader(br)
			}
			if r.body, err = io.ReadAll(body); err != nil {
				return
			}
			if slicesContain(req.TransferEncoding, "chunked") {
				// The trailer section's end.
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" || line == "\n" {
						break
					}
				}
			}
			r.bodyLeft = 0
		}
		if req.Method == "GET" && req.URL.Path == "/v1/models" {
			out := `{"error":{"message":"invalid api key","type":"invalid_request_error","code":401}}`
			fmt.Fprintf(c, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
			continue
		}
		if e.script != nil {
			if taken, keep := e.script(c, br, r); taken {
				if !keep {
					return
				}
				continue
			}
		}
		if r.bodyLeft > 0 {
			if _, err := io.CopyN(io.Discard, br, r.bodyLeft); err != nil {
				return
			}
		}
		if bytes.Contains(r.body, []byte(`"stream":true`)) {
			writeSSE(c, "text/event-stream", []string{chunkOf("hi"), chunkOf(" there"), usageChunk}, 0)
			continue
		}
		answerChat(c, "r")
	}
}

// saw says how many request heads the engine read that contain s.
func (e *rawEngine) saw(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return containing(e.heads, s)
}

func slicesContain(l []string, s string) bool {
	for _, v := range l {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func chunkOf(content string) string {
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"}}]}`
}

const usageChunk = `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`

// writeSSE writes events as a chunked SSE response (contentType "" sends
// no Content-Type), gap apart, then data: [DONE].
func writeSSE(c net.Conn, contentType string, events []string, gap time.Duration) error {
	h := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
	if contentType != "" {
		h += "Content-Type: " + contentType + "\r\n"
	}
	if _, err := io.WriteString(c, h+"\r\n"); err != nil {
		return err
	}
	for _, ev := range append(events, "[DONE]") {
		if gap > 0 {
			time.Sleep(gap)
		}
		d := "data: " + ev + "\n\n"
		if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(d), d); err != nil {
			return err
		}
	}
	_, err := io.WriteString(c, "0\r\n\r\n")
	return err
}

// alive fails the test unless the proxy answers /healthz with 200.
func (p *proxyProc) alive(t *testing.T) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/healthz")
	if err != nil {
		t.Fatalf("the proxy is gone: %v\n%s", err, tail(p.stderr.String(), 3000))
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz: %d, want 200", resp.StatusCode)
	}
}

// rawRoundTrip writes raw to the proxy and reads until it closes or
// within d; it returns what came and how long it took.
func rawRoundTrip(t *testing.T, addr, raw string, d time.Duration) (string, time.Duration) {
	t.Helper()
	c, start := sendRaw(t, addr, raw, d)
	defer c.Close()
	got, _ := io.ReadAll(c)
	return string(got), time.Since(start)
}

// firstLine writes raw to the proxy and returns the first line of its
// answer (whether or not the connection stays open after) and how long it
// took to come.
func firstLine(t *testing.T, addr, raw string, d time.Duration) (string, time.Duration) {
	t.Helper()
	c, start := sendRaw(t, addr, raw, d)
	defer c.Close()
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line, time.Since(start)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// pieces8 returns the 8-byte pieces of s found in out.
func pieces8(s, out string) []string {
	var found []string
	for i := 0; i+8 <= len(s); i++ {
		if strings.Contains(out, s[i:i+8]) {
			found = append(found, s[i:i+8])
		}
	}
	return found
}

var labelValue = regexp.MustCompile(`="((?:[^"\\]|\\.)*)"`)

// TestUnbreakableModelLabel: with the engine's model list unknown, a model
// name that is not UTF-8 (client_golang's label check panicked and took
// the process down) and 1 MB names (each a series of its own, /metrics
// 430 MB for good) are passed on, recorded and kept out of /metrics' way.
func TestUnbreakableModelLabel(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, true, nil)
	p := startProxyProc(t, eng.url, append(append([]string(nil), faultFlags...), "--max-body-size", "2M")...)
	runFaults(t, p, []faultClass{{"model names", func(t *testing.T, p *proxyProc) {
		names := []string{"bad-\xff\xfe-\xc3(-name"}
		for i := range 5 {
			names = append(names, strconv.Itoa(i)+strings.Repeat("m", 1<<20))
		}
		for i, name := range names {
			body := `{"model":"` + name + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
			code, got, err := post(t, p.url+"/v1/chat/completions", body)
			if err != nil || code != 200 || !strings.Contains(got, `"content":"ok"`) {
				t.Fatalf("name %d: %d %v %.200q: want the engine's answer\n%s", i, code, err, got, tail(p.stderr.String(), 3000))
			}
		}
		p.alive(t)
		for _, r := range p.next(t, len(names)) {
			if r.Status != 200 {
				t.Errorf("record status %d (%s), want 200", r.Status, r.Error)
			}
		}
		resp, err := http.Get("http://" + p.admin + "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d %.300s", resp.StatusCode, raw)
		}
		if len(raw) > 1<<20 {
			t.Errorf("/metrics is %d bytes after five 1 MB model names, want at most 1 MB", len(raw))
		}
		if !utf8.Valid(raw) {
			t.Errorf("/metrics is not valid UTF-8")
		}
		for _, m := range labelValue.FindAllSubmatch(raw, -1) {
			if len(m[1]) > 256 {
				t.Errorf("a label value of %d bytes in /metrics (%.60q…), want at most 256", len(m[1]), m[1])
				break
			}
		}
	}}})
}

// TestUnbreakableDescriptors: 600 connections against a proxy with 256
// descriptors. fasthttp's Serve returned on accept4's EMFILE and the proxy
// exited 1; it must back off and keep serving, and with --max-client-conns
// shed the connections over it with a counted 503.
func TestUnbreakableDescriptors(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, true, nil)
	// A header timeout longer than the hold: the idle connections stay.
	flags := []string{"--read-header-timeout", "10s", "--keep-alive-timeout", "3s", "--idle-timeout", "3s", "--log-level", "debug", "--log-json"}
	hold := func(t *testing.T, p *proxyProc) (shed int) {
		conns := make([]net.Conn, 0, 600)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 600 {
			c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
			if err != nil {
				// A full accept queue may refuse: not the proxy's end.
				continue
			}
			conns = append(conns, c)
		}
		if len(conns) < 300 {
			p.alive(t)
			t.Fatalf("only %d of 600 connections opened", len(conns))
		}
		deadline := time.Now().Add(2 * time.Second)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetReadDeadline(deadline)
				b, _ := io.ReadAll(c)
				if len(b) == 0 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				shed++
				s := string(b)
				if !strings.HasPrefix(s, "HTTP/1.1 503") {
					t.Errorf("a shed connection got %.200q, want a 503", s)
					return
				}
				if i := strings.Index(s, "\r\n\r\n"); i >= 0 {
					wantError(t, s[i+4:], 503)
				}
			}()
		}
		wg.Wait()
		p.alive(t)
		return shed
	}
	t.Run("no ceiling", func(t *testing.T) {
		t.Parallel()
		// One address, so no per-address cap: the descriptors run out.
		p := startProxyProcIn(t, withNofile(256), eng.url, append(flags, "--max-conns-per-ip", "-1")...)
		runFaults(t, p, []faultClass{{"600 connections held 2 s", func(t *testing.T, p *proxyProc) {
			hold(t, p)
			if code, body, err := post(t, p.url+"/v1/chat/completions", chat(2, "")); err != nil || code != 200 {
				t.Fatalf("after the burst: %d %v %.200s\n%s", code, err, body, tail(p.stderr.String(), 3000))
			}
			p.next(t, 1)
		}}})
	})
	t.Run("--max-client-conns 200", func(t *testing.T) {
		t.Parallel()
		p := startProxyProcIn(t, withNofile(256), eng.url, append(flags, "--max-client-conns", "200", "--max-conns-per-ip", "-1")...)
		runFaults(t, p, []faultClass{{"600 connections held 2 s", func(t *testing.T, p *proxyProc) {
			shed := hold(t, p)
			if shed == 0 {
				t.Errorf("no connection of 600 was shed at --max-client-conns 200")
			}
			if n := p.metrics(t)[`tokentap_client_rejected_total{reason="max_client_conns"}`]; n < 1 {
				t.Errorf(`tokentap_client_rejected_total{reason="max_client_conns"} is %v after %d shed`, n, shed)
			}
			if code, body, err := post(t, p.url+"/v1/chat/completions", chat(2, "")); err != nil || code != 200 {
				t.Fatalf("after the burst: %d %v %.200s", code, err, body)
			}
			p.next(t, 1)
		}}})
	})
}

// TestUnbreakableNoContentType: an engine answer without a Content-Type
// reaches the client without one (fasthttp's default text/plain was
// invented on the way), streamed or with a length.
func TestUnbreakableNoContentType(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, true, func(c net.Conn, _ *bufio.Reader, r *engReq) (bool, bool) {
		switch {
		case bytes.Contains(r.body, []byte("NOCT-STREAM")):
			return true, writeSSE(c, "", []string{chunkOf("a"), chunkOf("b"), usageChunk}, 0) == nil
		case bytes.Contains(r.body, []byte("NOCT-LENGTH")):
			out := `{"id":"r","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`
			_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
			return true, err == nil
		}
		return false, true
	})
	p := startProxyProc(t, eng.url, faultFlags...)
	runFaults(t, p, []faultClass{{"no Content-Type", func(t *testing.T, p *proxyProc) {
		for _, body := range []string{chat(2, "NOCT-STREAM"), `{"model":"fake-4b","messages":[{"role":"user","content":"NOCT-LENGTH"}]}`} {
			raw := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			got, _ := rawRoundTrip(t, p.addr(), raw, 10*time.Second)
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %.300q", err, got)
			}
			if ct, ok := resp.Header["Content-Type"]; ok {
				t.Errorf("the client got Content-Type %q; the engine sent none (%.40s)", ct, body)
			}
		}
		p.alive(t)
		for _, r := range p.next(t, 2) {
			if r.Status != 200 {
				t.Errorf("record status %d (%s), want 200", r.Status, r.Error)
			}
		}
	}}})
}

// TestUnbreakableMalformedEcho: an engine whose malformed answer quotes the
// request head put the keys into the 502 body and the logs (fasthttp's
// parse error quotes the raw bytes), and a key near character 240 of an
// engine's error body was cut before it was scrubbed.
func TestUnbreakableMalformedEcho(t *testing.T) {
	t.Parallel()
	longKey := marker + "-unbreakab1e"
	eng := startRawEngine(t, true, func(c net.Conn, _ *bufio.Reader, r *engReq) (bool, bool) {
		head := strings.TrimRight(r.head, "\r\n")
		lines := strings.Split(head, "\r\n")
		body := string(r.body)
		switch {
		case strings.Contains(body, "ECHO-STATUS"):
			// The request head as the status line's text, no colon anywhere.
			io.WriteString(c, "HTTP/1.1 2x0 "+strings.ReplaceAll(head, "\r\n", " ")+"\r\n\r\n")
			return true, false
		case strings.Contains(body, "ECHO-LINES"):
			// A valid status line, then the request's header lines without
			// their colons.
			out := "HTTP/1.1 200 OK\r\n"
			for _, l := range lines[1:] {
				out += strings.Replace(l, ":", "", 1) + "\r\n"
			}
			io.WriteString(c, out+"\r\n")
			return true, false
		case strings.Contains(body, "ECHO-GARBAGE"):
			io.WriteString(c, strings.ReplaceAll(head, "\r\n", "\x00\n")+"\r\n\r\n")
			return true, false
		case strings.Contains(body, "KEYAT-"):
			i := strings.Index(body, "KEYAT-")
			at, _ := strconv.Atoi(body[i+6 : i+9])
			prefix := `{"error":{"message":"`
			msg := prefix + strings.Repeat("x", at-len(prefix)) + longKey + ` is not a valid key","type":"invalid_request_error","code":400}}`
			fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
			return true, true
		}
		return false, true
	})
	p := startProxyProc(t, eng.url, faultFlags...)
	keys := []string{marker, longKey}
	leaks := func(t *testing.T, where, out string) {
		t.Helper()
		for _, k := range keys {
			if found := pieces8(k, out); len(found) > 0 {
				t.Errorf("the %s holds pieces of a key: %q", where, found)
				return
			}
		}
	}
	runFaults(t, p, []faultClass{
		{"a malformed answer that echoes the request head", func(t *testing.T, p *proxyProc) {
			for _, how := range []string{"ECHO-STATUS", "ECHO-LINES", "ECHO-GARBAGE"} {
				code, body, err := post(t, p.url+"/v1/chat/completions", chat(2, how))
				if err != nil || code != 502 {
					t.Errorf("%s: %d %v, want a 502", how, code, err)
				}
				leaks(t, how+" 502 body", body)
			}
			p.alive(t)
			for _, r := range p.next(t, 3) {
				wantRecord(t, r, record.Malformed, record.BlameEngine)
				leaks(t, "record", r.Error)
			}
			leaks(t, "debug log", p.stderr.String())
		}},
		{"a key near character 240 of an engine error body", func(t *testing.T, p *proxyProc) {
			n := 0
			for at := 200; at <= 244; at += 4 {
				code, body, err := post(t, p.url+"/v1/chat/completions",
					`{"model":"fake-4b","messages":[{"role":"user","content":"KEYAT-`+strconv.Itoa(at)+`"}]}`, "Authorization", "Bearer "+longKey)
				if err != nil || code != 400 || !strings.Contains(body, longKey) {
					t.Errorf("at %d: %d %v: want the engine's 400 as it sent it", at, code, err)
				}
				n++
			}
			p.alive(t)
			for _, r := range p.next(t, n) {
				b, _ := json.Marshal(r)
				leaks(t, "capture", string(b))
			}
		}},
	})
}

// TestUnbreakableShutdown: SIGTERM with a 2 s and an 8 s stream open and
// --shutdown-timeout 4s. Open streams were cut after a fixed 5 s, their
// records lost, and the exit status was 0.
func TestUnbreakableShutdown(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, true, func(c net.Conn, _ *bufio.Reader, r *engReq) (bool, bool) {
		for _, s := range []struct {
			mark string
			n    int
		}{{"LAST-2S", 20}, {"LAST-8S", 80}} {
			if bytes.Contains(r.body, []byte(s.mark)) {
				events := make([]string, 0, s.n+1)
				for i := range s.n {
					events = append(events, chunkOf("t"+strconv.Itoa(i)))
				}
				return true, writeSSE(c, "text/event-stream", append(events, usageChunk), 100*time.Millisecond) == nil
			}
		}
		return false, true
	})
	p := startProxyProc(t, eng.url, append(append([]string(nil), faultFlags...), "--idle-timeout", "10s", "--shutdown-timeout", "4s")...)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	p.waited = exited
	if code, _, err := post(t, p.url+"/v1/chat/completions", chat(2, "")); err != nil || code != 200 {
		t.Fatalf("warm-up: %d %v", code, err)
	}
	p.next(t, 1)

	type result struct {
		body string
		err  error
	}
	results := map[string]chan result{"LAST-2S": make(chan result, 1), "LAST-8S": make(chan result, 1)}
	started := make(chan struct{}, 2)
	for mark, out := range results {
		go func() {
			req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(chat(100, mark)))
			req.Header.Set("Authorization", "Bearer "+marker)
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				started <- struct{}{}
				out <- result{err: err}
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			started <- struct{}{}
			rest, err2 := io.ReadAll(br)
			out <- result{first + string(rest), errors.Join(err, err2)}
		}()
	}
	<-started
	<-started
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sawDrain := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !sawDrain; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + p.admin + "/healthz"); err == nil {
			resp.Body.Close()
			sawDrain = resp.StatusCode == 503
		}
	}
	if !sawDrain {
		t.Errorf("/healthz never answered 503 in the 2 s after SIGTERM (the drain)")
	}
	short := <-results["LAST-2S"]
	if short.err != nil || !strings.Contains(short.body, "t19") || !strings.HasSuffix(strings.TrimSpace(short.body), "data: [DONE]") {
		t.Errorf("the 2 s stream did not end whole (%v): %.300q", short.err, tail(short.body, 300))
	}
	long := <-results["LAST-8S"]
	cut := time.Since(sent)
	if long.err == nil && strings.Contains(long.body, "[DONE]") {
		t.Errorf("the 8 s stream ended whole; --shutdown-timeout 4s must cut it")
	}
	if cut < 3500*time.Millisecond || cut > 7*time.Second {
		t.Errorf("the 8 s stream ended %v after SIGTERM, want about 4 s (--shutdown-timeout)", cut)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the proxy did not exit within 15 s of SIGTERM")
	}
	p.stopped = true
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit after SIGTERM: %v, want status 130 (the README's interrupted)", err)
	}
	raw, _ := os.ReadFile(p.capture)
	recs, rerr := record.ReadAll(bytes.NewReader(raw))
	if rerr != nil || len(recs) != 3 {
		t.Fatalf("the capture holds %d records (%v), want 3: the warm-up and both streams\n%s", len(recs), rerr, raw)
	}
	var whole, shut int
	for _, r := range recs[1:] {
		switch {
		case r.Outcome == record.OK && r.Events() >= 20 && r.Events() < 80: // the engine's usage says 2 whatever it sent
			whole++
		case strings.Contains(strings.ToLower(r.Error), "shut"):
			shut++
		}
	}
	if whole != 1 || shut != 1 {
		t.Errorf("want one complete record and one cut with an error saying the proxy shut down:\n%s", raw)
	}
	if strings.Contains(string(raw)+p.stderr.String(), "E2EMARKER") {
		t.Errorf("the key is in the capture or the log")
	}
}

// stampRe finds the engine's write time in an event of the other stream.
var stampRe = regexp.MustCompile(`@(\d+)"`)

// TestUnbreakableBigEvent: one 15 MB SSE event with the usage chunk asked
// on the client's behalf. Removing that chunk copied the pending event on
// every read: seconds of CPU on the event loop every stream shares, gaps
// of 1.7 s in other streams, and the memory held for minutes. The other
// stream's events carry the time the engine wrote them, so what the proxy
// held them is told apart from a busy machine that makes the engine late
// too (a 2.1 s gap was seen at the client with the engine itself behind).
func TestUnbreakableBigEvent(t *testing.T) {
	t.Parallel()
	big := "data: " + chunkOf(strings.Repeat("z", 15<<20)) + "\n\n"
	eng := startRawEngine(t, true, func(c net.Conn, _ *bufio.Reader, r *engReq) (bool, bool) {
		switch {
		case bytes.Contains(r.body, []byte("BIG-EVENT")):
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for rest := big; rest != ""; {
				n := min(len(rest), 16<<10)
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", n, rest[:n]); err != nil {
					return true, false
				}
				rest = rest[n:]
			}
			for _, ev := range []string{usageChunk, "[DONE]"} {
				d := "data: " + ev + "\n\n"
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(d), d)
			}
			_, err := io.WriteString(c, "0\r\n\r\n")
			return true, err == nil
		case bytes.Contains(r.body, []byte("GAPS-20MS")):
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"); err != nil {
				return true, false
			}
			for i := range 301 {
				time.Sleep(20 * time.Millisecond)
				ev := usageChunk
				if i < 300 {
					ev = chunkOf("g" + strconv.Itoa(i) + "@" + strconv.FormatInt(time.Now().UnixNano(), 10))
				}
				d := "data: " + ev + "\n\n"
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(d), d); err != nil {
					return true, false
				}
			}
			d := "data: [DONE]\n\n"
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(d), d)
			_, err := io.WriteString(c, "0\r\n\r\n")
			return true, err == nil
		}
		return false, true
	})
	p := startProxyProc(t, eng.url, append(append([]string(nil), faultFlags...), "--max-body-size", "1M")...)
	runFaults(t, p, []faultClass{{"15 MB event beside a 20 ms stream", func(t *testing.T, p *proxyProc) {
		delaysOut := make(chan []time.Duration, 1)
		flowing := make(chan struct{})
		go func() {
			req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(chat(300, "GAPS-20MS")))
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				close(flowing)
				delaysOut <- nil
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			var delays []time.Duration // each stamped event: its arrival here − its write at the engine
			n := 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					break
				}
				if !strings.HasPrefix(line, "data:") {
					continue
				}
				now := time.Now()
				if n++; n == 10 {
					close(flowing)
				}
				if m := stampRe.FindStringSubmatch(line); m != nil {
					ns, _ := strconv.ParseInt(m[1], 10, 64)
					delays = append(delays, now.Sub(time.Unix(0, ns)))
				}
			}
			if n < 10 {
				close(flowing)
			}
			delaysOut <- delays
		}()
		<-flowing
		cpu0, wait0, self0 := cpuTime(p.cmd.Process.Pid), runQueueWait(p.cmd.Process.Pid), runQueueWait(os.Getpid())
		req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(chat(5, "BIG-EVENT")))
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i := bytes.Index(got, []byte("data: {")); err != nil || i < 0 || sha256.Sum256(got[i:min(i+len(big), len(got))]) != sha256.Sum256([]byte(big)) {
			t.Errorf("the 15 MB event did not reach the client byte for byte (%v; %d bytes came)", err, len(got))
		}
		if !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
			t.Errorf("the big stream's end: %.100q", tail(string(got), 100))
		}
		// The proxy's CPU for the event (the 20 ms stream's share is a
		// few ms): linear in its size, about 0.2 s; copying the pending
		// event on every read made it 1.9 s.
		cpu := cpuTime(p.cmd.Process.Pid) - cpu0
		delays := <-delaysOut
		waited := runQueueWait(p.cmd.Process.Pid) - wait0
		// The engine that stamps the events and the client that reads them
		// are this process's: their wait for a CPU delays the events too.
		waitedHere := runQueueWait(os.Getpid()) - self0
		var worst time.Duration
		late := 0
		for _, d := range delays {
			worst = max(worst, d)
			if d > 500*time.Millisecond {
				late++
			}
		}
		t.Logf("the other stream: %d events, the longest from the engine's write to the client %v, %d over 500 ms; the proxy's CPU for the event: %v, its threads' wait for a CPU meanwhile %v (the test process's: %v); RSS: %d MiB",
			len(delays), worst, late, cpu, waited, waitedHere, vmRSSMiB(p.cmd.Process.Pid))
		if cpu > time.Second {
			t.Errorf("the proxy spent %v of CPU passing one 15 MB event on, want under 1 s (linear)", cpu)
		}
		// A loop held by the big event holds every event of the other
		// stream meanwhile (1.7 s: some 85 of them); a process the machine
		// starves for a moment, one or two. A longer delay than the time
		// the proxy's threads and this process's (the engine's and the
		// client's) waited for a CPU (the kernel's run-queue delay,
		// /proc/PID/task/*/schedstat) is the proxy's own. (Issue 33's busy
		// run with more load beside it: 778 ms, the proxy's wait 250 ms.)
		if len(delays) < 250 || (late > 3 && worst > 500*time.Millisecond+waited+waitedHere) {
			t.Errorf("the other stream beside the 15 MB event: %d events of 300 came, %d over 500 ms after the engine wrote them (longest %v), want at most 3",
				len(delays), late, worst)
		}
		p.alive(t)
		p.next(t, 2)
		var rss int
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if rss = vmRSSMiB(p.cmd.Process.Pid); rss < 200 {
				return
			}
		}
		t.Errorf("the proxy holds %d MiB 10 s after the 15 MB event, want under 200", rss)
	}}})
}

// cpuTime reads a process's user and system CPU time from /proc.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// runQueueWait is how long a process's threads have waited, in all, on a
// run queue for a CPU (the second field of each /proc/PID/task/TID/schedstat,
// in ns; 0 where it cannot be read): what a busy machine withheld from it.
func runQueueWait(pid int) time.Duration {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var sum time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) >= 2 {
			ns, _ := strconv.ParseInt(fs[1], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// vmRSSMiB reads a process's resident memory from /proc (-1 when unread).
func vmRSSMiB(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb >> 10
		}
	}
	return -1
}

// TestUnbreakableEarlyAnswer: an engine that answers 413 or 401 before
// reading a large body, then closes. The proxy's write failed, it dropped
// the answer and sent a 502 "may have run it"; net/http reads the answer
// after a failed write and so must the proxy.
func TestUnbreakableEarlyAnswer(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, false, func(c net.Conn, br *bufio.Reader, r *engReq) (bool, bool) {
		if r.bodyLeft < 1<<20 {
			return false, true
		}
		status := 413
		if r.req.Header.Get("X-Want") == "401" {
			status = 401
		}
		msg := fmt.Sprintf(`{"error":{"message":"early %d from the engine","type":"invalid_request_error","code":%d}}`, status, status)
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			status, http.StatusText(status), len(msg), msg)
		// Close with the body unread: the proxy's write fails.
		return true, false
	})
	p := startProxyProc(t, eng.url, append(append([]string(nil), faultFlags...), "--max-body-size", "16M")...)
	runFaults(t, p, []faultClass{{"413 and 401 before the body was read", func(t *testing.T, p *proxyProc) {
		for _, status := range []int{413, 401} {
			body := chat(5, strings.Repeat("w", 8<<20))
			code, got, err := post(t, p.url+"/v1/chat/completions", body, "X-Want", strconv.Itoa(status))
			if err != nil || code != status || !strings.Contains(got, fmt.Sprintf("early %d from the engine", status)) {
				t.Errorf("%d %v %.200q, want the engine's %d and its body", code, err, got, status)
			}
		}
		p.alive(t)
		recs := p.next(t, 2)
		for i, status := range []int{413, 401} {
			if recs[i].Status != status {
				t.Errorf("record %d: status %d, outcome %s (%s), want %d", i, recs[i].Status, recs[i].Outcome, recs[i].Error, status)
			}
		}
	}}})
}

// TestUnbreakableLowItems: the low items, at the socket level.
func TestUnbreakableLowItems(t *testing.T) {
	t.Parallel()
	eng := startRawEngine(t, true, func(c net.Conn, _ *bufio.Reader, r *engReq) (bool, bool) {
		if bytes.Contains(r.body, []byte("HTTP10")) {
			return true, writeSSE(c, "text/event-stream", []string{chunkOf("a"), chunkOf("b"), usageChunk}, 0) == nil
		}
		return false, true
	})
	p := startProxyProc(t, eng.url, faultFlags...)
	refused := func(t *testing.T, mark, raw string, codes ...int) {
		t.Helper()
		got, took := firstLine(t, p.addr(), raw, 5*time.Second)
		ok := false
		for _, code := range codes {
			ok = ok || strings.HasPrefix(got, "HTTP/1.1 "+strconv.Itoa(code)+" ")
		}
		if !ok || took > 2*time.Second {
			t.Errorf("after %v: %.120q, want %v within 2 s", took.Round(time.Millisecond), got, codes)
		}
		if n := eng.saw(mark); n > 0 {
			t.Errorf("the engine got the request (%s)", mark)
		}
	}
	runFaults(t, p, []faultClass{
		{"HTTP/1.0 client: close-delimited, not chunked", func(t *testing.T, p *proxyProc) {
			body := chat(2, "HTTP10")
			got, _ := rawRoundTrip(t, p.addr(), fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body), 10*time.Second)
			head, rest, _ := strings.Cut(got, "\r\n\r\n")
			if strings.Contains(strings.ToLower(head), "transfer-encoding") {
				t.Errorf("an HTTP/1.0 client got a Transfer-Encoding:\n%s", head)
			}
			if !strings.HasPrefix(rest, "data: ") || !strings.HasSuffix(rest, "data: [DONE]\n\n") {
				t.Errorf("the body is not the engine's events as they are: %.300q", rest)
			}
			p.next(t, 1)
		}},
		{"bare LF gets a prompt 400", func(t *testing.T, p *proxyProc) {
			refused(t, "barelf=1", "GET /v1/models?barelf=1 HTTP/1.1\nHost: x\n\n", 400)
		}},
		{"a header name with a space is refused", func(t *testing.T, p *proxyProc) {
			refused(t, "spacename=1", "GET /v1/models?spacename=1 HTTP/1.1\r\nHost: x\r\nX-Bad Name: 1\r\n\r\n", 400)
		}},
		{"an HTTP/2.0 request line is refused", func(t *testing.T, p *proxyProc) {
			refused(t, "h2line=1", "GET /v1/models?h2line=1 HTTP/2.0\r\nHost: x\r\n\r\n", 400, 505)
		}},
		{"chunked trailer fields are refused", func(t *testing.T, p *proxyProc) {
			refused(t, "trailer=1", "POST /v1/embeddings?trailer=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
				"2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n", 400)
		}},
		{"Expect: 100-continue over --max-body-size gets 413, no 100", func(t *testing.T, p *proxyProc) {
			c, err := net.Dial("tcp", p.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "POST /v1/chat/completions?expect=1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 413 {
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				t.Errorf("the first answer: %d %v, want 413 (and no 100 Continue)", code, err)
			}
			if eng.saw("expect=1") > 0 {
				t.Errorf("the engine got the request")
			}
		}},
		{"measured requests ask for Accept-Encoding: identity", func(t *testing.T, p *proxyProc) {
			for i, ae := range []string{"", "gzip, br"} {
				hdr := []string{"X-Ae-Case", strconv.Itoa(i)}
				if ae != "" {
					hdr = append(hdr, "Accept-Encoding", ae)
				}
				if code, _, err := post(t, p.url+"/v1/chat/completions", chat(2, ""), hdr...); err != nil || code != 200 {
					t.Fatalf("%d %v", code, err)
				}
				eng.mu.Lock()
				var head string
				for _, h := range eng.heads {
					if strings.Contains(h, "X-Ae-Case: "+strconv.Itoa(i)) {
						head = h
					}
				}
				eng.mu.Unlock()
				req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
				if err != nil || req.Header.Values("Accept-Encoding") == nil || req.Header.Get("Accept-Encoding") != "identity" {
					t.Errorf("client Accept-Encoding %q: the engine got %q, want identity", ae, head)
				}
			}
			p.next(t, 2)
		}},
		{"POST /stats without X-Tokentap-Reset is refused", func(t *testing.T, p *proxyProc) {
			resp, err := http.Post("http://"+p.admin+"/stats", "text/plain", nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 {
				t.Errorf("POST /stats: %d %.200s, want 403", resp.StatusCode, b)
			}
			var st map[string]any
			if r, err := http.Get("http://" + p.admin + "/stats"); err == nil {
				_ = json.NewDecoder(r.Body).Decode(&st)
				r.Body.Close()
			}
			if len(st) == 0 {
				t.Errorf("GET /stats gave nothing after the POST")
			}
		}},
	})
}
