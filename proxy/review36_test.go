package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// ledgerEngine is an SSE engine on raw sockets whose answer is a function
// of the request (so a client can check every byte it gets) and which
// notes, per request, whether it sent it all or saw its connection close
// first (the proxy cancelling it).
type ledgerEngine struct {
	url string
	mu  sync.Mutex
	end map[int]engineEnd
	got map[int]bool // requests the engine got
}

type engineEnd struct {
	cancelled bool
	at        time.Time
}

var shapeRe = regexp.MustCompile(`REQ:(\d+):(\d+):(\d+):(\d+):(\d+)`)

// shape: id, events, gap (ms), first-event delay (ms), fragment (1: split
// every event across writes).
type shape struct{ id, events, gapMS, firstMS, frag int }

func (s shape) content() string {
	return fmt.Sprintf("REQ:%d:%d:%d:%d:%d", s.id, s.events, s.gapMS, s.firstMS, s.frag)
}

func (s shape) event(k int) string {
	pad := strings.Repeat(string(rune('a'+(s.id+k)%26)), 20+(s.id*7+k*13)%300)
	return fmt.Sprintf("data: {\"id\":\"r%d\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d-%d %s\"}}]}\n\n", s.id, s.id, k, pad)
}

// body is what the client must get.
func (s shape) body() string {
	var b strings.Builder
	for k := range s.events {
		b.WriteString(s.event(k))
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func startLedgerEngine(t testing.TB) *ledgerEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &ledgerEngine{url: "http://" + ln.Addr().String(), end: map[int]engineEnd{}, got: map[int]bool{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go e.serve(c)
		}
	}()
	return e
}

func (e *ledgerEngine) note(id int, cancelled bool) {
	e.mu.Lock()
	e.end[id] = engineEnd{cancelled: cancelled, at: time.Now()}
	e.mu.Unlock()
}

// received notes that the engine got request id.
func (e *ledgerEngine) received(id int) {
	e.mu.Lock()
	e.got[id] = true
	e.mu.Unlock()
}

// sent says whether the engine got request id at all.
func (e *ledgerEngine) sent(id int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got[id]
}

func (e *ledgerEngine) ended(id int) (engineEnd, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.end[id]
	return v, ok
}

func (e *ledgerEngine) serve(c net.Conn) {
	defer c.Close()
	reqs := make(chan string)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		br := bufio.NewReader(c)
		for {
			n := 0
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length: "); ok {
					n, _ = strconv.Atoi(strings.TrimSpace(v))
				}
				if line == "\r\n" {
					break
				}
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return
			}
			select {
			case reqs <- string(b):
			case <-gone:
				return
			}
		}
	}()
	for {
		var body string
		select {
		case body = <-reqs:
		case <-gone:
			return
		}
		m := shapeRe.FindStringSubmatch(body)
		if m == nil {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		var v [5]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		s := shape{v[0], v[1], v[2], v[3], v[4]}
		e.received(s.id)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			e.note(s.id, true)
			return
		}
		wait := func(d time.Duration) bool {
			select {
			case <-gone:
				return false
			case <-time.After(d):
				return true
			}
		}
		if !wait(time.Duration(s.firstMS) * time.Millisecond) {
			e.note(s.id, true)
			return
		}
		ok := true
		for k := 0; k <= s.events && ok; k++ {
			ev := "data: [DONE]\n\n"
			if k < s.events {
				ev = s.event(k)
			}
			chunk := fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)
			if s.frag == 1 && len(chunk) > 10 {
				// the chunk-size line and the event split across writes
				cut := 3 + (k % 7)
				if _, err := io.WriteString(c, chunk[:cut]); err != nil {
					ok = false
					break
				}
				if !wait(time.Millisecond) {
					ok = false
					break
				}
				chunk = chunk[cut:]
			}
			if _, err := io.WriteString(c, chunk); err != nil {
				ok = false
				break
			}
			if k < s.events && !wait(time.Duration(s.gapMS)*time.Millisecond) {
				ok = false
			}
		}
		if ok {
			if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
				ok = false
			}
		}
		e.note(s.id, !ok)
		if !ok {
			return
		}
	}
}

func reqText(addr string, s shape) string {
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"stream":true}`, s.content())
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestReviewManyStreamsClientsComeAndGo runs many streams through the proxy
// at once with clients of several kinds: ones that read it all (every byte
// checked against what the engine sent for their request), ones that
// pipeline a second request during the stream, slow readers, and ones that
// leave (close or reset) at a random moment, some before the first event.
// Every stream read whole must be exact and recorded ok; every client that
// left must have its engine request cancelled; no descriptor or goroutine
// is left behind.
func TestReviewManyStreamsClientsComeAndGo(t *testing.T) {
	e := startLedgerEngine(t)
	h := startProxy(t, e.url, func(c *Config) { c.CapturePrompts = true })
	addr := strings.TrimPrefix(h.url, "http://")
	// warm up: pools, loops
	warm := shape{id: 1, events: 3, gapMS: 1}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, reqText(addr, warm))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	c.Close()
	h.waitRecords(t, 1)
	time.Sleep(200 * time.Millisecond)
	fd0, g0 := openFDs(t), runtime.NumGoroutine()-int(idleWorkers.Load())

	const n = 240
	const par = 24
	kinds := []string{"full", "leave", "reset", "pipeline", "slow", "leave-before-first", "full"}
	type result struct {
		kind string
		ids  []int
		left bool // the client left before the end
		at   time.Time
		err  error
	}
	results := make([]result, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(36, 36))
	var mu sync.Mutex
	rnd := func(k int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(k) }
	for i := range n {
		kind := kinds[i%len(kinds)]
		id := 100 + i*2
		s := shape{id: id, events: 20 + rnd(60), gapMS: 1 + rnd(8), firstMS: rnd(30), frag: rnd(2)}
		if kind == "slow" {
			s.events, s.gapMS = 300, 0
		}
		if kind == "leave-before-first" {
			s.firstMS = 300
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			r := &results[i]
			r.kind = kind
			r.ids = []int{id}
			c, err := net.DialTCP("tcp", nil, mustResolve(addr))
			if err != nil {
				r.err = err
				return
			}
			defer c.Close()
			if kind == "slow" {
				c.SetReadBuffer(4096)
			}
			text := reqText(addr, s)
			s2 := shape{id: id + 1, events: 5, gapMS: 1}
			if kind == "pipeline" {
				r.ids = append(r.ids, s2.id)
			}
			if _, err := io.WriteString(c, text); err != nil {
				r.err = err
				return
			}
			br := bufio.NewReader(c)
			switch kind {
			case "leave", "reset", "leave-before-first":
				limit := 1 + rnd(len(s.body())/2)
				if kind == "leave-before-first" {
					time.Sleep(time.Duration(50+rnd(150)) * time.Millisecond)
				} else {
					io.CopyN(io.Discard, br, int64(limit))
				}
				if kind == "reset" {
					c.SetLinger(0)
				}
				c.Close()
				r.left, r.at = true, time.Now()
				return
			case "pipeline":
				time.Sleep(time.Duration(rnd(20)) * time.Millisecond)
				if _, err := io.WriteString(c, reqText(addr, s2)); err != nil {
					r.err = err
					return
				}
			}
			for j, sh := range []shape{s, s2}[:len(r.ids)] {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					r.err = fmt.Errorf("response %d: %w", j, err)
					return
				}
				var got []byte
				if kind == "slow" {
					buf := make([]byte, 512)
					for {
						k, err := resp.Body.Read(buf)
						got = append(got, buf[:k]...)
						if err == io.EOF {
							break
						}
						if err != nil {
							r.err = err
							return
						}
						time.Sleep(200 * time.Microsecond)
					}
				} else {
					got, err = io.ReadAll(resp.Body)
					if err != nil {
						r.err = fmt.Errorf("response %d body: %w (%d bytes)", j, err, len(got))
						return
					}
				}
				if want := sh.body(); string(got) != want {
					i := 0
					for i < len(got) && i < len(want) && got[i] == want[i] {
						i++
					}
					r.err = fmt.Errorf("request %d: body differs at byte %d of %d (got %d): got %q want %q", sh.id, i, len(want), len(got),
						clip(got[i:]), clip([]byte(want[i:])))
					return
				}
			}
		}(i)
	}
	wg.Wait()
	total := 1
	for _, r := range results {
		total += len(r.ids)
		if r.err != nil {
			t.Errorf("%s client %v: %v", r.kind, r.ids, r.err)
		}
	}
	// Every request the engine got ended; a client that left cancelled its.
	// A client that left before the proxy passed its request on costs the
	// engine nothing: the engine never gets it, and the record says the
	// client cancelled it.
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range results {
		for _, id := range r.ids {
			for {
				if _, ok := e.ended(id); ok || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, ok := e.ended(id); !ok && (!r.left || e.sent(id)) {
				t.Errorf("%s client: the engine's request %d never ended (client left: %v; the engine got it: %v)", r.kind, id, r.left, e.sent(id))
			}
		}
	}
	recs := h.waitRecords(t, total)
	byID := map[int]record.Record{}
	for _, rec := range recs {
		if m := shapeRe.FindSubmatch(rec.Request); m != nil {
			id, _ := strconv.Atoi(string(m[1]))
			byID[id] = rec
		}
	}
	for _, r := range results {
		if r.err != nil {
			continue
		}
		for _, id := range r.ids {
			rec, ok := byID[id]
			if !ok {
				t.Errorf("no record for request %d", id)
				continue
			}
			if !r.left && (rec.Outcome != record.OK) {
				t.Errorf("%s client read it all, request %d recorded %s/%s (%s)", r.kind, id, rec.Outcome, rec.Blame, rec.Error)
			}
			if en, _ := e.ended(id); r.left && rec.Outcome != record.OK && (rec.Outcome != record.Cancelled || rec.Blame != record.BlameClient || (e.sent(id) && !en.cancelled)) {
				t.Errorf("%s client left, request %d recorded %s/%s (%s), engine cancelled: %v", r.kind, id, rec.Outcome, rec.Blame, rec.Error, en.cancelled)
			}
		}
	}
	outcomes := map[string]int{}
	var worst time.Duration
	for _, r := range results {
		for _, id := range r.ids {
			rec := byID[id]
			outcomes[r.kind+":"+string(rec.Outcome)+"/"+string(rec.Blame)]++
			if en, ok := e.ended(id); ok && r.left && en.cancelled && en.at.Sub(r.at) > worst {
				worst = en.at.Sub(r.at)
			}
		}
	}
	t.Logf("outcomes %v; slowest cancel after a client left: %v", outcomes, worst)
	client.CloseIdleConnections()
	var fd1, g1 int
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		fd1, g1 = openFDs(t), runtime.NumGoroutine()-int(idleWorkers.Load())
		if fd1 <= fd0+2 && g1 <= g0+4 {
			break
		}
	}
	t.Logf("fds %d -> %d, goroutines %d -> %d, records %d", fd0, fd1, g0, g1, len(recs))
	if fd1 > fd0+2 {
		t.Errorf("descriptors: %d before, %d after", fd0, fd1)
	}
	if g1 > g0+4 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", g0, g1, buf[:runtime.Stack(buf, true)])
	}
}

func clip(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

func mustResolve(addr string) *net.TCPAddr {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		panic(err)
	}
	return a
}

// TestReviewWatchedDrainEnds: a stream stalled in a watched drain (the
// engine silent after its first event) ends by the idle timeout, or by the
// proxy's shutdown, with the record saying so, the client told, and the
// watch's descriptor given back.
func TestReviewWatchedDrainEnds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		close   bool
		outcome record.Outcome
		blame   record.Blame
	}{
		{"idle timeout", 300 * time.Millisecond, false, record.Timeout, record.BlameEngine},
		{"shutdown", time.Minute, true, record.Broken, record.BlameTokentap},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := startLedgerEngine(t)
			h := startProxy(t, e.url, func(c *Config) { c.IdleTimeout = tt.timeout })
			addr := strings.TrimPrefix(h.url, "http://")
			// A first stream starts the event loops (descriptors they keep).
			w, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, reqText(addr, shape{id: 6, events: 1, gapMS: 1}))
			if resp, err := http.ReadResponse(bufio.NewReader(w), nil); err == nil {
				io.ReadAll(resp.Body)
			}
			w.Close()
			h.waitRecords(t, 1)
			time.Sleep(100 * time.Millisecond)
			fd0 := openFDs(t)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// 2 events 30 s apart: the stream stalls after the first.
			io.WriteString(c, reqText(addr, shape{id: 7, events: 2, gapMS: 30000}))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 10)
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			// The client's and the proxy's ends, the engine's two, the watch.
			t.Logf("descriptors during the stall: %d (before %d)", openFDs(t), fd0)
			if tt.close {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				go h.p.Close(ctx)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, rerr := io.ReadAll(resp.Body)
			if rerr == nil {
				t.Errorf("the client read a whole body; want it cut")
			}
			if isTimeout(rerr) {
				t.Fatalf("the client was not told in 10 s: %v", rerr)
			}
			r := h.waitRecords(t, 2)[1]
			if r.Outcome != tt.outcome || r.Blame != tt.blame {
				t.Errorf("record %s/%s (%s), want %s/%s", r.Outcome, r.Blame, r.Error, tt.outcome, tt.blame)
			}
			c.Close()
			var n int
			for range 100 {
				if n = openFDs(t); n <= fd0 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n > fd0 {
				t.Errorf("descriptors: %d before, %d after", fd0, n)
			}
		})
	}
}
