package matrix

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// withoutTokenize serves eng as an engine without POST /tokenize answers
// (Ollama, a plain OpenAI server): every count is a max_tokens:1 request.
func withoutTokenize(t *testing.T, eng *fixtures.Engine) *httptest.Server {
	h := eng.Handler()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/tokenize") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { front.CloseClientConnections(); front.Close() })
	return front
}

// TestPrefillColdWithoutTokenize: an engine without /tokenize (Ollama, a
// plain OpenAI server) has every prompt counted by a real max_tokens:1
// request. The prompts then measured must still be cold: the fake's ledger
// says the engine found none of the prefill request's prompt in its cache.
func TestPrefillColdWithoutTokenize(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	front := withoutTokenize(t, eng)

	var (
		mu   sync.Mutex
		recs []record.Record
	)
	res, err := Run(context.Background(), Config{
		Target: replay.Target{BaseURL: front.URL},
		Scenario: scenarios.Scenario{
			Name: "estimate", Contexts: []int{1024}, Concurrency: []int{1, 2}, Prefill: []int{1024, 2048},
			Window: 400 * time.Millisecond, MaxOutput: 64, API: "chat",
		},
		OnRecords: func(r []record.Record) {
			mu.Lock()
			recs = append(recs, r...)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Prefill) != 2 {
		t.Fatalf("prefill rows %+v", res.Prefill)
	}
	for _, p := range res.Prefill {
		if p.Status != result.Valid {
			t.Fatalf("prefill %d: %s (%s)", p.Context, p.Status, p.Error)
		}
	}
	// The measured requests: the first warm-up of the 1K row and the cold
	// 2K prefill.
	measured := map[string]bool{}
	for _, r := range recs {
		if (strings.HasPrefix(r.Tag, "warmup C=1K") || strings.HasPrefix(r.Tag, "prefill C=2K")) && !measured[r.Tag] {
			measured[r.Tag] = true
			le, ok := eng.LedgerEntryByID(r.ResponseID)
			if !ok {
				t.Fatalf("%s: no ledger entry for %q", r.Tag, r.ResponseID)
			}
			if le.CachedTokens != 0 {
				t.Errorf("%s: the engine had %d of %d prompt tokens cached; a prefill measurement must be cold", r.Tag, le.CachedTokens, le.PromptTokens)
			}
		}
	}
	if len(measured) != 2 {
		t.Fatalf("found measured requests %v, want the 1K warm-up and the 2K prefill", measured)
	}
}

// TestDecodeMaxTokensFitsModelLength: a prompt a few tokens over its
// target at a context right at the model's limit gets its decode
// max_tokens cut so prompt + max_tokens fits; others keep the max output.
func TestDecodeMaxTokensFitsModelLength(t *testing.T) {
	r := &runner{
		sc:   scenarios.Scenario{MaxOutput: 8192},
		info: &engines.Info{Kind: engines.KindVLLM},
		tgt:  replay.Target{BaseURL: "http://127.0.0.1:1", Model: "m", API: record.Chat},
		res:  &result.Result{Settings: result.Settings{MaxModelLen: 262144}},
	}
	tests := []struct {
		tokens int
		want   string
	}{
		{253952, `"max_tokens":8192`}, // 248K exactly: fits
		{253983, `"max_tokens":8161`}, // 31 over: cut to fit
		{0, `"max_tokens":8192`},      // length unknown: unchanged
	}
	for _, tt := range tests {
		d, _, err := r.bodies(0, prompts.Prompt{Text: "x", Tokens: tt.tokens})
		if err != nil {
			t.Fatal(err)
		}
		if body := string(d.Bytes()); !strings.Contains(body, tt.want) {
			t.Errorf("prompt of %d tokens: body %s lacks %s", tt.tokens, body, tt.want)
		}
	}
}

// TestStuckCountEndsTheRun: without /tokenize a prompt is counted by a
// max_tokens:1 request. An engine that takes that request and never
// answers (Ollama did, in the live tier) must end the run within the idle
// timeout, saying what it waited for, with what was measured kept; it held
// the matrix forever.
func TestStuckCountEndsTheRun(t *testing.T) {
	fault, err := fixtures.ParseFault("header-delay=1h,min-prompt=5000")
	if err != nil {
		t.Fatal(err)
	}
	front := withoutTokenize(t, fixtures.StartTest(t, quickModel(), fixtures.WithFaults(fault)))

	type ran struct {
		res *result.Result
		err error
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() {
		res, err := Run(context.Background(), Config{
			Target: replay.Target{BaseURL: front.URL, IdleTimeout: 500 * time.Millisecond},
			Scenario: scenarios.Scenario{
				Name: "stuck-count", Contexts: []int{0, 5120}, Concurrency: []int{1}, Prefill: []int{},
				Window: 300 * time.Millisecond, MaxOutput: 16, API: "chat",
			},
		})
		done <- ran{res, err}
	}()
	var got ran
	select {
	case got = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the matrix still waits for a token count the engine never answers, a minute on (idle timeout 500 ms)")
	}
	t.Logf("ended after %v: %v", time.Since(start).Round(time.Millisecond), got.err)
	if got.err == nil || !strings.Contains(got.err.Error(), "did not answer it in 500ms (--idle-timeout)") {
		t.Fatalf("error %v, want one saying the engine did not answer a token count within the idle timeout", got.err)
	}
	if got.res == nil || len(got.res.Decode) == 0 || got.res.Decode[0].Status != result.Valid {
		t.Fatalf("the 0-context row measured before the stuck count is not kept: %+v", got.res)
	}
}
