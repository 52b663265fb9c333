package replay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// TestReadHead checks what readHead (net/http's parser) makes of the heads
// an engine may send, and that bytes past the head are kept for the body.
func TestReadHead(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want respHead
		body string // bytes past the head
		err  string // part of the error; "" for none
	}{
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", want: respHead{code: 200, chunked: true, length: -1}},
		{name: "length", in: "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", want: respHead{code: 200, length: 12}},
		{name: "until close", in: "HTTP/1.1 200 OK\r\n\r\n", want: respHead{code: 200, length: -1, close: true}},
		{name: "bare LF, no reason", in: "HTTP/1.1 500\ncontent-length: 3\n\n", want: respHead{code: 500, length: 3}},
		{name: "close", in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", want: respHead{code: 200, length: 0, close: true}},
		{name: "1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", want: respHead{code: 200, length: 2}},
		{name: "1.0 closes", in: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", want: respHead{code: 200, length: 2, close: true}},
		{name: "chunked wins", in: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n", want: respHead{code: 200, chunked: true, length: -1}},
		{name: "204 has no body", in: "HTTP/1.1 204 No Content\r\n\r\n", want: respHead{code: 204}},
		{name: "interims skipped", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", want: respHead{code: 200, length: 2}, body: "hi"},
		{name: "folded line", in: "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 1\r\n\r\n", want: respHead{code: 200, length: 1}},
		{name: "body follows", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", want: respHead{code: 200, chunked: true, length: -1}, body: "5\r\nhello\r\n"},
		{name: "cut", in: "HTTP/1.1 200 OK\r\nContent-Len", err: "unexpected EOF"},
		{name: "nothing", in: "", err: "EOF"},
		{name: "not http", in: "SSH-2.0-OpenSSH\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "http 2", in: "HTTP/2.0 200 OK\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "switching protocols", in: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", err: "switched protocols"},
		{name: "bad code", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "conflicting lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "gzip framing", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "no colon", in: "HTTP/1.1 200 OK\r\nbogus\r\n\r\n", err: "not an HTTP/1.x response"},
		{name: "huge head", in: "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", maxHead) + "\r\n\r\n", err: "response headers exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewConn(Target{BaseURL: "http://127.0.0.1:1"}, record.NewClock())
			server, client := net.Pipe()
			defer server.Close()
			go func() {
				io.WriteString(server, tt.in)
				server.Close()
			}()
			c.nc = client
			h, have, err := c.readHead()
			client.Close()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h != tt.want {
				t.Errorf("head %+v, want %+v", h, tt.want)
			}
			if got := string(c.buf[:have]); got != tt.body {
				t.Errorf("bytes past the head %q, want %q", got, tt.body)
			}
		})
	}
}

// decodeAll feeds in to a chunked decoder step bytes at a time, as reads
// would, and returns the data, whether the body ended and the bytes left
// after it.
func decodeAll(in []byte, step int) (out []byte, done bool, rest int, err error) {
	var d chunked
	buf := make([]byte, step)
	for i := 0; i < len(in); i += step {
		p := buf[:copy(buf, in[i:min(i+step, len(in))])]
		n, used, end, err := d.decode(p)
		out = append(out, p[:n]...)
		if err != nil {
			return out, false, 0, err
		}
		if end {
			return out, true, len(in) - i - used, nil
		}
	}
	return out, false, 0, nil
}

func TestChunkedRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"), 500)
	var enc bytes.Buffer
	w := httputil.NewChunkedWriter(&enc)
	for i := 0; i < len(payload); i += 37 * (1 + i%5) {
		w.Write(payload[i:min(i+37*(1+i%5), len(payload))])
	}
	w.Close()
	enc.WriteString("X-Trailer: 1\r\n\r\ntail")
	for _, step := range []int{1, 2, 3, 7, 64, 4096, enc.Len()} {
		out, done, rest, err := decodeAll(enc.Bytes(), step)
		if err != nil || !done || !bytes.Equal(out, payload) || rest != 4 {
			t.Fatalf("step %d: err %v, done %v, rest %d, %d of %d bytes equal %v", step, err, done, rest, len(out), len(payload), bytes.Equal(out, payload))
		}
	}
	for _, bad := range []string{"zz\r\n", "5\r\nhelloX\r\n", strings.Repeat("1", 5000), "10000000000000000\r\n"} {
		if _, _, _, err := decodeAll([]byte(bad), 3); err == nil {
			t.Errorf("%.20q: no error", bad)
		}
	}
}

// FuzzChunked checks the decoder cannot be crashed, that how the input is
// split into reads never changes what it decodes, and that what
// net/http's chunked writer encodes decodes back to itself.
func FuzzChunked(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), []byte("hello"), 3)
	f.Add([]byte("3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n"), []byte{}, 1)
	f.Add([]byte("fffffff\r\n"), []byte("data: [DONE]\n\n"), 7)
	f.Fuzz(func(t *testing.T, in, payload []byte, step int) {
		step = 1 + abs(step)%64
		whole, wDone, wRest, wErr := decodeAll(in, max(len(in), 1))
		split, sDone, sRest, sErr := decodeAll(in, step)
		if (wErr != nil) != (sErr != nil) || wDone != sDone || wRest != sRest {
			t.Fatalf("split %d changed the result: done %v/%v rest %d/%d err %v/%v", step, wDone, sDone, wRest, sRest, wErr, sErr)
		}
		if wErr == nil && !bytes.Equal(whole, split) {
			t.Fatalf("split %d changed the data", step)
		}
		if len(whole) > len(in) {
			t.Fatalf("decoded %d bytes from %d", len(whole), len(in))
		}
		var enc bytes.Buffer
		w := httputil.NewChunkedWriter(&enc)
		w.Write(payload)
		w.Close()
		enc.WriteString("\r\n")
		out, done, rest, err := decodeAll(enc.Bytes(), step)
		if err != nil || !done || rest != 0 || !bytes.Equal(out, payload) {
			t.Fatalf("round trip: err %v done %v rest %d equal %v", err, done, rest, bytes.Equal(out, payload))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// rawServer is an HTTP/1.1 server on 127.0.0.1 scripted byte by byte: for
// every request it reads, answer writes the response (conn is the
// connection's number from 1, req the request's number on it from 1) and
// says whether to close the connection after it.
type rawServer struct {
	ln       net.Listener
	conns    atomic.Int64
	requests atomic.Int64
	wg       sync.WaitGroup
}

func startRaw(t *testing.T, answer func(w io.Writer, conn, req int) (closeAfter bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			cn := int(s.conns.Add(1))
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer nc.Close()
				br := bufio.NewReader(nc)
				for req := 1; ; req++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					s.requests.Add(1)
					bw := &rawWriter{Writer: bufio.NewWriter(nc), nc: nc}
					closeAfter := answer(bw, cn, req)
					bw.Flush()
					if closeAfter {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// rawWriter is what a rawServer's answer writes to: buffered (Flush sends),
// with the connection at hand for socket options.
type rawWriter struct {
	*bufio.Writer
	nc net.Conn
}

func (s *rawServer) URL() string { return "http://" + s.ln.Addr().String() }

// sse is a chat stream of n one-token events and [DONE], chunked.
func sse(w io.Writer, n int) {
	io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	cw := httputil.NewChunkedWriter(w)
	for i := 0; i < n; i++ {
		fmt.Fprintf(cw, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	}
	io.WriteString(cw, "data: [DONE]\n\n")
	cw.Close()
	io.WriteString(w, "\r\n")
}

// TestConnHTTP drives the HTTP/1.1 client through the framings and
// connection lifecycles an engine may use.
func TestConnHTTP(t *testing.T) {
	big := strings.Repeat("x", 16<<20-1024) // the tap's event limit is 16 MiB
	tests := []struct {
		name     string
		stream   bool
		answer   func(w io.Writer, conn, req int) bool
		outcome  [2]record.Outcome // of two requests in a row on one Conn
		conns    int64             // connections the server saw
		requests int64             // requests the server saw
		errHas   string
	}{
		{
			name:    "keep-alive chunked",
			stream:  true,
			answer:  func(w io.Writer, _, _ int) bool { sse(w, 5); return false },
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 1, requests: 2,
		},
		{
			name: "content-length json",
			answer: func(w io.Writer, _, _ int) bool {
				b := `{"id":"r","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
				return false
			},
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 1, requests: 2,
		},
		{
			name: "body until close",
			answer: func(w io.Writer, _, _ int) bool {
				io.WriteString(w, "HTTP/1.0 200 OK\r\n\r\n{\"id\":\"r\",\"choices\":[]}")
				return true
			},
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 2, requests: 2,
		},
		{
			name:   "interim 100 first",
			stream: true,
			answer: func(w io.Writer, _, _ int) bool {
				io.WriteString(w, "HTTP/1.1 100 Continue\r\n\r\n")
				sse(w, 3)
				return false
			},
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 1, requests: 2,
		},
		{
			// The server closes a kept-alive connection after its first
			// answer: the second request meets the close having got no
			// byte, and is sent once more on a fresh connection.
			name:    "server closes keep-alive",
			stream:  true,
			answer:  func(w io.Writer, _, _ int) bool { sse(w, 2); return true },
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 2, requests: 2,
		},
		{
			// Once a byte of the answer arrived, a request is not sent again.
			name:   "cut after the status line",
			stream: true,
			answer: func(w io.Writer, _, req int) bool {
				if req == 1 {
					sse(w, 2)
					return false
				}
				io.WriteString(w, "HTTP/1.1 200 OK\r\n")
				return true
			},
			outcome: [2]record.Outcome{record.OK, record.Connect}, conns: 1, requests: 2, errHas: "middle of the response head",
		},
		{
			name:   "cut mid-body",
			stream: true,
			answer: func(w io.Writer, _, req int) bool {
				if req == 1 {
					sse(w, 2)
					return false
				}
				io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\ndata: ")
				return true
			},
			outcome: [2]record.Outcome{record.OK, record.Broken}, conns: 1, requests: 2, errHas: "unexpected EOF",
		},
		{
			name: "not http",
			answer: func(w io.Writer, _, _ int) bool {
				io.WriteString(w, "SSH-2.0-OpenSSH_9.6\r\n")
				return true
			},
			outcome: [2]record.Outcome{record.Connect, record.Connect}, conns: 2, requests: 2, errHas: "not an HTTP/1.x response",
		},
		{
			name: "http error keeps its body",
			answer: func(w io.Writer, _, _ int) bool {
				io.WriteString(w, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 14\r\n\r\nengine is busy")
				return false
			},
			outcome: [2]record.Outcome{record.HTTPError, record.HTTPError}, conns: 1, requests: 2, errHas: "engine is busy",
		},
		{
			// No line or buffer limit: a 16 MiB event passes.
			name:   "16 MiB event",
			stream: true,
			answer: func(w io.Writer, _, _ int) bool {
				io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				cw := httputil.NewChunkedWriter(w)
				io.WriteString(cw, `data: {"id":"r","choices":[{"index":0,"delta":{"content":"`+big+`"}}]}`+"\n\ndata: [DONE]\n\n")
				cw.Close()
				io.WriteString(w, "\r\n")
				return false
			},
			outcome: [2]record.Outcome{record.OK, record.OK}, conns: 1, requests: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startRaw(t, tt.answer)
			tg := Target{BaseURL: srv.URL(), Model: "test"}
			c := NewConn(tg, record.NewClock())
			defer c.Close()
			for i, want := range tt.outcome {
				rec := record.Record{ID: "x", MaxTokens: 5, Stream: tt.stream}
				c.Do(context.Background(), body(t, tg, "hi", 5), &rec)
				if rec.Outcome != want {
					t.Fatalf("request %d: outcome %q (%s), want %q", i+1, rec.Outcome, rec.Error, want)
				}
				if want.Failed() && !strings.Contains(rec.Error, tt.errHas) {
					t.Errorf("request %d: error %q does not say %q", i+1, rec.Error, tt.errHas)
				}
				if want == record.OK && tt.stream && rec.ArrivedTokens() == 0 {
					t.Errorf("request %d: no tokens arrived", i+1)
				}
				if rec.End < rec.Sent {
					t.Errorf("request %d: end %v before sent %v", i+1, rec.End, rec.Sent)
				}
			}
			c.Close()
			srv.ln.Close()
			srv.wg.Wait()
			if srv.conns.Load() != tt.conns || srv.requests.Load() != tt.requests {
				t.Errorf("server saw %d connections and %d requests, want %d and %d", srv.conns.Load(), srv.requests.Load(), tt.conns, tt.requests)
			}
		})
	}
}

// TestConnCancelHead checks a cancellation unblocks a request still waiting
// for its response head.
func TestConnCancelHead(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := startRaw(t, func(w io.Writer, _, _ int) bool { <-release; return true })
	tg := Target{BaseURL: srv.URL(), Model: "test"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	rec := record.Record{ID: "x", MaxTokens: 5, Stream: true}
	c.Do(ctx, body(t, tg, "hi", 5), &rec)
	if rec.Outcome != record.Cancelled {
		t.Fatalf("outcome %q (%s), want cancelled", rec.Outcome, rec.Error)
	}
}

// TestConnTLS sends a request over https (http/1.1 by ALPN).
func TestConnTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "want HTTP/1.1 with the key, got "+r.Proto, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t\"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tg := Target{BaseURL: srv.URL, Model: "test", APIKey: "k"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c.tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	for i := 0; i < 2; i++ {
		rec := record.Record{ID: "x", MaxTokens: 3, Stream: true}
		c.Do(context.Background(), body(t, tg, "hi", 3), &rec)
		if rec.Outcome != record.OK || rec.ArrivedTokens() != 3 {
			t.Fatalf("request %d: outcome %q (%s), %d tokens", i+1, rec.Outcome, rec.Error, rec.ArrivedTokens())
		}
	}
}

// promptly bounds how late a test accepts an event or a close to be seen:
// scheduling on a busy machine, not a design limit. The faults these tests
// catch (a lost readiness edge, a missed close) hold a read until the idle
// timeout (2 s and more); a loaded 2-core machine held the test's own
// writer 70 ms past a 15 ms pause (TestConnEdgeReads, when this was 50 ms).
const promptly = raceSlowdown * 500 * time.Millisecond

// TestConnEdgeReads checks the body's edge-triggered reads: events written
// with pauses between them are each read when they come (a lost readiness
// edge would hold one until the idle timeout), and a close that arrives
// right behind the last bytes is noticed at once.
func TestConnEdgeReads(t *testing.T) {
	const gap = 15 * time.Millisecond
	srv := startRaw(t, func(w io.Writer, _, req int) bool {
		bw := w.(*rawWriter)
		io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		bw.Flush()
		cw := httputil.NewChunkedWriter(bw)
		for i := 0; i < 8; i++ {
			time.Sleep(gap)
			fmt.Fprintf(cw, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			bw.Flush()
		}
		if req == 2 {
			return true // cut: no [DONE], no last chunk, the close right behind the data
		}
		io.WriteString(cw, "data: [DONE]\n\n")
		cw.Close()
		io.WriteString(bw, "\r\n")
		return false
	})
	// The idle timeout is far from the 15 ms pacing: a loaded machine
	// held the writer past 2 s once (a request cut at 7 of 8 events), and
	// a lost edge still shows as an event or an end seen later than
	// promptly, or as a read held to the timeout.
	tg := Target{BaseURL: srv.URL(), Model: "test", IdleTimeout: 30 * time.Second}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	for i, want := range []record.Outcome{record.OK, record.Broken} {
		rec := record.Record{ID: "x", MaxTokens: 8, Stream: true}
		c.Do(context.Background(), body(t, tg, "hi", 8), &rec)
		if rec.Outcome != want || len(rec.Arrivals) != 8 {
			t.Fatalf("request %d: outcome %q (%s) with %d events, want %q with 8", i+1, rec.Outcome, rec.Error, len(rec.Arrivals), want)
		}
		for j := 1; j < len(rec.Arrivals); j++ {
			if d := rec.Arrivals[j] - rec.Arrivals[j-1]; d > gap+promptly {
				t.Errorf("request %d: event %d came %v after the one before, written %v after it", i+1, j, d, gap)
			}
		}
		if last := rec.Arrivals[len(rec.Arrivals)-1]; rec.End-last > promptly {
			t.Errorf("request %d: the end was seen %v after the last event", i+1, rec.End-last)
		}
	}
}

// TestConnRefusesHeaderInjection checks an API key cannot add header lines.
func TestConnRefusesHeaderInjection(t *testing.T) {
	srv := startRaw(t, func(w io.Writer, _, _ int) bool { sse(w, 1); return false })
	tg := Target{BaseURL: srv.URL(), Model: "test", APIKey: "k\r\nX-Injected: 1"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	rec := record.Record{ID: "x", MaxTokens: 1, Stream: true}
	c.Do(context.Background(), body(t, tg, "hi", 1), &rec)
	if !rec.Outcome.Failed() || !strings.Contains(rec.Error, "line break") || strings.Contains(rec.Error, "k\r\n") {
		t.Fatalf("outcome %q, error %q; want a failure naming the line break, without the key", rec.Outcome, rec.Error)
	}
	if srv.requests.Load() != 0 {
		t.Fatalf("the server got %d requests", srv.requests.Load())
	}
}

// TestConnKeepAliveSlowStream checks a kept-alive connection carries a
// slow stream and then a request whose head is slow (a prefill): nothing
// of the first request's reading (a wait, a deadline) cuts the second
// short, and the second is not sent twice.
func TestConnKeepAliveSlowStream(t *testing.T) {
	srv := startRaw(t, func(w io.Writer, _, req int) bool {
		bw := w.(*rawWriter)
		if req == 2 {
			time.Sleep(400 * time.Millisecond)
		}
		io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		bw.Flush()
		cw := httputil.NewChunkedWriter(bw)
		for i := 0; i < 3; i++ {
			if req == 1 {
				time.Sleep(250 * time.Millisecond)
			}
			fmt.Fprintf(cw, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			bw.Flush()
		}
		io.WriteString(cw, "data: [DONE]\n\n")
		cw.Close()
		io.WriteString(bw, "\r\n")
		return false
	})
	tg := Target{BaseURL: srv.URL(), Model: "test"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	for i := 0; i < 2; i++ {
		rec := record.Record{ID: "x", MaxTokens: 3, Stream: true}
		c.Do(context.Background(), body(t, tg, "hi", 3), &rec)
		if rec.Outcome != record.OK || len(rec.Arrivals) != 3 {
			t.Fatalf("request %d: outcome %q (%s), %d events", i+1, rec.Outcome, rec.Error, len(rec.Arrivals))
		}
	}
	c.Close()
	srv.ln.Close()
	srv.wg.Wait()
	if srv.conns.Load() != 1 || srv.requests.Load() != 2 {
		t.Fatalf("server saw %d connections and %d requests, want 1 and 2", srv.conns.Load(), srv.requests.Load())
	}
}

// TestConnCancelMidBody checks a cancellation in the middle of a body read
// in edge mode ends Do at once, as cancelled, and drops the connection.
func TestConnCancelMidBody(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := startRaw(t, func(w io.Writer, _, _ int) bool {
		bw := w.(*rawWriter)
		io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		cw := httputil.NewChunkedWriter(bw)
		fmt.Fprintf(cw, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t\"}}]}\n\n")
		bw.Flush()
		<-release
		return true
	})
	// The engine sends nothing more until the test ends: a Do that did
	// not heed the cancellation would wait out the idle timeout (30 s),
	// far from the 10 s bound below a busy machine cannot reach.
	tg := Target{BaseURL: srv.URL(), Model: "test", IdleTimeout: 30 * time.Second}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	const after = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), after)
	defer cancel()
	rec := record.Record{ID: "x", MaxTokens: 5, Stream: true}
	start := time.Now()
	c.Do(ctx, body(t, tg, "hi", 5), &rec)
	if took := time.Since(start); took > after+10*time.Second {
		t.Errorf("Do returned %v after its start, the cancellation came at %v", took, after)
	}
	if rec.Outcome != record.Cancelled || len(rec.Arrivals) != 1 {
		t.Fatalf("outcome %q (%s), %d events; want cancelled with 1", rec.Outcome, rec.Error, len(rec.Arrivals))
	}
	if c.nc != nil {
		t.Fatal("the cancelled connection was kept")
	}
}
