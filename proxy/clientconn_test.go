package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/rawio"
)

// acceptPair returns a clientConn accepted through clientListener and the
// client's end of it.
func acceptPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	if !rawio.Supported {
		t.Skip("raw socket writes are not used on this platform: clientListener passes connections through")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl := newClientListener(ln, nil)
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := cl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	if _, ok := server.(*clientConn); !ok {
		t.Fatalf("accepted %T, want *clientConn", server)
	}
	return server, client
}

func TestClientConnWrite(t *testing.T) {
	t.Run("large write waits for a slow reader", func(t *testing.T) {
		server, client := acceptPair(t)
		want := bytes.Repeat([]byte("data: {\"choices\":[]}\n\n"), 100_000) // ~2 MiB, many socket buffers
		got := make(chan []byte)
		go func() {
			var b bytes.Buffer
			buf := make([]byte, 4096)
			for {
				time.Sleep(50 * time.Microsecond)
				n, err := client.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			got <- b.Bytes()
		}()
		n, err := server.Write(want)
		if err != nil || n != len(want) {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
		}
		server.Close()
		if b := <-got; !bytes.Equal(b, want) {
			t.Fatalf("client read %d bytes, differing from the %d written", len(b), len(want))
		}
	})
	t.Run("write deadline", func(t *testing.T) {
		server, _ := acceptPair(t) // the client never reads
		if err := server.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		big := make([]byte, 64<<20)
		n, err := server.Write(big)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Write to a client that does not read = %d, %v; want a timeout", n, err)
		}
		if n <= 0 || n >= len(big) {
			t.Fatalf("wrote %d of %d bytes before the deadline", n, len(big))
		}
	})
	t.Run("client gone", func(t *testing.T) {
		server, client := acceptPair(t)
		client.(*net.TCPConn).SetLinger(0) // close with a reset
		client.Close()
		time.Sleep(20 * time.Millisecond)
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			_, err = server.Write([]byte("data: x\n\n"))
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" {
			t.Fatalf("Write to a reset client: %v; want a *net.OpError from write", err)
		}
	})
}

// TestClientConnRead checks clientConn reads as a *net.TCPConn does
// (bytes, the peer's close, a deadline, its own close, and the errors they
// give) and notes when the bytes reached the socket.
func TestClientConnRead(t *testing.T) {
	t.Run("bytes keep their arrival", func(t *testing.T) {
		server, client := acceptPair(t)
		cc := server.(*clientConn)
		buf := make([]byte, 64)
		// Linux turns stamping on asynchronously: exchange until it is on.
		for range 100 {
			sent := time.Now()
			client.Write([]byte("x"))
			time.Sleep(5 * time.Millisecond)
			if _, err := cc.Read(buf); err != nil {
				t.Fatal(err)
			}
			if !rawio.Stamps || cc.arrived.Sub(sent) < 4*time.Millisecond {
				break
			}
		}
		sent := time.Now()
		client.Write([]byte("hello"))
		time.Sleep(100 * time.Millisecond)
		n, err := cc.Read(buf)
		if err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		if d := cc.arrived.Sub(sent); rawio.Stamps && (d < 0 || d > 50*time.Millisecond) {
			t.Errorf("bytes that waited 100 ms in the socket noted as arrived %v after they were sent", d)
		}
	})
	t.Run("a small read reads ahead", func(t *testing.T) {
		// fasthttp reads a request's first byte alone, then the rest:
		// the first read takes what came, the next ones give it out in
		// order, whatever their sizes, then read the socket again.
		server, client := acceptPair(t)
		cc := server.(*clientConn)
		msg := bytes.Repeat([]byte("0123456789"), 1000) // over aheadSize: the rest stays in the socket
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		var got []byte
		sizes := []int{1, 3, aheadMin - 1, 64 << 10, 1}
		for i := 0; len(got) < len(msg) && i < 20; i++ {
			buf := make([]byte, sizes[i%len(sizes)])
			n, err := cc.Read(buf)
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(got), err)
			}
			got = append(got, buf[:n]...)
			if len(got) == 1 && (len(cc.pre) == 0 || cc.ahead == nil) {
				t.Fatalf("a one-byte read left %d bytes read ahead, want the rest of what came", len(cc.pre))
			}
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("read %d bytes, not the %d sent in order", len(got), len(msg))
		}
		if len(cc.pre) != 0 || cc.ahead != nil {
			t.Errorf("%d bytes still held ahead after all were given", len(cc.pre))
		}
	})
	t.Run("unread goes first", func(t *testing.T) {
		server, client := acceptPair(t)
		cc := server.(*clientConn)
		client.Write([]byte("after"))
		time.Sleep(20 * time.Millisecond)
		b := make([]byte, 1)
		if n, err := cc.Read(b); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		cc.unread([]byte("before,"))
		buf := make([]byte, 64)
		var got []byte
		for len(got) < len("before,fter") {
			n, err := cc.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
		if string(got) != "before,fter" {
			t.Fatalf("read %q, want what was put back, then what was read ahead", got)
		}
	})
	t.Run("peer's close is EOF", func(t *testing.T) {
		server, client := acceptPair(t)
		client.Close()
		if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("read %d, %v; want 0, io.EOF", n, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		server, _ := acceptPair(t)
		server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := server.Read(make([]byte, 8))
		var oe *net.OpError
		var ne net.Error
		if !errors.As(err, &oe) || oe.Op != "read" || oe.Err != os.ErrDeadlineExceeded || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past the deadline: %#v, want a read OpError of os.ErrDeadlineExceeded, as net.TCPConn's", err)
		}
	})
	t.Run("own close", func(t *testing.T) {
		server, _ := acceptPair(t)
		time.AfterFunc(20*time.Millisecond, func() { server.Close() })
		_, err := server.Read(make([]byte, 8))
		var oe *net.OpError
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "read" || oe.Err != net.ErrClosed {
			t.Fatalf("read on a closed conn: %#v, want a read OpError of net.ErrClosed", err)
		}
	})
}

// TestScanFollowsRequests: the scan follows pipelined requests through
// their bodies, however the bytes are cut into reads, so a head's bare LF
// is found wherever it is and a body's LF never counts as one. It checked
// from where the handler started, not where the next head did: a valid
// request pipelined behind another, its JSON body with plain LF line ends
// or a read cut between a CR and its LF, got a 400; a bare-LF head in the
// same read as the request before it was passed on.
func TestScanFollowsRequests(t *testing.T) {
	req := func(head, body string) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
	}
	jsonLF := "{\n  \"model\": \"m\",\n  \"stream\": false\n}\n"
	for _, c := range []struct {
		name   string
		stream string
		bare   bool // a head has a bare LF
	}{
		{"two with LF in their bodies", req("", jsonLF) + req("", jsonLF), false},
		{"a body of CRLFs", req("", "\r\n\r\n\r\n\r\n") + req("", "x"), false},
		{"a GET, then a POST", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + req("", jsonLF), false},
		{"blank lines before a request line", "\r\n" + req("", jsonLF) + "\r\n" + req("", "x"), false},
		{"LF-only empty lines before a request line", "\n" + req("", jsonLF) + "\n\r\n" + req("", "x"), false},
		{"Content-Length with spaces and any case", "POST / HTTP/1.1\r\ncOnTeNt-LeNgTh:  3 \r\n\r\na\nb" + req("", jsonLF), false},
		{"a bare LF in the second head", req("", jsonLF) + "POST / HTTP/1.1\nHost: x\r\n\r\n", true},
		{"a bare LF in a header of the third", req("", "x") + req("", "y") + "POST / HTTP/1.1\r\nHost: x\n\r\n", true},
		{"a chunked body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\na\nb\r\n0\r\n\r\n" + req("", jsonLF), false},
		{"a chunked body with extensions and trailers, then a bare LF", "POST / HTTP/1.1\r\ntransfer-encoding:  Chunked\r\n\r\n3;x=1\r\na\nb\r\nA\r\n\n\n\n\n\n\n\n\n\n\n\r\n0\r\nT: 1\r\n\r\n" + req("", jsonLF) + "POST / HTTP/1.1\nHost: x\r\n\r\n", true},
		{"Content-Length with leading zeros, then a bare LF", "POST / HTTP/1.1\r\nContent-Length: 0003\r\n\r\na\nb" + "GET / HTTP/1.1\r\nHost: x\n\r\n", true},
		{"a long header name ending in content-length", "POST / HTTP/1.1\r\nX-Very-Long-Name-Content-Length: 5\r\n" + "Content-Length: 1\r\n\r\nx" + req("", jsonLF), false},
		// fasthttp ends a trailer line, and the empty one that ends the
		// trailers, at an LF alone too: so does the scan.
		{"a chunked body ended by a bare-LF empty line, then a bare-LF head", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\n" + "GET / HTTP/1.1\nHost: x\r\n\r\n", true},
		{"a trailer line ended by a bare LF, then a bare-LF head", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\n\r\n" + "GET / HTTP/1.1\nHost: x\r\n\r\n", true},
		{"a chunked body ended by a bare-LF empty line, then LF in a body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\n" + req("", jsonLF), false},
		{"Transfer-Encoding: identity, then LF in a body", "GET / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n" + req("", jsonLF), false},
		{"a head with no header lines, then LF in a body", "GET / HTTP/1.0\r\n\r\n" + req("", jsonLF), false},
		// Bodies the scan cannot follow: nothing after them is checked
		// until the request is settled (a bare LF passes), and nothing is
		// refused that is valid.
		{"two lengths that differ", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\na\nbc" + req("", jsonLF), false},
		{"a length with a sign", "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\na\nb" + req("", jsonLF), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Every cut into two reads, and one byte a read.
			cuts := make([][]string, 0, len(c.stream)+1)
			for i := 0; i <= len(c.stream); i++ {
				cuts = append(cuts, []string{c.stream[:i], c.stream[i:]})
			}
			var bytewise []string
			for i := range len(c.stream) {
				bytewise = append(bytewise, c.stream[i:i+1])
			}
			cuts = append(cuts, bytewise)
			for _, reads := range cuts {
				cc := &clientConn{l: &clientListener{}, plain: true}
				cc.startHead()
				bare := false
				for _, r := range reads {
					if found, _ := cc.scan([]byte(r)); found {
						bare = true
						break
					}
				}
				if bare != c.bare {
					t.Fatalf("reads %q: bare LF %v, want %v", reads, bare, c.bare)
				}
			}
		})
	}
}

// FuzzScan: the scan of a client's bytes does not depend on how they are
// cut into reads: any input, whole or cut at two points, finds a bare LF
// in the same place (in the same request), ends in the same state, and
// never panics.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\na\nbGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\na\nb\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\nHost: x\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 01\r\n\r\nx",
	} {
		f.Add([]byte(s), uint16(5), uint16(30))
	}
	f.Fuzz(func(t *testing.T, b []byte, i, j uint16) {
		type state struct {
			bare                           bool
			inHead, lost, chunked, started bool
			skip, csize                    int64
			pending, lines                 int
		}
		run := func(reads ...[]byte) state {
			cc := &clientConn{l: &clientListener{}, plain: true}
			cc.startHead()
			for _, r := range reads {
				if bare, _ := cc.scan(r); bare {
					return state{bare: true, pending: cc.pending, lines: cc.nLines}
				}
			}
			return state{false, cc.inHead, cc.lost, cc.chunked, cc.started, cc.skip, cc.csize, cc.pending, cc.nLines}
		}
		a, c := int(i)%(len(b)+1), int(j)%(len(b)+1)
		if a > c {
			a, c = c, a
		}
		if whole, cut := run(b), run(b[:a], b[a:c], b[c:]); whole != cut {
			t.Fatalf("%q whole: %+v; cut at %d and %d: %+v", b, whole, a, c, cut)
		}
	})
}

// TestScanKeepsNoBurst: the request lines of a burst of pipelined heads
// are let go once all were served, not held for the connection's life.
func TestScanKeepsNoBurst(t *testing.T) {
	cc := &clientConn{l: &clientListener{}, plain: true}
	cc.startHead()
	burst := strings.Repeat("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 1000)
	if bare, _ := cc.scan([]byte(burst)); bare || cc.nLines != 1000 || cc.pending != 1000 {
		t.Fatalf("bare %v, %d lines, %d pending; want 1000 of each", bare, cc.nLines, cc.pending)
	}
	for range 1000 {
		if got := string(cc.requestLine()); got != "GET /v1/models HTTP/1.1" {
			t.Fatalf("request line %q", got)
		}
		cc.bodyIn()
		cc.served()
	}
	if cc.nLines != 0 || cc.pending != 0 || len(cc.lines) > 2 {
		t.Errorf("after all were served: %d lines, %d pending, %d kept; want 0, 0, at most 2", cc.nLines, cc.pending, len(cc.lines))
	}
}
