package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// A cell whose warmed prompt other traffic evicted before its window is
// Cache missed: the fake's vLLM flavour, with the live tier's KV cache (40
// blocks of 128; live/vllm_evict_test.go runs the same on vLLM 0.32.0),
// behind a relay that holds back the cell's warm-up answer until four
// prompts of 15 blocks have passed every block of the pool. The window's
// first request finds nothing cached, the next ones the prompt it cached
// again.
func TestEvictedPromptIsCacheMissed(t *testing.T) {
	m := fixtures.DefaultModel()
	m.KVCapacity, m.BlockSize, m.MaxModelLen, m.MaxRunning = 40*128, 128, 2048, 4
	m.PrefillTokPerSec, m.PrefillSlowdown = 200000, 0
	m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 2*time.Millisecond, 0, 0
	e := fixtures.StartTest(t, m)
	up, _ := url.Parse(e.URL())
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.FlushInterval = -1
	var (
		mu      sync.Mutex
		warmups int
		flushed error
	)
	flush := func() error {
		for i := range 4 {
			ids := make([]string, 15*128)
			for j := range ids {
				ids[j] = fmt.Sprint(1000 + (i*15*128+j)%40000)
			}
			resp, err := http.Post(e.URL()+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"`+m.Name+`","prompt":[`+strings.Join(ids, ",")+`],"max_tokens":1}`))
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("a flush prompt: HTTP %d", resp.StatusCode)
			}
		}
		return nil
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/") {
			rp.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			MaxTokens int `json:"max_tokens"`
		}
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		long := req.MaxTokens == 1 && len(body) > 1000 // not the probe's short count of a chat's template
		if long {
			warmups++
		}
		cellWarmUp := long && warmups == 2 // the first is the row's cold prefill
		mu.Unlock()
		if !cellWarmUp {
			rp.ServeHTTP(w, r)
			return
		}
		held := httptest.NewRecorder()
		rp.ServeHTTP(held, r)
		err := flush()
		mu.Lock()
		flushed = err
		mu.Unlock()
		for k, v := range held.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(held.Code)
		w.Write(held.Body.Bytes())
	}))
	t.Cleanup(relay.Close)

	sc := scenarios.Scenario{Name: "evicted", Contexts: []int{1024}, Concurrency: []int{1}, Window: time.Second, MaxOutput: 16, API: "chat"}
	var recs []record.Record
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: relay.URL}, Scenario: sc, FinishRequests: true,
		OnRecords: func(r []record.Record) { recs = append(recs, r...) }})
	if err != nil {
		t.Fatal(err)
	}
	if flushed != nil || warmups != 2 {
		t.Fatalf("%d warm-ups, flush: %v", warmups, flushed)
	}
	var window []record.Record
	for _, r := range recs {
		if r.Tag == "C=1024 N=1" {
			window = append(window, r)
		}
	}
	sort.Slice(window, func(i, j int) bool { return window[i].Sent < window[j].Sent })
	if len(window) < 2 {
		t.Fatalf("%d window requests", len(window))
	}
	if r := window[0]; r.CachedSource != record.SourceUsage || r.CachedTokens != 0 {
		t.Errorf("the window's first request found %d of %d tokens cached (%s); want none", r.CachedTokens, r.PromptTokens, r.CachedSource)
	}
	for _, r := range window[1:] {
		if r.CachedSource == record.SourceUsage && r.CachedTokens != (r.PromptTokens-1)/128*128 {
			t.Errorf("a later request found %d of %d tokens cached", r.CachedTokens, r.PromptTokens)
		}
	}
	c := res.Decode[0]
	if c.Status != result.CacheMissed || c.TTFTKind != result.TTFTCacheMissed || c.Cache == nil || c.Cache.Misses != 1 {
		t.Errorf("cell 1K × 1: %s (%s), TTFT %s, cache %+v; want Cache missed by 1 request", c.Status.Label(), c.Reason, c.TTFTKind, c.Cache)
	}
}
