package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// harness is a proxy on 127.0.0.1 with its records collected.
type harness struct {
	p     *Proxy
	url   string
	admin string
	mu    sync.Mutex
	recs  []record.Record
	cond  *sync.Cond
}

func startProxy(t testing.TB, upstream string, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{}
	h.cond = sync.NewCond(&h.mu)
	cfg := Config{Upstream: upstream, Logger: zerolog.Nop(), OnRecord: func(r *record.Record) {
		c := *r
		c.Arrivals = append([]time.Duration(nil), r.Arrivals...)
		c.Tokens = append([]int32(nil), r.Tokens...)
		c.Request = append([]byte(nil), r.Request...)
		h.mu.Lock()
		h.recs = append(h.recs, c)
		h.cond.Broadcast()
		h.mu.Unlock()
	}}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	adm := httptest.NewServer(p.AdminHandler())
	h.p, h.url, h.admin = p, "http://"+ln.Addr().String(), adm.URL
	t.Cleanup(func() {
		adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return h
}

// waitRecords waits until n records arrived and returns them.
func (h *harness) waitRecords(t testing.TB, n int) []record.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.recs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d records, want %d", len(h.recs), n)
		}
		go func() { time.Sleep(50 * time.Millisecond); h.cond.Broadcast() }()
		h.cond.Wait()
	}
	return append([]record.Record(nil), h.recs...)
}

// records returns the records arrived so far.
func (h *harness) records() []record.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]record.Record(nil), h.recs...)
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}

func chatBody(model string, maxTokens int, stream bool, extra string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello there"}],"max_tokens":%d,"ignore_eos":true,"stream":%v%s}`,
		model, maxTokens, stream, extra)
}

func do(t testing.TB, method, url, body string, hdr ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

var (
	idRe      = regexp.MustCompile(`"id":"[^"]*"`)
	createdRe = regexp.MustCompile(`"created":\d+`)
)

// normalize blanks the per-request parts of a fake's body (id, created).
func normalize(b []byte) string {
	s := idRe.ReplaceAllString(string(b), `"id":"X"`)
	return createdRe.ReplaceAllString(s, `"created":0`)
}

func TestStreamIsPassedThroughUnchanged(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel(), fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), nil)
	model := e.Model().Name
	tests := []struct {
		name  string
		body  string
		usage bool // the client sees a usage chunk
	}{
		{"chat, usage not asked: injected and hidden", chatBody(model, 20, true, ""), false},
		{"chat, usage asked", chatBody(model, 20, true, `,"stream_options":{"include_usage":true}`), true},
		{"chat, usage refused: injected and hidden", chatBody(model, 20, true, `,"stream_options":{"include_usage":false}`), false},
		{"chat, stream_options without include_usage: the engine's default", chatBody(model, 20, true, `,"stream_options":{"continuous_usage_stats":false}`), true},
		{"completions", fmt.Sprintf(`{"model":%q,"prompt":"once upon","max_tokens":15,"stream":true}`, model), false},
		{"chat, not streaming", chatBody(model, 12, false, ""), true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			if strings.Contains(tt.body, `"prompt"`) {
				path = "/v1/completions"
			}
			dr, direct, err := do(t, "POST", e.URL()+path, tt.body)
			if err != nil || dr.StatusCode != 200 {
				t.Fatalf("direct: %v %v", dr, err)
			}
			pr, via, err := do(t, "POST", h.url+path, tt.body, "Authorization", "Bearer sk-secret-123")
			if err != nil || pr.StatusCode != 200 {
				t.Fatalf("proxy: %v %v", pr, err)
			}
			if normalize(direct) != normalize(via) {
				t.Fatalf("body through the proxy differs from direct:\ndirect: %s\nproxy:  %s", direct, via)
			}
			if got := bytes.Contains(via, []byte(`"usage"`)); got != tt.usage {
				t.Fatalf("usage in client's body = %v, want %v:\n%s", got, tt.usage, via)
			}
			if pr.Header.Get("Content-Type") != dr.Header.Get("Content-Type") {
				t.Errorf("content-type %q, direct %q", pr.Header.Get("Content-Type"), dr.Header.Get("Content-Type"))
			}
			recs := h.waitRecords(t, i+1)
			r := recs[i]
			if r.Outcome != record.OK || r.Status != 200 {
				t.Fatalf("record outcome %q status %d error %q", r.Outcome, r.Status, r.Error)
			}
			if r.Model != model || r.ResponseID == "" || r.Sent <= 0 || r.End < r.Sent {
				t.Errorf("record fields: %+v", r)
			}
			if r.CompletionSource != record.SourceUsage || r.PromptTokens == 0 {
				t.Errorf("tokens from %q, prompt %d: want the engine's usage", r.CompletionSource, r.PromptTokens)
			}
			le, ok := e.LedgerEntryByID(r.ResponseID)
			if !ok {
				t.Fatalf("no ledger entry for %s", r.ResponseID)
			}
			if r.CompletionTokens != le.CompletionTokens || r.PromptTokens != le.PromptTokens {
				t.Errorf("record tokens %d/%d, ledger %d/%d", r.PromptTokens, r.CompletionTokens, le.PromptTokens, le.CompletionTokens)
			}
			if le.Stream && r.Events() != len(le.Events) {
				t.Errorf("record has %d events, ledger %d", r.Events(), len(le.Events))
			}
		})
	}
}

func TestNoInjectLeavesRequestAlone(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), func(c *Config) { c.NoInject = true })
	_, via, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 8, true, ""))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(via, []byte(`"usage"`)) {
		t.Fatal("usage chunk with --no-inject")
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.OK || r.CompletionSource != record.SourceCounted || r.CompletionTokens != 8 {
		t.Fatalf("record %q, %d tokens from %q", r.Outcome, r.CompletionTokens, r.CompletionSource)
	}
}

// timingAgainstLedger runs 8 streams of 60 tokens through a proxy twice
// (the first run opens the connections) and compares the second run's
// records with when the fake really wrote each event.
type timingErrors struct {
	firstLag, lag         time.Duration // medians of arrival stamps behind the fake's writes
	tbt, tbtTruth         time.Duration // median gap, pooled over the requests
	meanTBT, meanTruth    time.Duration // mean gap, pooled
	forward               time.Duration // median time to pass a request on to the engine
	ttftShort             time.Duration // the most any TTFT fell below the fake's
	records               int
	recordsWithoutLedger  int
	eventsDifferFromTruth int
}

func timingAgainstLedger(t testing.TB) timingErrors {
	e := fixtures.StartTest(t, fixtures.DefaultModel(), fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), nil)
	const n = 8
	run := func() {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 60, true, ""))
			}()
		}
		wg.Wait()
	}
	run() // warm up: connections from the client and to the engine are open
	h.waitRecords(t, n)
	run()
	recs := h.waitRecords(t, 2*n)[n:]
	clock := h.p.Clock()
	var te timingErrors
	var firstLags, lags, forwards, gaps, truthGaps []time.Duration
	for _, r := range recs {
		te.records++
		le, ok := e.LedgerEntryByID(r.ResponseID)
		if !ok || r.Outcome != record.OK {
			te.recordsWithoutLedger++
			continue
		}
		if len(le.Events) != r.Events() {
			te.eventsDifferFromTruth++
			continue
		}
		// The proxy's TTFT is First - Sent. Sent is taken as the request
		// reaches the proxy; the fake's ledger knows when it wrote each event,
		// so the proxy's arrival stamps are checked against those writes
		// (one time base: the run clock started from time.Now()). The fake's
		// At is taken when its write returned, so a reader may see the bytes
		// slightly before it: lags can be a little negative.
		forwards = append(forwards, le.Received.Sub(clock.Start().Add(r.Sent)))
		for i := range r.Arrivals {
			lag := clock.Start().Add(r.Arrivals[i]).Sub(le.Events[i].At)
			lags = append(lags, lag)
			if i == 0 {
				firstLags = append(firstLags, lag)
				continue
			}
			gaps = append(gaps, r.Arrivals[i]-r.Arrivals[i-1])
			truthGaps = append(truthGaps, le.Events[i].At.Sub(le.Events[i-1].At))
		}
		got, _ := r.TTFT()
		truth := le.FirstToken.Sub(clock.Start().Add(r.Sent))
		te.ttftShort = max(te.ttftShort, truth-got)
	}
	if len(lags) == 0 {
		return te
	}
	te.firstLag, te.lag, te.forward = median(firstLags), median(lags), median(forwards)
	te.tbt, te.tbtTruth = median(gaps), median(truthGaps)
	te.meanTBT, te.meanTruth = mean(gaps), mean(truthGaps)
	return te
}

// TestTimingMatchesLedger checks the proxy's TTFT and time between tokens
// against when the fake really wrote each event: medians over all
// requests, so one late wake-up does not decide, within a tolerance a busy
// 2-core machine keeps (there, under -race with a core spinning, first
// events came a median 2.4-2.9 ms late, as the proxy reads when it gets
// the CPU). What it catches is a systematic error: stamps taken at the wrong
// time or event. BenchmarkTimingAccuracy reports the figures themselves.
func TestTimingMatchesLedger(t *testing.T) {
	te := timingAgainstLedger(t)
	if te.recordsWithoutLedger > 0 || te.eventsDifferFromTruth > 0 {
		t.Fatalf("%d of %d records have no matching ledger entry, %d another event count", te.recordsWithoutLedger, te.records, te.eventsDifferFromTruth)
	}
	// 2 ms, 6 ms under -race (not the usual x10): still less than the
	// ~10 ms between one event and the next here. Seen on this shared
	// 2-core machine: first events a median 1.0 ms late without -race
	// (the loop parks in the netpoller between events of a few streams),
	// 2.9 ms under -race with a core spinning.
	slack := time.Duration(1)
	if raceSlowdown > 1 {
		slack = 3
	}
	within := func(got, want time.Duration) bool {
		tol := slack * max(want/10, 2*time.Millisecond)
		return got-want <= tol && want-got <= tol
	}
	if !within(te.tbt, te.tbtTruth) {
		t.Errorf("median TBT %v, fake's %v", te.tbt, te.tbtTruth)
	}
	if !within(te.meanTBT, te.meanTruth) {
		t.Errorf("mean TBT %v, fake's %v", te.meanTBT, te.meanTruth)
	}
	if tol := slack * 2 * time.Millisecond; te.ttftShort > tol {
		t.Errorf("a TTFT is %v below the fake's first write after the request reached the proxy", te.ttftShort)
	}
	if !within(te.firstLag, 0) {
		t.Errorf("first token events arrive a median %v after the fake wrote them", te.firstLag)
	}
	if !within(te.lag, 0) {
		t.Errorf("token events arrive a median %v after the fake wrote them", te.lag)
	}
	t.Logf("median lag of arrivals behind the fake's writes: first %v, all %v; request forwarding to the engine: median %v",
		te.firstLag, te.lag, te.forward)
}

// BenchmarkTimingAccuracy reports how far the proxy's stamps are from the
// fake's ledger (TestTimingMatchesLedger's figures): on an idle machine
// first events lag a median of tens of µs.
func BenchmarkTimingAccuracy(b *testing.B) {
	var first, all, tbtErr, short []time.Duration
	for i := 0; i < b.N; i++ {
		te := timingAgainstLedger(b)
		first, all, short = append(first, te.firstLag), append(all, te.lag), append(short, te.ttftShort)
		tbtErr = append(tbtErr, max(te.tbt-te.tbtTruth, te.tbtTruth-te.tbt))
	}
	b.ReportMetric(float64(median(first).Microseconds()), "first_lag_p50_us")
	b.ReportMetric(float64(median(all).Microseconds()), "lag_p50_us")
	b.ReportMetric(float64(median(tbtErr).Microseconds()), "tbt_err_us")
	b.ReportMetric(float64(median(short).Microseconds()), "ttft_short_max_us")
	b.ReportMetric(0, "ns/op")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return sum / time.Duration(len(d))
}

func TestEngineUnreachableIs502(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	h := startProxy(t, "http://"+addr, nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/models"} {
		resp, body, err := do(t, "POST", h.url+path, chatBody("m", 5, true, ""))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 502 {
			t.Fatalf("%s: status %d, want 502", path, resp.StatusCode)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Code != 502 {
			t.Fatalf("%s: body is not an OpenAI error: %s", path, body)
		}
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.Connect || r.Blame != record.BlameEngine {
		t.Fatalf("record %q blame %q, want connect_error/engine", r.Outcome, r.Blame)
	}
}

// rawRequest sends one POST over a fresh raw connection and returns it,
// for the caller to read the answer from.
func rawRequest(t *testing.T, addr, path, body string, hdr ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, requestText(addr, path, body, hdr...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSentIsWhenTheRequestArrived pipelines two requests in one write:
// fasthttp runs the second's handler only once the first's answer is done
// (150 ms on), yet both reached the proxy together, and Sent says so. It
// is the kernel's stamp of the request's arrival, not the handler's start.
func TestSentIsWhenTheRequestArrived(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	for _, tokens := range []int{20, 1} {
		body := chatBody(e.Model().Name, tokens, false, "")
		fmt.Fprintf(&b, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, c)
	recs := h.waitRecords(t, 2)
	first, second := recs[0], recs[1]
	if first.Outcome != record.OK || second.Outcome != record.OK || first.MaxTokens != 20 {
		t.Fatalf("records %s (%d tokens asked) and %s", first.Outcome, first.MaxTokens, second.Outcome)
	}
	if took := first.End - first.Sent; took < 100*time.Millisecond {
		t.Fatalf("the first request took %v, too short to tell", took)
	}
	// Stamped by their arrival, both are (near) equal; stamped by the
	// handler's start, the second's is the first's whole duration later.
	// Half that tells the two apart however slow the machine is.
	if d, took := second.Sent-first.Sent, first.End-first.Sent; d < 0 || d > took/2 {
		t.Errorf("the second request's Sent is %v after the first's; both arrived together (the first took %v)", d, took)
	}
}

func TestEngineDiesMidStream(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel(), fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), nil)
	req, _ := http.NewRequest("POST", h.url+"/v1/chat/completions", strings.NewReader(chatBody(e.Model().Name, 50, true, "")))
	req.Header.Set(fixtures.FaultHeader, "cut=5")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("client read the cut stream to a clean end; want an error so it knows the stream broke:\n%s", body)
	}
	if n := strings.Count(string(body), `"content":"`); n < 5 || bytes.Contains(body, []byte("[DONE]")) {
		t.Fatalf("client got %d content events (want the 5 sent, no [DONE]):\n%s", n, body)
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.Broken || r.Blame != record.BlameEngine || r.Events() != 5 {
		t.Fatalf("record %q blame %q events %d, want broken_stream/engine/5", r.Outcome, r.Blame, r.Events())
	}
}

// TestClientLeaves checks that the engine's request ends at once when the
// client closes its connection (within 100 ms on an idle machine, which the
// log shows), not when it would have ended by itself: during a long prefill
// (streaming: the engine already sent headers; non-streaming: it has not)
// and mid-stream. Those would end 20 s and over 35 s on, so the bound is set
// between, far from both: a busy machine's late wake-ups cannot fail it.
func TestClientLeaves(t *testing.T) {
	const bound = 5 * time.Second
	m := fixtures.DefaultModel()
	m.PrefillTokPerSec, m.PrefillSlowdown = 200, 0 // 4,000 tokens: a 20 s prefill
	e := fixtures.StartTest(t, m, fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), nil)
	long := strings.Repeat("word ", 4000)
	tests := []struct {
		name   string
		body   string
		wait   time.Duration
		reader bool // read the response while waiting
	}{
		{"streaming, during prefill", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":10,"stream":true}`, m.Name, long), 300 * time.Millisecond, false},
		{"not streaming, during prefill", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":10}`, m.Name, long+" again"), 300 * time.Millisecond, false},
		{"mid-stream", chatBody(m.Name, 6000, true, ""), 300 * time.Millisecond, true}, // 6,000 tokens about 6 ms apart
		// Gone before the watch starts (watchAfter): the watch finds the
		// FIN waiting when it does.
		{"not streaming, gone at once", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":10}`, m.Name, long+" once more"), 0, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.ResetLedger()
			c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", tt.body)
			if tt.reader {
				go func() { _, _ = io.Copy(io.Discard, c) }()
			}
			time.Sleep(tt.wait)
			closed := time.Now()
			c.Close()
			var le fixtures.LedgerEntry
			deadline := time.Now().Add(time.Minute)
			for {
				if l := e.Ledger(); len(l) == 1 && !l[0].End.IsZero() {
					le = l[0]
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the engine's request did not end after the client left")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if le.Outcome != fixtures.OutcomeCancelled {
				t.Fatalf("ledger outcome %q (%s), want cancelled", le.Outcome, le.Error)
			}
			t.Logf("engine request ended %v after the client left", le.End.Sub(closed))
			if d := le.End.Sub(closed); d > bound {
				t.Fatalf("the engine's request ended %v after the client left, want at once", d)
			}
			r := h.waitRecords(t, i+1)[i]
			if r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
				t.Fatalf("record %q blame %q (%s), want cancelled/client", r.Outcome, r.Blame, r.Error)
			}
		})
	}
}

// echo is a plain upstream that reports what it received.
func echo(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-URI", r.URL.RequestURI())
		w.Header().Set("X-Len", fmt.Sprint(len(body)))
		w.Header().Set("X-Sum", fmt.Sprintf("%x", sum))
		w.Header().Set("X-Got-Headers", strings.Join(sortedKeys(r.Header), ","))
		w.Header().Set("X-Auth", r.Header.Get("Authorization"))
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Upstream", "yes")
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func sortedKeys(h http.Header) []string {
	var ks []string
	for k := range h {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestPassThroughMethodsHeadersAndBigBodies(t *testing.T) {
	up := echo(t)
	h := startProxy(t, up.URL, nil)
	big := strings.Repeat("0123456789abcdef", 40<<20/16) // 40 MiB
	tests := []struct {
		method, path, body string
	}{
		{"GET", "/v1/models?x=1&y=%20z", ""},
		{"PUT", "/anything/else", "payload"},
		{"DELETE", "/v1/files/abc", ""},
		{"PATCH", "/p", "{}"},
		{"POST", "/tokenize", big},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body, err := do(t, tt.method, h.url+tt.path, tt.body,
				"Authorization", "Bearer sk-xyz", "Connection", "keep-alive, X-Hop", "X-Hop", "1", "X-End", "2", "Te", "trailers")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("status %d body %q", resp.StatusCode, body)
			}
			if g := resp.Header.Get("X-Method"); g != tt.method {
				t.Errorf("method %q", g)
			}
			if g := resp.Header.Get("X-URI"); g != tt.path {
				t.Errorf("uri %q, want %q", g, tt.path)
			}
			sum := sha256.Sum256([]byte(tt.body))
			if resp.Header.Get("X-Sum") != fmt.Sprintf("%x", sum) {
				t.Errorf("body changed on the way: %s bytes arrived of %d", resp.Header.Get("X-Len"), len(tt.body))
			}
			got := resp.Header.Get("X-Got-Headers")
			for _, hop := range []string{"X-Hop", "Te", "Connection"} {
				if strings.Contains(","+got+",", ","+hop+",") {
					t.Errorf("hop-by-hop header %s reached the engine (%s)", hop, got)
				}
			}
			if !strings.Contains(got, "X-End") || resp.Header.Get("X-Auth") != "Bearer sk-xyz" {
				t.Errorf("end-to-end headers lost: %s, auth %q", got, resp.Header.Get("X-Auth"))
			}
			if resp.Header.Get("Server") != "" {
				t.Errorf("the proxy added a Server header %q the engine did not send", resp.Header.Get("Server"))
			}
			if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Upstream") != "yes" {
				t.Errorf("response headers: keep-alive %q, x-upstream %q", resp.Header.Get("Keep-Alive"), resp.Header.Get("X-Upstream"))
			}
		})
	}
	resp, err := client.Head(h.url + "/v1/models")
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Method") != "HEAD" || resp.ContentLength != 2 {
		t.Fatalf("HEAD: %v %+v", err, resp)
	}
	resp.Body.Close()
	if n := h.p.hc.ConnsCount(); n > 2 {
		t.Errorf("%d upstream connections for sequential requests: keep-alive is not reused", n)
	}
}

// TestStreamingFlushesEachRead checks that each upstream event reaches the
// client when it is sent, not when a buffer fills, and that a stream longer
// than the idle timeout is fine as long as bytes keep coming.
//
// The engine sends its next event only once the client has the last one
// (or 30 s on, when it never came: a proxy that buffers), so the check
// waits for events rather than timing them against an idle machine; and
// the idle timeout (2 s) is far above the gaps (40 ms and a hop through
// the proxy), so a busy machine's late timers cannot cut the stream.
func TestStreamingFlushesEachRead(t *testing.T) {
	const events, gap, idle, never = 70, 40 * time.Millisecond, 2 * time.Second, 30 * time.Second
	got := make(chan int, events)
	stuck := make(chan int, 1) // the event the client did not get
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fl := w.(http.Flusher)
		for i := range events {
			fmt.Fprintf(w, "data: %d\n\n", i)
			fl.Flush()
			select {
			case <-got:
			case <-time.After(never):
				stuck <- i
				return
			}
			time.Sleep(gap)
		}
	}))
	t.Cleanup(up.Close)
	h := startProxy(t, up.URL, func(c *Config) { c.IdleTimeout = idle })
	resp, err := client.Get(h.url + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	start := time.Now()
	var lines int
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			lines++
			got <- lines
		}
	}
	select {
	case i := <-stuck:
		t.Fatalf("event %d did not reach the client in %v: the proxy held it back", i, never)
	default:
	}
	if lines != events {
		t.Fatalf("got %d events, want %d", lines, events)
	}
	if took, least := time.Since(start), (events-1)*gap; took < least {
		t.Fatalf("stream finished in %v, under the %v its engine paced it over", took, least)
	}
	if took := time.Since(start); took <= idle {
		t.Fatalf("stream finished in %v, no longer than the %v idle timeout it is to outlast", took, idle)
	}
}

func TestIdleTimeout(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel(), fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), func(c *Config) { c.IdleTimeout = time.Second })
	// A stream lasting longer than the idle timeout, bytes all along: fine.
	_, body, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 250, true, ""))
	if err != nil || !bytes.Contains(body, []byte("[DONE]")) {
		t.Fatalf("a long but lively stream was cut: %v", err)
	}
	// A stall longer than the idle timeout: cut, and said so.
	_, _, err = do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 20, true, ""), fixtures.FaultHeader, "stall=5s@3")
	if err == nil {
		t.Fatal("a stalled stream ended cleanly for the client")
	}
	recs := h.waitRecords(t, 2)
	if recs[0].Outcome != record.OK {
		t.Errorf("long stream: %q %s", recs[0].Outcome, recs[0].Error)
	}
	if recs[1].Outcome != record.Timeout || recs[1].Blame != record.BlameEngine {
		t.Errorf("stalled stream: %q/%q (%s), want timeout/engine", recs[1].Outcome, recs[1].Blame, recs[1].Error)
	}
}

func TestMetricsStatsAndCapture(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	var capture bytes.Buffer
	var capMu sync.Mutex
	h := startProxy(t, e.URL(), func(c *Config) { c.Capture = &lockedWriter{w: &capture, mu: &capMu} })
	model := e.Model().Name
	for i := 0; i < 3; i++ {
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 10, true, ""), "Authorization", "Bearer sk-topsecret")
	}
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody("no-such-model", 10, true, ""))
	h.waitRecords(t, 4)

	resp, body, err := do(t, "GET", h.admin+"/metrics", "")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %v", err)
	}
	m := string(body)
	for _, want := range []string{
		`tokentap_time_to_first_token_seconds_bucket{model="fake-4b",le="+Inf"} 3`,
		`tokentap_time_between_tokens_seconds_count{model="fake-4b"} 27`,
		`tokentap_request_duration_seconds_count{model="fake-4b"} 3`,
		`tokentap_output_tokens_sum{model="fake-4b"} 30`,
		`tokentap_prompt_tokens_count{model="fake-4b"} 3`,
		`tokentap_requests_total{blame="none",model="fake-4b",outcome="ok"} 3`,
		`tokentap_requests_total{blame="client",model="no-such-model",outcome="http_error"} 1`, // a 404: the client named no model the engine has
		"tokentap_requests_in_flight 0",
		"# TYPE tokentap_time_between_tokens_seconds histogram",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(m, "sk-topsecret") {
		t.Fatal("a secret reached /metrics")
	}

	var st Stats
	_, body, _ = do(t, "GET", h.admin+"/stats", "")
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	ms := st.Models[model]
	if ms == nil || ms.Requests != 3 || ms.TTFT == nil || ms.TTFT.Count != 3 || ms.TBT.P50 <= 0 || ms.OutputTokens != 30 {
		t.Fatalf("/stats: %s", body)
	}
	_, _, _ = do(t, "POST", h.admin+"/stats", "", ResetHeader, "1")
	_, body, _ = do(t, "GET", h.admin+"/stats", "")
	st = Stats{}
	_ = json.Unmarshal(body, &st)
	if len(st.Models) != 0 {
		t.Fatalf("after POST /stats: %s", body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	capMu.Lock()
	defer capMu.Unlock()
	if strings.Contains(capture.String(), "sk-topsecret") || strings.Contains(capture.String(), "hello there") {
		t.Fatal("capture holds a secret or prompt text without --capture-prompts")
	}
	recs, err := record.ReadAll(&capture)
	if err != nil || len(recs) != 4 {
		t.Fatalf("capture: %d records, %v", len(recs), err)
	}
}

// TestModelLabelLimited: once the proxy knows the engine's models, the
// model label (and /stats) holds only those and "other": a client naming
// 150 models it invented adds one series, not 150. A client's unknown
// model is its own fault (blame="client").
func TestModelLabelLimited(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids, err := h.p.WatchModels(ctx, time.Hour)
	if err != nil || len(ids) != 1 || ids[0] != e.Model().Name {
		t.Fatalf("WatchModels = %v, %v; want the fake's one model", ids, err)
	}
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 3, true, ""))
	for i := range 150 {
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(fmt.Sprintf("invented-%d", i), 3, true, ""))
	}
	h.waitRecords(t, 151)
	_, body, err := do(t, "GET", h.admin+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`model="([^"]*)"`).FindAllStringSubmatch(string(body), -1) {
		labels[m[1]] = true
	}
	if len(labels) != 2 || !labels[e.Model().Name] || !labels["other"] {
		t.Errorf("model labels %v; want only the engine's model and other", labels)
	}
	if !strings.Contains(string(body), `tokentap_requests_total{blame="client",model="other",outcome="http_error"} 150`) {
		t.Errorf("the invented models' 404s are not counted under other, blamed on the client:\n%s", body)
	}
	st := h.p.Stats(false)
	if len(st.Models) != 2 || st.Models["other"] == nil || st.Models["other"].Requests != 150 {
		t.Errorf("/stats models %v", st.Models)
	}
}

// TestModelNames: a listed model is its own label, a tagless name matches
// the engine's name:latest (Ollama), anything else is other and asks for
// a fresh list; before any list, names pass as sent.
func TestModelNames(t *testing.T) {
	n := newModelNames()
	if l, ok := n.label("x"); l != "x" || ok {
		t.Errorf("before a list: %q %v", l, ok)
	}
	n.set([]string{"qwen", "tiny:latest"})
	for in, want := range map[string]string{"qwen": "qwen", "tiny": "tiny:latest", "tiny:latest": "tiny:latest", "tiny:1b": "other", "gpt-4": "other"} {
		if l, _ := n.label(in); l != want {
			t.Errorf("label(%q) = %q, want %q", in, l, want)
		}
	}
	select {
	case <-n.missed:
	default:
		t.Error("an unlisted model did not ask for a fresh list")
	}
}

func TestCapturePrompts(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), func(c *Config) { c.CapturePrompts = true })
	body := chatBody(e.Model().Name, 3, true, "")
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", body)
	r := h.waitRecords(t, 1)[0]
	if string(r.Request) != body {
		t.Fatalf("captured request %q, want the client's body", r.Request)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// failTapAt makes the tap panic on its n-th piece for the rest of the test.
func failTapAt(t *testing.T, n int) {
	calls := 0
	testForwardHook = func() {
		calls++
		if calls == n {
			panic("boom")
		}
	}
	t.Cleanup(func() { testForwardHook = nil })
}

// TestMeasurementFailureKeepsStream makes the tap panic mid-stream: the
// client still gets every byte, the failure is counted.
func TestMeasurementFailureKeepsStream(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), func(c *Config) { c.NoInject = true })
	failTapAt(t, 3)
	body := chatBody(e.Model().Name, 20, true, "")
	_, direct, _ := do(t, "POST", e.URL()+"/v1/chat/completions", body)
	_, via, err := do(t, "POST", h.url+"/v1/chat/completions", body)
	if err != nil || normalize(direct) != normalize(via) {
		t.Fatalf("stream changed by a measurement failure: %v\n%s", err, via)
	}
	r := h.waitRecords(t, 1)[0]
	if r.Blame != record.BlameTokentap || h.p.m.measErrs.Load() != 1 {
		t.Fatalf("record blame %q, %d measurement errors", r.Blame, h.p.m.measErrs.Load())
	}
}

func TestUpstreamPathPrefix(t *testing.T) {
	up := echo(t)
	tests := []struct{ upstream, path, want string }{
		{up.URL, "/v1/models", "/v1/models"},
		{up.URL + "/", "/v1/models", "/v1/models"},
		{up.URL + "/v1", "/v1/models?a=b", "/v1/models?a=b"}, // OPENAI_BASE_URL style
		{up.URL + "/gateway/", "/v1/models", "/gateway/v1/models"},
	}
	for _, tt := range tests {
		h := startProxy(t, tt.upstream, nil)
		resp, _, err := do(t, "GET", h.url+tt.path, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-URI"); got != tt.want {
			t.Errorf("upstream %s, path %s: engine got %s, want %s", tt.upstream, tt.path, got, tt.want)
		}
	}
}

// TestStreamHeadersBeforeFirstToken checks that a stream's response headers
// reach the client when the engine sends them (before a long prefill), not
// with the first token.
func TestStreamHeadersBeforeFirstToken(t *testing.T) {
	m := fixtures.DefaultModel()
	m.PrefillTokPerSec, m.PrefillSlowdown = 2000, 0
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":2,"stream":true}`, m.Name, strings.Repeat("word ", 2000))
	start := time.Now()
	req, _ := http.NewRequest("POST", h.url+"/v1/chat/completions", strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	headers := time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	total := time.Since(start)
	if total < 900*time.Millisecond || headers > total/2 {
		t.Fatalf("headers after %v, stream done after %v: headers waited for the prefill", headers, total)
	}
}

// TestBigEventsPassWhole streams events far larger than any read buffer
// (a 3 MiB event, as a long tool-call argument or a huge delta can be)
// through the usage-stripping path: the client gets every byte.
func TestBigEventsPassWhole(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	var sent bytes.Buffer
	fmt.Fprintf(&sent, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", big)
	sent.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"end\"},\"finish_reason\":\"length\"}]}\n\n")
	usage := "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		b := sent.Bytes()
		for len(b) > 0 { // odd pieces, flushed one by one
			n := min(len(b), 65537)
			_, _ = w.Write(b[:n])
			fl.Flush()
			b = b[n:]
		}
		if bytes.Contains(body, []byte(`"include_usage":true`)) {
			_, _ = io.WriteString(w, usage)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := startProxy(t, up.URL, nil)
	_, via, err := do(t, "POST", h.url+"/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := sent.String() + "data: [DONE]\n\n"; string(via) != want {
		t.Fatalf("client got %d bytes, want the engine's %d without the usage chunk", len(via), len(want))
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.OK || r.Events() != 2 || r.CompletionTokens != 2 || r.CompletionSource != record.SourceUsage {
		t.Fatalf("record %q, %d events, %d tokens from %q (%s)", r.Outcome, r.Events(), r.CompletionTokens, r.CompletionSource, r.Error)
	}
}

// TestFragmentedUpstreamStream has a raw engine send a chunked stream in
// fragments split inside chunk-size lines, data and CRLFs, pausing between
// them: the proxy, which waits for readiness edges between reads, must
// pass every byte on, each fragment as it comes.
func TestFragmentedUpstreamStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	events := []string{"data: one\n\n", "data: two, longer\n\n", "data: [DONE]\n\n"}
	var wire []byte
	for _, e := range events {
		wire = fmt.Appendf(wire, "%x\r\n%s\r\n", len(e), e)
	}
	wire = append(wire, "0\r\n\r\n"...)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for { // the request's headers
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := 0; i < len(wire); i += 3 { // 3 bytes at a time: every boundary gets split
			time.Sleep(2 * time.Millisecond)
			if _, err := c.Write(wire[i:min(i+3, len(wire))]); err != nil {
				return
			}
		}
	}()
	h := startProxy(t, "http://"+ln.Addr().String(), nil)
	resp, body, err := do(t, "GET", h.url+"/events", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(events, ""); resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
}

// TestEngineClosesRightAfterData has a raw engine send a piece of a
// chunked body and close the connection at once, many times: the FIN
// comes in on the heels of the data, where its readiness edge can merge
// with the data's. Every stream must still end (cut, for the client) long
// before the idle timeout.
func TestEngineClosesRightAfterData(t *testing.T) {
	url := sseEngine(t, func(w func(string), _ io.Writer) {
		time.Sleep(time.Millisecond)
		w("data: one\n\n") // then the engine's close: FIN right behind
	})
	h := startProxy(t, url, func(c *Config) { c.IdleTimeout = time.Minute })
	for i := 0; i < 40; i++ {
		start := time.Now()
		_, body, err := do(t, "GET", h.url+"/events", "")
		if err == nil {
			t.Fatalf("stream %d: a cut stream ended cleanly for the client: %q", i, body)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("stream %d: the engine's close was noticed after %v, not within the idle timeout's fraction", i, d)
		}
	}
}

// TestSlowClient has one client stop reading a fast engine's 16 MiB stream
// until another has streamed 20 events 10 ms apart through the same proxy:
// the slow one gets every byte, in order, and the other's events are not
// held up behind it (the event loop that passes both bodies
// on never waits for a client; the handler's goroutine takes over the slow
// one's backlog).
func TestSlowClient(t *testing.T) {
	event := func(i int, pad string) string {
		return fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d%s\"}}]}\n\n", i, pad)
	}
	var big strings.Builder
	for i := 0; big.Len() < 16<<20; i++ {
		big.WriteString(event(i, strings.Repeat("x", 4000)))
	}
	big.WriteString("data: [DONE]\n\n")
	written := make(chan time.Time, 20) // when the engine wrote each of the other stream's events
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		if r.Header.Get("X-Kind") == "big" {
			io.WriteString(w, big.String())
			fl.Flush()
			return
		}
		for i := 0; i < 20; i++ {
			time.Sleep(10 * time.Millisecond)
			at := time.Now()
			io.WriteString(w, event(i, ""))
			fl.Flush()
			written <- at
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := startProxy(t, up.URL, func(c *Config) { c.NoInject = true })

	slow := make(chan error, 1)
	otherDone, heldUp := make(chan struct{}), make(chan bool, 1)
	go func() {
		req, _ := http.NewRequest("POST", h.url+"/v1/chat/completions", strings.NewReader(chatBody("m", 10, true, "")))
		req.Header.Set("X-Kind", "big")
		// A small receive buffer, so the proxy's backlog builds at once.
		d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
		}}
		slowClient := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		resp, err := slowClient.Do(req)
		if err != nil {
			slow <- err
			return
		}
		defer resp.Body.Close()
		var got bytes.Buffer
		buf := make([]byte, 256<<10)
		for i := 0; ; i++ {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				slow <- err
				return
			}
			if i == 0 {
				// Stalled until the other stream is over. Were it held up
				// behind this one, it would never be: the cap says so.
				select {
				case <-otherDone:
				case <-time.After(30 * time.Second):
					heldUp <- true
				}
			}
		}
		if got.String() != big.String() {
			slow <- fmt.Errorf("the slow client got %d bytes, not the engine's %d as sent", got.Len(), big.Len())
			return
		}
		slow <- nil
	}()
	time.Sleep(200 * time.Millisecond) // the slow client's backlog is building
	resp, err := client.Post(h.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", 20, true, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	var late time.Duration
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			events++
			// Measured from each event's write, not from a schedule a busy
			// machine's oversleeping engine would not keep.
			late = max(late, time.Since(<-written))
		}
	}
	close(otherDone)
	if events != 20 {
		t.Fatalf("the other client got %d events, want 20", events)
	}
	// Whether the other stream got through while the slow client stalled
	// is the check: how late its events came depends on the machine (up
	// to 1.8 s in a make test beside chromium and other race tests, when
	// this was a 1 s bound against a 2 s stall), so it is only logged.
	t.Logf("the other client's events came at most %v after the engine wrote them", late)
	select {
	case <-heldUp:
		t.Errorf("the other client's stream did not end in 30 s while the slow client stalled: held up behind it")
	default:
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// sseEngine is a raw engine that answers every request with a chunked SSE
// response whose body is written by send (tokentap's framing only: the
// bytes given become chunks as written).
func sseEngine(t testing.TB, send func(w func(string), raw io.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				n := 0
				for { // the request's headers, then its body
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
				io.CopyN(io.Discard, br, int64(n))
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				send(func(s string) { fmt.Fprintf(c, "%x\r\n%s\r\n", len(s), s) }, c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestClientStallsAtTheEnd has a client stop reading while the last of a
// short answer (a 60 KB chat completion, not streamed) is still queued in
// the proxy: the engine is done, but the client never got it all, and the
// record must say so (the client's), not ok.
func TestClientStallsAtTheEnd(t *testing.T) {
	answer := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 60<<10) + `"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":10,"total_tokens":13}}`
	url := sseEngine(t, func(_ func(string), raw io.Writer) {
		time.Sleep(50 * time.Millisecond) // after the head: the event loop reads the answer
		var wire []byte
		for i := 0; i < len(answer); i += 600 {
			wire = fmt.Appendf(wire, "%x\r\n%s\r\n", min(600, len(answer)-i), answer[i:min(i+600, len(answer))])
		}
		raw.Write(append(wire, "0\r\n\r\n"...)) // in one write, so the proxy reads it in one go
	})
	recs := make(chan record.Record, 1)
	p, err := New(Config{Upstream: url, Logger: zerolog.Nop(), IdleTimeout: time.Second, NoInject: true,
		OnRecord: func(r *record.Record) { recs <- *r }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Serve(smallSendBuffers{ln.(*net.TCPListener)}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := chatBody("m", 10, false, "")
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
	// The client reads nothing.
	var r record.Record
	select {
	case r = <-recs:
	case <-time.After(10 * time.Second):
		t.Fatal("no record")
	}
	if r.Outcome == record.OK || r.Blame != record.BlameClient {
		t.Fatalf("record %q blamed on %q (%s): the client never got the stream's end", r.Outcome, r.Blame, r.Error)
	}
}

// smallSendBuffers accepts connections with 4 KiB send buffers, so a
// client that stops reading leaves bytes queued in the proxy at once.
type smallSendBuffers struct{ *net.TCPListener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.TCPListener.AcceptTCP()
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteBuffer(4 << 10)
	return c, nil
}

// TestEngineStallsMidEvent has the engine send one event and part of the
// next, then go silent: at the idle timeout the client gets what the
// engine sent, the partial event too (the tap held it back to strip usage),
// and the record says the engine timed out.
func TestEngineStallsMidEvent(t *testing.T) {
	first := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
	part := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"ind"
	url := sseEngine(t, func(w func(string), _ io.Writer) {
		w(first)
		w(part)
		time.Sleep(3 * time.Second)
	})
	h := startProxy(t, url, func(c *Config) { c.IdleTimeout = time.Second })
	_, got, _ := do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 10, true, ""))
	if string(got) != first+part {
		t.Fatalf("client got %q, want the engine's %q", got, first+part)
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.Timeout || r.Blame != record.BlameEngine {
		t.Fatalf("record %q blamed on %q (%s), want a timeout, the engine's", r.Outcome, r.Blame, r.Error)
	}
}

// TestMeasurementFailureKeepsHeldBytes makes the tap fail while it holds
// back part of an event (usage stripping on, the engine's bytes arriving a
// few at a time): the client still gets every byte, in order.
func TestMeasurementFailureKeepsHeldBytes(t *testing.T) {
	var wire strings.Builder
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&wire, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	}
	wire.WriteString("data: [DONE]\n\n")
	url := sseEngine(t, func(w func(string), _ io.Writer) {
		s := wire.String()
		for i := 0; i < len(s); i += 40 {
			w(s[i:min(i+40, len(s))])
			time.Sleep(5 * time.Millisecond)
		}
		w("")
	})
	h := startProxy(t, url, nil)
	failTapAt(t, 3)
	_, got, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody("m", 10, true, ""))
	if err != nil || string(got) != wire.String() {
		t.Fatalf("client got %q (%v), want the engine's %q", got, err, wire.String())
	}
	if r := h.waitRecords(t, 1)[0]; r.Blame != record.BlameTokentap {
		t.Fatalf("record blamed on %q, want tokentap's", r.Blame)
	}
}
