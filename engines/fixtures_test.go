package engines

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/result"
)

// The fake engine looks like vLLM from outside: Probe must say so from what
// it answers, read its KV capacity and length, and count tokens exactly as
// its usage.prompt_tokens will.
func TestProbeFakeEngine(t *testing.T) {
	m := fixtures.DefaultModel()
	e := fixtures.StartTest(t, m)
	ctx := context.Background()
	in, err := Probe(ctx, Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if in.Kind != KindVLLM || in.Model != m.Name || in.MaxModelLen != m.MaxModelLen ||
		in.KVCapacity != m.KVCapacity || in.CacheBlock != m.BlockSize || in.Version != m.Version || !in.Tokenize || !in.Gauges {
		t.Fatalf("probe of the fake: %+v\nfacts %+v", in, in.Facts)
	}
	text := strings.Repeat("alpha beta gamma-delta-epsilon ", 50)
	for _, api := range []string{APIChat, APICompletions} {
		n, err := in.CountTokens(ctx, api, text)
		if err != nil {
			t.Fatal(err)
		}
		want := fixtures.Tokenize(text)
		if api == APIChat {
			want += fixtures.ChatReplyOverhead + fixtures.ChatMessageOverhead
		}
		if n != want {
			t.Errorf("%s: CountTokens = %d, fake's rule says %d", api, n, want)
		}
	}
	run, wait, ok, err := in.Load(ctx)
	if err != nil || !ok || run != 0 || wait != 0 {
		t.Errorf("Load of an idle fake = %d, %d, %v, %v", run, wait, ok, err)
	}
	if _, err := Probe(ctx, Target{BaseURL: e.URL(), Model: "other"}); err == nil || !strings.Contains(err.Error(), m.Name) {
		t.Errorf("unknown model: %v", err)
	}
}

// The KV cache's memory is a fact where vLLM says it (its CPU build's
// VLLM_CPU_KVCACHE_SPACE, or --kv-cache-memory-bytes) and none where the
// label says None.
func TestProbeKVMemory(t *testing.T) {
	for _, mem := range []int64{0, 1 << 30} {
		m := fixtures.DefaultModel()
		m.KVCacheMemoryBytes = mem
		in, err := Probe(context.Background(), Target{BaseURL: fixtures.StartTest(t, m).URL()})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range in.Facts {
			if f.Name == FactKVMemory {
				got = append(got, f.Value+" from "+f.Source)
			}
		}
		want := []string{}
		if mem > 0 {
			want = []string{"1073741824 from GET /metrics vllm:cache_config_info label kv_cache_memory_bytes"}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") || in.KVCapacity != m.KVCapacity {
			t.Errorf("memory %d: facts %q, want %q; capacity %d", mem, got, want, in.KVCapacity)
		}
	}
}

// Load must read the same running/waiting the fake's scheduler holds.
func TestLoadFakeEngineBusy(t *testing.T) {
	m := fixtures.DefaultModel()
	m.MaxRunning = 2
	e := fixtures.StartTest(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, err := Probe(ctx, Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"` + m.Name + `","prompt":"x y z","max_tokens":20000,"ignore_eos":true,"stream":true}`
	done := make(chan struct{}, 5)
	for i := 0; i < 5; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Load().Running != 2 || e.Load().Waiting != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("fake never reached 2 running, 3 waiting: %+v", e.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	run, wait, ok, err := in.Load(ctx)
	if err != nil || !ok || run != 2 || wait != 3 {
		t.Errorf("Load = %d running, %d waiting (ok %v, err %v); the fake holds 2 and 3", run, wait, ok, err)
	}
	cancel()
	for i := 0; i < 5; i++ {
		<-done
	}
}

// PrefixCache must read the fake's own hit and query counters: a prompt
// sent twice is found in the cache the second time.
func TestPrefixCacheFakeEngine(t *testing.T) {
	m := fixtures.DefaultModel()
	e := fixtures.StartTest(t, m)
	ctx := context.Background()
	in, err := Probe(ctx, Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	h0, q0, ok, err := in.PrefixCache(ctx)
	if err != nil || !ok {
		t.Fatalf("PrefixCache: %v %v", ok, err)
	}
	body := `{"model":"` + m.Name + `","prompt":"` + strings.Repeat("word ", 200) + `","max_tokens":1}`
	for i := 0; i < 2; i++ {
		resp, err := http.Post(e.URL()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	h1, q1, ok, err := in.PrefixCache(ctx)
	if err != nil || !ok {
		t.Fatalf("PrefixCache: %v %v", ok, err)
	}
	var prompt, cached int64
	for _, le := range e.Ledger() {
		prompt += int64(le.PromptTokens)
		cached += int64(le.CachedTokens)
	}
	if q1-q0 != prompt || h1-h0 != cached || cached == 0 {
		t.Errorf("counters moved %d hits / %d queries; the ledger says %d cached of %d", h1-h0, q1-q0, cached, prompt)
	}
}

// The fake in llama.cpp's shape: Probe reads its slots and per-slot
// context, and gives the KV capacity as the bounds the answers allow, the
// same whether the slots share one cache or not (no answer says which).
func TestProbeFakeLlamaCpp(t *testing.T) {
	for _, unified := range []bool{true, false} {
		m := fixtures.DefaultModel()
		m.Flavor, m.Slots, m.KVCapacity, m.LlamaCpp.UnifiedKV, m.Version = fixtures.FlavorLlamaCpp, 4, 20480, unified, "b10573"
		e := fixtures.StartTest(t, m)
		in, err := Probe(context.Background(), Target{BaseURL: e.URL()})
		if err != nil {
			t.Fatal(err)
		}
		nctx := 20480
		if !unified {
			nctx = 5120
		}
		if in.Kind != KindLlamaCpp || in.Slots != 4 || in.MaxModelLen != nctx || in.KVCapacity != 0 ||
			in.KVMin != nctx || in.KVMax != 4*nctx || in.Version != "b10573" || !in.Gauges || !in.Tokenize {
			t.Fatalf("unified=%v: %+v\nfacts %+v", unified, in, in.Facts)
		}
		n, err := in.CountTokens(context.Background(), APIChat, "one two three")
		if err != nil || n != 3+fixtures.ChatReplyOverhead+fixtures.ChatMessageOverhead {
			t.Fatalf("CountTokens = %d, %v", n, err)
		}
	}
}

// The fake in Ollama's shape: Probe measures its slots (which loads the
// model), then reads the context it runs at from /api/ps, not the trained
// length /api/show gives, and takes "tiny" for "tiny:latest".
// TestProbeFakeOllama measures the slots of a fast engine, whose 16-token
// probe streams (80 ms at 5 ms a token) are too short to tell and are sent
// again longer, and of a slow one (16 × 20 ms = 320 ms), whose are not.
func TestProbeFakeOllama(t *testing.T) {
	for _, tt := range []struct {
		slots  int
		tbt    time.Duration
		longer bool
	}{{1, 5 * time.Millisecond, true}, {2, 5 * time.Millisecond, true}, {1, 20 * time.Millisecond, false}} {
		slots := tt.slots
		m := fixtures.DefaultModel()
		m.Name, m.Flavor, m.Slots, m.MaxModelLen, m.Ollama.TrainedLen, m.Version = "tiny", fixtures.FlavorOllama, slots, 4096, 65536, "0.17.4"
		m.TBTBase = tt.tbt
		e := fixtures.StartTest(t, m)
		in, err := Probe(context.Background(), Target{BaseURL: e.URL(), Model: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		if in.Kind != KindOllama || in.Model != "tiny:latest" || in.Slots != slots || in.MaxModelLen != 4096 ||
			in.KVCapacity != 4096*slots || in.Version != "0.17.4" {
			t.Fatalf("%d slots: %+v\nfacts %+v", slots, in, in.Facts)
		}
		// Fewer than every probe stream at once: a number it does not exceed.
		if in.SlotsAtMost() != slots {
			t.Errorf("%d slots: SlotsAtMost %d, want %d", slots, in.SlotsAtMost(), slots)
		}
		if f := factBySource(in.Facts, FactMaxModelLen); f["GET /api/ps models[name=tiny:latest].context_length"] != "4096" {
			t.Errorf("max model length facts %v", f)
		}
		slotFacts := factBySource(in.Facts, FactSlots)
		if len(slotFacts) != 1 {
			t.Fatalf("slots facts %v, want one", slotFacts)
		}
		for src := range slotFacts {
			var n int
			if _, err := fmt.Sscanf(src[strings.Index(src, "(")+1:], "%d tokens each", &n); err != nil {
				t.Fatalf("slots fact %q: %v", src, err)
			}
			if longer := n > slotProbeTokens; longer != tt.longer || n > slotProbeMaxTokens {
				t.Errorf("%d slots at %v a token: streams of %d tokens (%q)", slots, tt.tbt, n, src)
			}
		}
	}
}

// TestProbeFakeTGI: the fake's TGI flavour is found as TGI from its /info,
// counts tokens with TGI's /tokenize, and its validation and queue
// histograms, which TGI records only for requests that succeed, grow by
// the finished request and not by the one whose client left mid-stream.
func TestProbeFakeTGI(t *testing.T) {
	m := fixtures.DefaultModel()
	m.Flavor = fixtures.FlavorTGI
	e := fixtures.StartTest(t, m)
	ctx := context.Background()
	in, err := Probe(ctx, Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if in.Kind != KindTGI || in.MaxModelLen != m.MaxModelLen || in.KVCapacity != m.KVCapacity || !in.Tokenize || !in.Gauges {
		t.Fatalf("probe of the TGI fake: %+v\nfacts %+v", in, in.Facts)
	}
	text := strings.Repeat("alpha beta ", 20)
	if n, err := in.CountTokens(ctx, APICompletions, text); err != nil || n != fixtures.Tokenize(text) {
		t.Errorf("CountTokens = %d, %v; the fake's rule says %d", n, err, fixtures.Tokenize(text))
	}
	before, err := in.Timings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := func(maxTokens int) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true}`, m.Name, maxTokens)
	}
	resp, err := http.Post(e.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body(4)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	cctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(body(5000)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 256))
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(e.Ledger()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	after, err := in.Timings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Since(before)
	for _, part := range []string{result.PartQueue, result.PartValidation} {
		if p, ok := d[part]; !ok || p.Count != 1 || !p.FinishedOnly || !strings.Contains(p.Source, "tgi_request_") {
			t.Errorf("%s over a finished and a cancelled request: %+v, want 1 request, finished only", part, p)
		}
	}
	if _, ok := d[result.PartPrefill]; ok {
		t.Errorf("TGI gave a prefill part: %+v", d)
	}
}
