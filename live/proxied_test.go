//go:build live

package live

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/proxy"
	"github.com/tokentap/tokentap/record"
)

// proxied is tokentap's proxy, in process, in front of a real engine,
// keeping every record it makes: the checks that hold the proxy's figures
// against the engine's own send through it one request at a time.
type proxied struct {
	url  string // the proxy's base: http://127.0.0.1:port
	mu   sync.Mutex
	recs []record.Record
}

// startProxied starts a proxy in front of upstream on a free loopback
// port; it closes when t ends.
func startProxied(t *testing.T, upstream string) *proxied {
	t.Helper()
	pd := &proxied{}
	p, err := proxy.New(proxy.Config{Upstream: upstream, OnRecord: func(r *record.Record) {
		pd.mu.Lock()
		pd.recs = append(pd.recs, *r)
		pd.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close(context.Background()) })
	pd.url = "http://" + ln.Addr().String()
	return pd
}

// nth waits for the proxy's n-th record (from 1): the proxy writes a
// record as its exchange ends, a moment after the client read the last
// byte. A caller that waits for each request's record before sending the
// next gets the n-th request's. Five seconds without it fail t.
func (pd *proxied) nth(t *testing.T, n int) record.Record {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pd.mu.Lock()
		have := len(pd.recs)
		var r record.Record
		if have >= n {
			r = pd.recs[n-1]
		}
		pd.mu.Unlock()
		if have >= n {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy wrote %d records in 5 s after the request's end; want %d", have, n)
		}
	}
}
