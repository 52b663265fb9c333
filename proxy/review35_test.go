package proxy

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCloseReportsCaptureFailureAfterCut: a capture that cannot be written
// is output lost, whether or not shutdown had to cut a stream. Close cut
// the open stream when its time ran out (context.DeadlineExceeded, which
// it treats as expected) and must still return the capture's failure, so
// that `tokentap proxy --capture` can say so and exit 1, as it does when
// no stream was cut.
func TestCloseReportsCaptureFailureAfterCut(t *testing.T) {
	e := slowStream(t, 50*time.Millisecond)
	h := startProxy(t, e.url, func(c *Config) { c.Capture = &failingWriter{} })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 400, true, "")) // 20 s: cut
	}()
	for h.p.Open() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := h.p.Close(ctx)
	<-done
	if err == nil || !strings.Contains(err.Error(), "capture") {
		t.Fatalf("Close = %v, want the capture's failure (the cut stream's record was not written)", err)
	}
}

// TestPutForgetsPending: what Read had left to give the client of one
// request is that request's, like everything in xstate: a pooled exchange
// must not serve it to the next one.
func TestPutForgetsPending(t *testing.T) {
	p := &Proxy{}
	x := p.getExchange()
	x.pending = append(x.pending, "data: the last request's event\n\n"...)
	x.put()
	if len(x.pending) != 0 {
		t.Fatalf("a pooled exchange keeps %q for the next request's Read", x.pending)
	}
}
