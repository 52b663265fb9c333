//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

var errShed = errors.New("shed (503)")

// TestStreamsUnderTheDescriptorCeiling: --max-client-conns' default is
// meant to have the proxy shed load (503) before it runs out of
// descriptors. A proxy under a small open-file limit with that default,
// sent more streams than it may hold, serves each at once or sheds it at
// once: none waits in the accept queue because the streams before it took
// every descriptor.
func TestStreamsUnderTheDescriptorCeiling(t *testing.T) {
	t.Parallel()
	fake, _ := startFake(t, "--tbt-base", "100ms", "--max-running", "4096", "--first-event-delay", "1ms", "--prefill-tok-per-sec", "1e9")
	const limit = 264
	// Under the ceiling as it was ((264-64)/2 = 100), over what three
	// descriptors a stream allow. One address, so no per-address cap.
	const streams = 95
	p := startProxyProcIn(t, withNofile(limit), fake, "--log-level", "debug", "--max-conns-per-ip", "-1")
	body := `{"model":"fake-4b","messages":[{"role":"user","content":"hi"}],"max_tokens":80,"ignore_eos":true,"stream":true}`
	errs := make(chan error, streams)
	for i := range streams {
		go func() {
			start := time.Now()
			c, err := net.Dial("tcp", p.addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			// The fake answers at once; 80 tokens take 8 s. A head this late
			// waited for a descriptor (its connection in the accept queue).
			if d := time.Since(start); d > 3*time.Second {
				io.Copy(io.Discard, resp.Body)
				errs <- fmt.Errorf("stream %d: its response head (%d) came %v after the request", i, resp.StatusCode, d.Round(time.Millisecond))
				return
			}
			if resp.StatusCode == 503 {
				io.Copy(io.Discard, resp.Body)
				errs <- errShed
				return
			}
			b, err := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || err != nil || !strings.Contains(string(b), "data: [DONE]") {
				errs <- fmt.Errorf("stream %d: status %d, %v, %.200q", i, resp.StatusCode, err, b)
				return
			}
			errs <- nil
		}()
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid)); err == nil {
		t.Logf("the proxy's descriptors with %d streams open: %d of %d", streams, len(ents), limit)
	}
	failed, shed := 0, 0
	for range streams {
		switch err := <-errs; err {
		case nil:
		case errShed:
			shed++
		default:
			if failed++; failed <= 5 {
				t.Error(err)
			}
		}
	}
	t.Logf("%d streams served, %d shed (503)", streams-failed-shed, shed)
	if shed == streams {
		t.Errorf("every stream was shed")
	}
	if failed > 0 {
		t.Errorf("%d of %d streams neither served nor shed at once, at an open-file limit of %d\n%s",
			failed, streams, limit, tail(p.stderr.String(), 2000))
	}
}
