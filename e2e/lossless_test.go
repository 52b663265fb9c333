//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// The issue "Lossless and bounded", against an engine that is not ours
// (testdata/rawengine.py, Python's standard library on raw sockets): one
// test per defect it named, with the built proxy.

// pyEngine starts testdata/rawengine.py and returns its URL.
func pyEngine(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for the engine that is not ours: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(py, "testdata/rawengine.py", strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("rawengine.py did not start: %q %v", line, err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func rawSend(t *testing.T, addr, head, body string) (status int, got []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
	got, _ = io.ReadAll(c)
	if f := strings.Fields(string(got)); len(f) > 1 {
		status, _ = strconv.Atoi(f[1])
	}
	return status, got
}

func TestLossless(t *testing.T) {
	t.Parallel()
	engine := pyEngine(t)

	t.Run("expensive bodies cost no memory", func(t *testing.T) {
		p := startProxyProc(t, engine, "--max-body-size", "128M")
		var numbers, ids strings.Builder
		numbers.WriteString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x":[`)
		for i := range 5_000_000 {
			if i > 0 {
				numbers.WriteByte(',')
			}
			numbers.WriteByte('1')
		}
		numbers.WriteString("]}")
		ids.WriteString(`{"model":"m","stream":true,"max_tokens":5,"prompt":[`)
		for i := range 131072 {
			if i > 0 {
				ids.WriteByte(',')
			}
			ids.WriteString(strconv.Itoa(i % 50000))
		}
		ids.WriteString("]}")
		before := peakRSS(t, p.cmd.Process.Pid)
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
		if status, _ := rawSend(t, p.addr(), head, numbers.String()); status != 200 {
			t.Fatalf("a 10 MB body of 5 million numbers got %d", status)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				h := strings.Replace(head, "/chat/completions", "/completions", 1)
				if status, _ := rawSend(t, p.addr(), h, ids.String()); status != 200 {
					t.Errorf("a body of 131,072 token ids got %d", status)
				}
			})
		}
		wg.Wait()
		grew := peakRSS(t, p.cmd.Process.Pid) - before
		t.Logf("peak resident memory grew by %d MiB", grew>>20)
		if grew > 64<<20 {
			t.Errorf("peak resident memory grew by %d MiB for a 10 MB body and eight 1 MB bodies, want at most 64", grew>>20)
		}
		recs := p.next(t, 9)
		for _, r := range recs {
			if r.Model != "m" || !r.Stream || r.Outcome != record.OK {
				t.Errorf("record %s %v %s %q", r.Model, r.Stream, r.Outcome, r.Error)
			}
		}
	})

	t.Run("every close-delimited stream of large events has its record", func(t *testing.T) {
		p := startProxyProc(t, engine)
		const streams = 40
		var wg sync.WaitGroup
		for i := range streams {
			wg.Go(func() {
				head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Shape: close:20000:2:2\r\nContent-Type: application/json\r\n"
				status, got := rawSend(t, p.addr(), head, fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"c%d"}]}`, i))
				if status != 200 || len(got) < 100_000 {
					t.Errorf("stream %d: status %d, %d bytes", i, status, len(got))
				}
			})
		}
		wg.Wait()
		recs := p.next(t, streams)
		for _, r := range recs {
			if r.Events() == 0 {
				t.Errorf("record %s has no events (%s %q)", r.ID, r.Outcome, r.Error)
			}
		}
		if m := p.metrics(t); m["tokentap_capture_errors_total"] != 0 {
			t.Errorf("tokentap_capture_errors_total = %v", m["tokentap_capture_errors_total"])
		}
	})

	t.Run("an answer cut short reaches the client", func(t *testing.T) {
		p := startProxyProc(t, engine)
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Shape: cut:80:200\r\nContent-Type: application/json\r\n"
		status, got := rawSend(t, p.addr(), head, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		_, body, _ := bytes.Cut(got, []byte("\r\n\r\n"))
		if status != 200 || len(body) != 80 {
			t.Errorf("the client got status %d and %d bytes, want 200 and the 80 the engine sent", status, len(body))
		}
		r := p.next(t, 1)[0]
		if r.Status != 200 || r.Outcome != record.Broken || !strings.Contains(r.Error, "80 of the 200") {
			t.Errorf("record %d %s %q", r.Status, r.Outcome, r.Error)
		}
	})

	t.Run("a body arriving at SIGTERM has a record", func(t *testing.T) {
		p := startProxyProc(t, engine, "--shutdown-timeout", "1s")
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"model\":\"m\",\"stream\":true,\"x\":\"")
		time.Sleep(200 * time.Millisecond) // the head is in
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		if resp.StatusCode != 503 {
			t.Errorf("got %d, want 503", resp.StatusCode)
		}
		p.stop(t)
		r := p.next(t, 1)[0]
		if r.Status != 503 || r.Blame != record.BlameTokentap {
			t.Errorf("record %d %s %q", r.Status, r.Blame, r.Error)
		}
	})

	t.Run("one address cannot take every connection", func(t *testing.T) {
		p := startProxyProc(t, engine, "--max-client-conns", "20")
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		refused := ""
		for range 20 {
			c, err := net.Dial("tcp", p.addr())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if b, _ := io.ReadAll(c); len(b) > 0 {
				refused = string(b)
				break
			}
		}
		// The default cap leaves a tenth of the ceiling, at least 8, to
		// other addresses: 12 of 20.
		if !strings.HasPrefix(refused, "HTTP/1.1 429") || !strings.Contains(refused, "--max-conns-per-ip") || len(conns) != 13 {
			t.Errorf("after %d connections from one address: %.120q, want the 13th refused with a 429 naming --max-conns-per-ip", len(conns), refused)
		}
	})

	t.Run("low items", func(t *testing.T) {
		p := startProxyProc(t, engine)
		// The last "model" is the one the engine uses.
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
		if status, _ := rawSend(t, p.addr(), head, `{"model":"first","stream":true,"model":"second"}`); status != 200 {
			t.Fatalf("got %d", status)
		}
		if r := p.next(t, 1)[0]; r.Model != "second" {
			t.Errorf("record model %q, want the last one, second", r.Model)
		}
		// A path above the root is refused, not forwarded.
		if status, _ := rawSend(t, p.addr(), "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", ""); status != 400 {
			t.Errorf("GET /../../etc/passwd got %d, want 400", status)
		}
		// A control byte of a model name reaches /metrics escaped.
		if status, _ := rawSend(t, p.addr(), head, "{\"model\":\"esc\\u001b[31m\",\"stream\":true}"); status != 200 {
			t.Fatalf("got %d", status)
		}
		p.next(t, 1)
		resp, err := http.Get("http://" + p.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.IndexByte(b, 0x1b) >= 0 || !bytes.Contains(b, []byte(`esc\\x1b[31m`)) {
			t.Errorf("/metrics has the model name's ESC raw, or not escaped as \\x1b")
		}
	})
}
