package proxy

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestClientsLeaveEdgeStreams: clients that leave streams the proxy passes
// on itself from the engine's socket (writeToEdge, where the engine's
// connection is on no event loop: here turned off, as on a platform
// without one) while the engine sends without pause. Every request has
// its record, as cancelled by its client, and Close returns. (The
// deadlock TestClientGoneInsideAnEdgeRead pins down was found this way,
// by BenchmarkPassThrough's open=1024 with the loop off: one stream in
// 1,024; its moment is too narrow for this test to meet it reliably.)
func TestClientsLeaveEdgeStreams(t *testing.T) {
	noLoop(t)
	m := fixtures.DefaultModel()
	m.FirstEventDelay, m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = time.Millisecond, 20*time.Microsecond, 0, 0
	m.KVCapacity, m.MaxRunning = 1<<24, 1024
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	b := chatBody(m.Name, 50000, true, "") // a second of events at least
	const rounds, streams = 4, 48
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
				buf := make([]byte, 4096)
				// Leave while events flow, at a different moment for each,
				// past the first moves of the engine's read deadline (armProbe).
				leave := time.Now().Add(time.Duration(10+(round*streams+i)%23*7) * time.Millisecond)
				for time.Now().Before(leave) {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		h.waitRecords(t, (round+1)*streams)
	}
	streamed, left := 0, 0
	for _, r := range h.records() {
		if r.Events() > 0 {
			streamed++
		}
		if r.Outcome == record.Cancelled {
			left++
		}
	}
	t.Logf("%d requests, %d with events, %d cancelled by their client", rounds*streams, streamed, left)
	if streamed < rounds*streams/2 || left < rounds*streams/4 {
		t.Errorf("%d of %d requests streamed and %d were left by their client: the test did not test what it is for", streamed, rounds*streams, left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.p.Close(ctx) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestClientGoneInsideAnEdgeRead: the client watcher closes the engine's
// connection (clientGone) while writeToEdge's callback is inside a read of
// it, the moment that once deadlocked: the close waited for the callback,
// and the callback for the lock the watcher held around the close.
func TestClientGoneInsideAnEdgeRead(t *testing.T) {
	noLoop(t)
	var once sync.Once
	t.Cleanup(func() { edgeHook = nil }) // after the proxy's Close (cleanups run last first)
	edgeHook = func(x *exchange) {
		once.Do(func() {
			go x.clientGone()
			time.Sleep(100 * time.Millisecond) // the close waits for this callback
		})
	}
	m := fixtures.DefaultModel()
	m.FirstEventDelay, m.TBTBase = time.Millisecond, time.Millisecond
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := chatBody(m.Name, 1000, true, "")
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
	recs := h.waitRecords(t, 1)
	if r := recs[0]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Errorf("record %s/%s, want cancelled by the client", r.Outcome, r.Blame)
	}
}

// noLoop turns the event loop off for engine connections until the test's
// proxies have closed: a cleanup registered before theirs runs after them,
// so no dial reads the seam while it is restored.
func noLoop(t *testing.T) {
	on := loopEngines
	t.Cleanup(func() { loopEngines = on })
	loopEngines = false
}
