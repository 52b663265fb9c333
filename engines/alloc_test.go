package engines

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tokentap/tokentap/fixtures"
)

func TestAllocationOf(t *testing.T) {
	for kind, want := range map[string]Allocation{
		KindVLLM: AllocPerStep, KindSGLang: AllocRatio, KindTGI: AllocReserve,
		KindLlamaCpp: AllocSlots, KindOllama: AllocSlots, KindOpenAI: AllocReserve,
	} {
		if got := AllocationOf(kind); got != want || got.Reserves() != (want == AllocReserve) {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
}

// TestCacheConfigBlocks: vLLM's own group-aware capacity where it gives
// one; blocks × block size, marked so, where it does not.
func TestCacheConfigBlocks(t *testing.T) {
	tests := []struct {
		text     string
		tokens   int
		labelled bool
	}{
		{`vllm:cache_config_info{block_size="16",num_gpu_blocks="30000",kv_cache_size_tokens="80000"} 1`, 80000, true},
		{`vllm:cache_config_info{block_size="16",num_gpu_blocks="30000"} 1`, 480000, false},
	}
	for _, tt := range tests {
		m, _ := ParseMetrics([]byte(tt.text))
		c, ok := parseCacheConfig(m)
		if !ok || c.Tokens != tt.tokens || c.Labelled != tt.labelled || c.Blocks != 30000 || c.BlockSize != 16 {
			t.Errorf("%s: %+v", tt.text, c)
		}
	}
}

// TestPreemptionsFakeEngine: the counter the judge reads, over loopback
// from the fake's vLLM flavour, which preempts as vLLM 0.32 does (two
// requests of 10 + 300 tokens in a 400-token cache: fixtures'
// TestAllocation), and from its SGLang flavour, which retracts (10 + 200,
// both admitted by the new-token ratio: fixtures' TestSGLangRetraction)
// and whose counter is absent until its first retraction: 0 then, read by
// SGLang's gauge of the last retractions.
func TestPreemptionsFakeEngine(t *testing.T) {
	for _, tt := range []struct {
		flavor    fixtures.Flavor
		maxTokens int
		counter   string
	}{
		{fixtures.FlavorVLLM, 300, "vllm:num_preemptions_total"},
		{fixtures.FlavorSGLang, 200, "sglang:num_retracted_requests_total"},
	} {
		t.Run(tt.counter, func(t *testing.T) {
			m := fixtures.DefaultModel()
			m.Flavor, m.KVCapacity, m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = tt.flavor, 400, 1e6, 0, 0
			e := fixtures.StartTest(t, m)
			ctx := context.Background()
			in, err := Probe(ctx, Target{BaseURL: e.URL()})
			if err != nil {
				t.Fatal(err)
			}
			if tt.flavor == fixtures.FlavorVLLM && (in.KVBlocks != 25 || in.KVBlockSize != 16 || in.KVFromBlocks) {
				t.Errorf("blocks %d of %d, from blocks %v; want 25 of 16 and vLLM's own figure", in.KVBlocks, in.KVBlockSize, in.KVFromBlocks)
			}
			n0, name, ok, err := in.Preemptions(ctx)
			if err != nil || !ok || n0 != 0 || name != tt.counter {
				t.Fatalf("Preemptions = %d %q %v %v; want 0 by %s", n0, name, ok, err, tt.counter)
			}
			body := `{"model":"` + m.Name + `","messages":[{"role":"user","content":"hello there"}],"max_tokens":` + strconv.Itoa(tt.maxTokens) + `}`
			// The two must run together from near their starts: SGLang's
			// retracts only if the second came within some 20 decode steps
			// (20 ms here) of the first, which a loaded machine may not
			// give a pair of goroutines. So pairs are sent until the fake
			// counted a preemption (the ground truth the probe must read).
			for attempt := 0; e.Preemptions() == 0 && attempt < 20; attempt++ {
				var wg sync.WaitGroup
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := in.c.hc.Post(e.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
					}()
				}
				wg.Wait()
			}
			n1, name, ok, err := in.Preemptions(ctx)
			if err != nil || !ok || n1 < 1 || n1 != e.Preemptions() || name != tt.counter {
				t.Errorf("Preemptions after = %d %q (%v %v), the fake counted %d; want at least one", n1, name, ok, err, e.Preemptions())
			}
		})
	}
}
