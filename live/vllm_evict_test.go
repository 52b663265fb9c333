//go:build live

package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// How vLLM 0.32.0 evicts from its prefix cache (vllm/v1/core/block_pool.py
// BlockPool, vllm/v1/core/single_type_kv_cache_manager.py free): the cache
// is the pool's free blocks, one queue taken from its head (get_new_blocks)
// where a cached block taken loses its hash; a finished request's blocks
// go back last block first (free: reversed), cached ones to the tail
// (free_blocks: FIFO for LRU), partial ones to the head (reused first);
// one block of the pool is the null block (BlockPool.__init__), so 40
// blocks hold 39. Sent one at a time from a known state, the queue's order
// says exactly what a prompt finds. The fake's vLLM flavour keeps the same
// pool (fixtures/blockpool.go), tested with these cases over loopback
// (TestVLLMBlockPoolEviction).

// vllmSeeds makes every prompt of the eviction checks one no other
// request sent.
var vllmSeeds atomic.Uint64

func init() { vllmSeeds.Store(70_000) }

// vllmOne sends a completion of a new prompt of n tokens (or prompt, when
// not empty) and returns its prompt and cached tokens.
func vllmOne(t *testing.T, url, prompt string, n, maxTokens int) (promptTokens, cached int) {
	t.Helper()
	p, c, err := vllmSend(url, prompt, n, maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// vllmSend is vllmOne for a goroutine that is not the test's.
func vllmSend(url, prompt string, n, maxTokens int) (promptTokens, cached int, err error) {
	if prompt == "" {
		prompt = modelCfg.Text(n, vllmSeeds.Add(1))
	}
	b, _ := json.Marshal(map[string]any{"model": vllmModel, "prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true})
	ctx, cancel := context.WithTimeout(context.Background(), requestGuard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if b, err = io.ReadAll(resp.Body); err != nil {
		return 0, 0, err
	}
	var r struct {
		Usage struct {
			Prompt  int `json:"prompt_tokens"`
			Details *struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); resp.StatusCode != 200 || err != nil || r.Usage.Details == nil {
		return 0, 0, fmt.Errorf("a completion of %d tokens: HTTP %d %s (%v)", n, resp.StatusCode, b, err)
	}
	return r.Usage.Prompt, r.Usage.Details.Cached, nil
}

// vllmFlush sends four new prompts of 15 blocks, one at a time: each takes
// 15 blocks off the free queue's head and, all full and cached, gives them
// back to its tail, so the 60 taken pass every one of the pool's 39 and
// evict whatever they cached.
func vllmFlush(url string) error {
	for range 4 {
		p, _, err := vllmSend(url, "", 15*vllmBlock, 1)
		if err == nil && p != 15*vllmBlock {
			err = fmt.Errorf("a flush prompt of %d tokens counted %d", 15*vllmBlock, p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// vllmEvictionOrder: after a flush, prompt A (8 blocks) goes to the free
// queue's tail behind the flush's 31 other blocks; what passes between A
// and A again decides what A finds: the same cases and counts as the
// fake's TestVLLMBlockPoolEviction.
func vllmEvictionOrder(t *testing.T, in *engines.Info, url string) {
	type step struct{ prompt, maxTokens int }
	for _, tt := range []struct {
		name    string
		between []step
		cached  int
	}{
		{"nothing between", nil, 896},
		{"3 × 15 blocks", []step{{1920, 1}, {1920, 1}, {1920, 1}}, 0},
		{"33 blocks: A's last 2 go", []step{{1920, 1}, {1920, 1}, {384, 1}}, 768},
		{"2 outputs of 1,900 tokens", []step{{128, 1900}, {128, 1900}}, 896},
		{"3 outputs of 1,900 tokens", []step{{128, 1900}, {128, 1900}, {128, 1900}}, 0},
	} {
		if err := vllmFlush(url); err != nil {
			t.Fatal(err)
		}
		a := modelCfg.Text(1024, vllmSeeds.Add(1))
		if _, c := vllmOne(t, url, a, 0, 1); c != 0 {
			t.Fatalf("%s: A found %d tokens cached cold", tt.name, c)
		}
		for _, s := range tt.between {
			vllmOne(t, url, "", s.prompt, s.maxTokens)
		}
		h0, q0, _, _ := in.PrefixCache(context.Background())
		_, c := vllmOne(t, url, a, 0, 1)
		h1, q1, _, _ := in.PrefixCache(context.Background())
		t.Logf("%s: A again found %d of 1024 tokens; vLLM's counters +%d queries, +%d hits", tt.name, c, q1-q0, h1-h0)
		if c != tt.cached || q1-q0 != 1024 || h1-h0 != int64(tt.cached) {
			t.Errorf("%s: A again found %d tokens, counters +%d queries +%d hits; want %d, 1024 and %d", tt.name, c, q1-q0, h1-h0, tt.cached, tt.cached)
		}
	}
}

// evictor stands between the matrix and vLLM as other tenants' traffic
// would, at the one moment that makes it certain: it holds back the
// answer to the cell's warm-up (the second request of max_tokens 1 and a
// long prompt; the first is the row's cold prefill; the probe's short one
// counts a chat's template tokens) until it has flushed vLLM's prefix
// cache (vllmFlush), so the window's first request finds its warmed
// prompt gone. vLLM's own counters bracket that request: read after the
// flush and after its answer, the window's later requests held back
// meanwhile (the cell has one stream, so nothing else runs).
type evictor struct {
	upstream string
	rp       *httputil.ReverseProxy
	in       *engines.Info
	url      string

	mu             sync.Mutex
	warmups, sends int
	warmHits       int64 // the cell's warm-up: vLLM's hits growth
	h0, q0, h1, q1 int64 // vLLM's counters after the flush, after the window's first request
	first          chan struct{}
	err            error // the flush's
}

func startEvictor(t *testing.T, upstream string) *evictor {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ev := &evictor{upstream: upstream, rp: httputil.NewSingleHostReverseProxy(u), first: make(chan struct{})}
	ev.rp.FlushInterval = -1
	ev.in, err = engines.Probe(context.Background(), engines.Target{BaseURL: upstream})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ev}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ev.url = "http://" + ln.Addr().String()
	return ev
}

func (ev *evictor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/v1/completions") {
		ev.rp.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		MaxTokens int `json:"max_tokens"`
	}
	_ = json.Unmarshal(body, &req)
	if req.MaxTokens == 1 && len(body) < 1000 {
		ev.rp.ServeHTTP(w, r) // the probe's count of a chat's template tokens
		return
	}
	ev.mu.Lock()
	warm, n := req.MaxTokens == 1, 0
	if warm {
		ev.warmups++
		n = ev.warmups
	} else {
		ev.sends++
		n = ev.sends
	}
	ev.mu.Unlock()
	ctx := context.Background()
	switch {
	case warm && n == 2:
		// The cell's warm-up: answered in full, held, the cache flushed,
		// then passed on.
		h, _, _, _ := ev.in.PrefixCache(ctx)
		rec := &heldResponse{header: http.Header{}}
		ev.rp.ServeHTTP(rec, r)
		hw, _, _, _ := ev.in.PrefixCache(ctx)
		err := vllmFlush(ev.upstream)
		h0, q0, _, _ := ev.in.PrefixCache(ctx)
		ev.mu.Lock()
		ev.warmHits, ev.h0, ev.q0, ev.err = hw-h, h0, q0, err
		ev.mu.Unlock()
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body.Bytes())
	case !warm && n == 1:
		ev.rp.ServeHTTP(w, r)
		h1, q1, _, _ := ev.in.PrefixCache(ctx)
		ev.mu.Lock()
		ev.h1, ev.q1 = h1, q1
		ev.mu.Unlock()
		close(ev.first)
	case !warm:
		<-ev.first
		ev.rp.ServeHTTP(w, r)
	default:
		ev.rp.ServeHTTP(w, r)
	}
}

// heldResponse keeps a whole answer to pass on later.
type heldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header         { return h.header }
func (h *heldResponse) Write(b []byte) (int, error) { return h.body.Write(b) }
func (h *heldResponse) WriteHeader(s int)           { h.status = s }

// vllmCacheMissed runs a one-cell matrix (1K × 1) through the evictor:
// the cell warms its prompt (vLLM finds its whole blocks before its last
// token: the row's first request cached it), the flush evicts it, and the window's first request
// finds nothing cached: by its usage, and by vLLM's counters (+prompt
// tokens queried, +0 hits over that request alone). The cell is Cache
// missed, its TTFT marked so; the window's later requests found the
// prompt again (the first one cached it anew).
func vllmCacheMissed(t *testing.T, url string) {
	ev := startEvictor(t, url)
	sc := scenarios.Scenario{Name: "live-vllm-evicted", Contexts: []int{1024}, Concurrency: []int{1}, Window: 4 * time.Second, MaxOutput: 64, API: "chat"}
	var (
		mu   sync.Mutex
		recs []record.Record
	)
	res, err := matrix.Run(context.Background(), matrix.Config{Target: replay.Target{BaseURL: ev.url, IdleTimeout: idle}, Scenario: sc, FinishRequests: true,
		OnRecords: func(r []record.Record) { mu.Lock(); recs = append(recs, r...); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	logMatrix(t, res)
	c := res.Decode[0]
	var window []record.Record
	for _, r := range recs {
		if r.Tag == "C=1024 N=1" {
			window = append(window, r)
		}
	}
	sort.Slice(window, func(i, j int) bool { return window[i].Sent < window[j].Sent })
	ev.mu.Lock()
	defer ev.mu.Unlock()
	t.Logf("warm-ups %d (the cell's found %d tokens cached), window requests %d; the window's first request: vLLM's counters +%d queries, +%d hits",
		ev.warmups, ev.warmHits, ev.sends, ev.q1-ev.q0, ev.h1-ev.h0)
	if ev.err != nil {
		t.Fatalf("flushing vLLM's prefix cache: %v", ev.err)
	}
	// The prompt is 1K as the matrix builds it (within METHOD §4's
	// tolerance of the count: 1,023 and 1,026 seen), several blocks. The
	// window holds what the machine gets done in 4 s: one request on 2
	// busy cores (15.8 tok/s), so the later requests are checked where
	// there are any.
	if len(window) < 1 {
		t.Fatal("no window request")
	}
	if window[0].PromptTokens < 4*vllmBlock {
		t.Fatalf("%d window requests; the first with %d prompt tokens", len(window), window[0].PromptTokens)
	}
	first := window[0]
	if whole := int64(first.PromptTokens-1) / vllmBlock * vllmBlock; ev.warmups != 2 || ev.warmHits != whole {
		t.Fatalf("the evictor saw %d warm-ups, the cell's finding %d tokens cached; want 2, and %d (the prompt's whole blocks before its last token)",
			ev.warmups, ev.warmHits, whole)
	}
	if first.CachedSource != record.SourceUsage || first.CachedTokens != 0 || ev.q1-ev.q0 != int64(first.PromptTokens) || ev.h1 != ev.h0 {
		t.Errorf("the window's first request: %d of %d tokens cached (%s); vLLM's counters +%d queries +%d hits; want 0, and +%d +0",
			first.CachedTokens, first.PromptTokens, first.CachedSource, ev.q1-ev.q0, ev.h1-ev.h0, first.PromptTokens)
	}
	for _, r := range window[1:] {
		if r.CachedSource == record.SourceUsage && r.CachedTokens != (r.PromptTokens-1)/vllmBlock*vllmBlock {
			t.Errorf("a later request of the window found %d of %d tokens cached", r.CachedTokens, r.PromptTokens)
		}
	}
	if c.Status != result.CacheMissed || c.TTFTKind != result.TTFTCacheMissed || c.Cache == nil || c.Cache.Misses != 1 {
		t.Errorf("cell 1K × 1: %s (%s), TTFT %s, cache %+v; want Cache missed by 1 request", c.Status.Label(), c.Reason, c.TTFTKind, c.Cache)
	}
}

// vllmFakeNames: every metric the fake's vLLM flavour serves (METHOD
// §3's evidence among them: the waiting gauges that make Requests queued,
// the prefix-cache counters that make Cache missed, cache_config_info's
// capacity that makes Over capacity) is one vLLM 0.32 serves, with the
// same label names.
func vllmFakeNames(t *testing.T, url string) {
	fake := fixtures.StartTest(t, fixtures.Model{Name: vllmModel, MaxModelLen: vllmMaxLen, PrefillTokPerSec: 1e5, TBTBase: time.Millisecond,
		MaxRunning: vllmSeqs, KVCapacity: vllmBlocks * vllmBlock, BlockSize: vllmBlock})
	labels := func(m engines.Metrics) map[string][]string {
		out := map[string][]string{}
		for _, s := range m {
			for _, l := range s.Labels {
				if !slices.Contains(out[s.Name], l.Name) {
					out[s.Name] = append(out[s.Name], l.Name)
				}
			}
			if _, ok := out[s.Name]; !ok {
				out[s.Name] = nil
			}
		}
		return out
	}
	vl, fk := labels(scrape(t, url)), labels(scrape(t, fake.URL()))
	var names []string
	for n := range fk {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		rl, ok := vl[n]
		if !ok {
			t.Errorf("the fake serves %s; vLLM 0.32 does not", n)
			continue
		}
		for _, l := range fk[n] {
			if !slices.Contains(rl, l) {
				t.Errorf("the fake labels %s with %s; vLLM 0.32's labels are %s", n, l, strings.Join(rl, ", "))
			}
		}
	}
	t.Logf("%d metric names of the fake's vLLM flavour, each vLLM 0.32's", len(names))
}
