//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

// The floors BenchmarkPassThrough holds tokentap against, beside nginx:
// two relays that do the least a Go proxy
// does for a request, each a child process on the proxy's CPU, started
// from this test binary (TestMain) so that the benchmark needs nothing
// built beforehand. Neither measures anything, checks anything or keeps a
// record; both pass on every byte at once.
//
//   - go-relay: the standard library's net package, a goroutine for each
//     client connection; a request's bytes go to an idle engine connection
//     and the answer's come back as they are read, framing followed (its
//     Content-Length, or its chunks, and Connection: close) and nothing else
//     of it parsed, written from the connection's read buffer.
//   - fasthttp-relay: fasthttp's Server and HostClient, as a plain fasthttp
//     reverse proxy streams (the answer's body flushed after every read):
//     what the HTTP package of tokentap's design costs by itself.
//
// What tokentap spends over fasthttp-relay is its own (the measuring, the
// event loop's handoffs, the checks at its edges); what go-relay spends
// over nginx is Go's (its scheduler and netpoller wake a goroutine where
// nginx's one thread goes on), which no design of a Go proxy's request
// path removes.
const (
	floorEnv         = "TOKENTAP_BENCH_FLOOR"
	floorUpstreamEnv = "TOKENTAP_BENCH_FLOOR_UPSTREAM"
)

var floorRelays = []string{"go-relay", "fasthttp-relay"}

// floorArg is the argument startFloor gives a relay: the variables alone,
// left exported in a shell, do not turn `go test` into a relay.
const floorArg = "tokentap-bench-floor"

func TestMain(m *testing.M) {
	if role := os.Getenv(floorEnv); role != "" && os.Args[len(os.Args)-1] == floorArg {
		os.Exit(runFloor(role, os.Getenv(floorUpstreamEnv)))
	}
	os.Exit(m.Run())
}

// startFloor runs this test binary as the relay named role in front of
// upstream (host:port), on the proxy's CPU when the benchmark pins, and
// returns its URL and pid; it stops when the benchmark ends.
func (env *benchEnv) startFloor(b *testing.B, role, upstream string) benchPath {
	b.Helper()
	cmd := env.command(os.Args[0], floorArg)
	cmd.Env = append(os.Environ(), floorEnv+"="+role, floorUpstreamEnv+"="+upstream)
	if v := os.Getenv("TOKENTAP_BENCH_PROXY_GOMAXPROCS"); v != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+v) // as tokentap's
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", role, err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("%s did not print its URL: %v", role, err)
	}
	return benchPath{role, strings.TrimSpace(line), []int{cmd.Process.Pid}}
}

// runFloor serves the relay named role until it is killed; it returns the
// exit code.
func runFloor(role, upstream string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	fmt.Println("http://" + ln.Addr().String())
	switch role {
	case "go-relay":
		r := &goRelay{upstream: upstream}
		for {
			c, err := ln.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, role+":", err)
				return 1
			}
			go r.serve(c)
		}
	case "fasthttp-relay":
		if err := fastRelay(ln, upstream); err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s=%q: no such relay (%s)\n", floorEnv, role, strings.Join(floorRelays, ", "))
	return 2
}

// goRelay keeps idle engine connections in a stack, as nginx's keepalive
// does.
type goRelay struct {
	upstream string
	mu       sync.Mutex
	idle     []*relayConn
}

type relayConn struct {
	net.Conn
	br *bufio.Reader
}

func (r *goRelay) get() (*relayConn, error) {
	r.mu.Lock()
	if n := len(r.idle); n > 0 {
		c := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return c, nil
	}
	r.mu.Unlock()
	c, err := net.Dial("tcp", r.upstream)
	if err != nil {
		return nil, err
	}
	return &relayConn{c, bufio.NewReaderSize(c, 4<<10)}, nil
}

func (r *goRelay) put(c *relayConn) {
	r.mu.Lock()
	r.idle = append(r.idle, c)
	r.mu.Unlock()
}

// serve relays the requests of one client connection, one after another.
func (r *goRelay) serve(client net.Conn) {
	defer client.Close()
	br := bufio.NewReaderSize(client, 4<<10)
	var head []byte
	for {
		var f framing
		var err error
		if head, f, err = readFramedHead(br, head[:0]); err != nil || f.chunked {
			return // the benchmark's requests have a Content-Length
		}
		if f.length > 0 {
			n := len(head)
			head = slices.Grow(head, f.length)[:n+f.length]
			if _, err := io.ReadFull(br, head[n:]); err != nil {
				return
			}
		}
		up, err := r.get()
		if err != nil {
			return
		}
		if _, err := up.Write(head); err != nil {
			up.Close()
			return
		}
		if head, f, err = readFramedHead(up.br, head[:0]); err != nil {
			up.Close()
			return
		}
		if _, err := client.Write(head); err != nil {
			up.Close()
			return
		}
		if err := relayBody(client, up.br, f); err != nil || f.close || f.length < 0 && !f.chunked {
			up.Close()
			return
		}
		r.put(up)
	}
}

// framing is how a message's body ends: at its Content-Length, at its
// last chunk, or (an answer with neither) with the connection.
type framing struct {
	length  int  // Content-Length; -1 when none
	chunked bool // Transfer-Encoding: chunked
	close   bool // Connection: close
}

// readFramedHead appends a head, to its empty line, to dst and reads its
// framing.
func readFramedHead(br *bufio.Reader, dst []byte) ([]byte, framing, error) {
	f := framing{length: -1}
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return dst, f, err
		}
		dst = append(dst, line...)
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return dst, f, nil
		}
		if first {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if f.length, err = strconv.Atoi(string(value)); err != nil {
				return dst, f, err
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			f.chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			f.close = bytes.EqualFold(value, []byte("close"))
		}
	}
}

// relayBody passes a body on, each read written at once, to its end: what
// a read brought is written from the reader's own buffer (no buffer of the
// relay's own waits with the stream).
func relayBody(w io.Writer, br *bufio.Reader, f framing) error {
	var c chunks
	left := f.length
	for left != 0 {
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF && f.length < 0 && !f.chunked {
				return nil // a body the connection's close ends
			}
			return err
		}
		p, _ := br.Peek(br.Buffered())
		done := false
		switch {
		case f.length >= 0:
			p = p[:min(len(p), left)]
			left -= len(p)
		case f.chunked:
			end, err := c.feed(p)
			if err != nil {
				return err
			}
			if end >= 0 {
				p, done = p[:end], true
			}
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		_, _ = br.Discard(len(p))
		if done {
			return nil
		}
	}
	return nil
}

// chunks follows a chunked body's framing to its last chunk and the empty
// line after its trailers.
type chunks struct {
	state int // in a size, in the rest of a size line, in data, after data, at a trailer line's start, in a trailer line
	left  int
}

var errChunkSize = errors.New("go-relay: a chunk size beyond 2^40")

// feed follows p; end is where the body ended in p (-1: not in p).
func (c *chunks) feed(p []byte) (end int, err error) {
	const (
		size = iota
		sizeLine
		data
		afterData
		trailerStart
		trailer
	)
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch c.state {
		case size:
			if isHex(b) {
				if c.left > 1<<40 {
					return -1, errChunkSize
				}
				c.left = c.left<<4 | hexValue(b)
				continue
			}
			c.state = sizeLine
			fallthrough
		case sizeLine:
			if b == '\n' {
				c.state = data
				if c.left == 0 {
					c.state = trailerStart
				}
			}
		case data:
			k := min(c.left, len(p)-i)
			c.left -= k
			i += k - 1
			if c.left == 0 {
				c.state = afterData
			}
		case afterData:
			if b == '\n' {
				c.state = size
			}
		case trailerStart:
			switch b {
			case '\n':
				return i + 1, nil
			case '\r':
			default:
				c.state = trailer
			}
		case trailer:
			if b == '\n' {
				c.state = trailerStart
			}
		}
	}
	return -1, nil
}

// relayed is the engine's answer's body, passed on as fasthttp reads it;
// closing it gives the answer, and its connection, back.
type relayed struct{ resp *fasthttp.Response }

func (r *relayed) Read(p []byte) (int, error) { return r.resp.BodyStream().Read(p) }

func (r *relayed) Close() error {
	fasthttp.ReleaseResponse(r.resp)
	return nil
}

// fastRelay serves ln as a plain fasthttp streaming reverse proxy to
// upstream.
func fastRelay(ln net.Listener, upstream string) error {
	hc := &fasthttp.HostClient{Addr: upstream, StreamResponseBody: true, MaxConns: 1 << 20}
	srv := &fasthttp.Server{
		ReduceMemoryUsage: true, // as tokentap's server
		Handler: func(ctx *fasthttp.RequestCtx) {
			resp := fasthttp.AcquireResponse()
			if err := hc.Do(&ctx.Request, resp); err != nil {
				fasthttp.ReleaseResponse(resp)
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			resp.Header.CopyTo(&ctx.Response.Header)
			if resp.BodyStream() == nil { // HEAD, 204, 304: no body
				fasthttp.ReleaseResponse(resp)
				return
			}
			ctx.Response.ImmediateHeaderFlush = true
			// fasthttp writes a body stream of unknown size chunk by chunk,
			// flushing each read, and closes it when done.
			ctx.Response.SetBodyStream(&relayed{resp}, -1)
		},
	}
	return srv.Serve(ln)
}

// TestFloorChunks: go-relay finds a chunked body's end however its bytes
// are cut, with sizes in either case, extensions and trailers, and not
// before it.
func TestFloorChunks(t *testing.T) {
	for _, body := range []string{
		"0\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\n",
		"A;ext=1\r\n0123456789\r\na\r\n0123456789\r\n000\r\n\r\n",
		"3\r\nabc\r\n0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n",
		"2\n0\r\n\n0\n\n",
	} {
		for cut := range len(body) + 1 {
			var c chunks
			at := -1
			for off, part := range []string{body[:cut], body[cut:]} {
				if at >= 0 {
					break
				}
				end, err := c.feed([]byte(part))
				if err != nil {
					t.Fatalf("%q cut at %d: %v", body, cut, err)
				}
				if end >= 0 {
					at = end + off*cut
				}
			}
			if at != len(body) {
				t.Errorf("%q cut at %d: end found at %d, want %d", body, cut, at, len(body))
			}
		}
	}
	var c chunks
	if _, err := c.feed([]byte("fffffffffffffffffff\r\n")); err == nil {
		t.Error("a chunk size past 2^40 was taken")
	}
}
