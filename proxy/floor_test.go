//go:build linux

package proxy

import (
	"bufio"
	"bytes"
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
//     Content-Length, or its chunks) and nothing else of it parsed; the
//     buffer an answer passes through is pooled, taken for its request.
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

func TestMain(m *testing.M) {
	if role := os.Getenv(floorEnv); role != "" {
		os.Exit(runFloor(role, os.Getenv(floorUpstreamEnv)))
	}
	os.Exit(m.Run())
}

// startFloor runs this test binary as the relay named role in front of
// upstream (host:port), on the proxy's CPU when the benchmark pins, and
// returns its URL and pid; it stops when the benchmark ends.
func (env *benchEnv) startFloor(b *testing.B, role, upstream string) benchPath {
	b.Helper()
	cmd := env.command(os.Args[0])
	cmd.Env = append(os.Environ(), floorEnv+"="+role, floorUpstreamEnv+"="+upstream)
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

var relayBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

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
		buf := relayBufs.Get().(*[]byte)
		err = relayBody(client, up.br, *buf, f)
		relayBufs.Put(buf)
		if err != nil || f.length < 0 && !f.chunked {
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
		}
	}
}

// relayBody passes a body on, each read written at once, to its end.
func relayBody(w io.Writer, br *bufio.Reader, buf []byte, f framing) error {
	switch {
	case f.length >= 0:
		_, err := io.CopyBuffer(w, io.LimitReader(br, int64(f.length)), buf)
		return err
	case !f.chunked:
		_, err := io.CopyBuffer(w, br, buf)
		return err
	}
	var c chunks
	for {
		n, err := br.Read(buf)
		if n > 0 {
			done := c.feed(buf[:n])
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if done {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// chunks follows a chunked body's framing to its last chunk and the empty
// line after its trailers.
type chunks struct {
	state int // in a size, in the rest of a size line, in data, after data, at a trailer line's start, in a trailer line
	left  int
}

func (c *chunks) feed(p []byte) (done bool) {
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
				return true
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
	return false
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
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			ctx.Request.CopyTo(req)
			err := hc.Do(req, resp)
			fasthttp.ReleaseRequest(req)
			if err != nil {
				fasthttp.ReleaseResponse(resp)
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			resp.Header.CopyTo(&ctx.Response.Header)
			ctx.Response.ImmediateHeaderFlush = true
			// fasthttp writes a body stream of unknown size chunk by chunk,
			// flushing each read, and closes it when done.
			ctx.Response.SetBodyStream(&relayed{resp}, -1)
		},
	}
	return srv.Serve(ln)
}
