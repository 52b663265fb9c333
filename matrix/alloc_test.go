package matrix

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestAllocationRules runs the same matrix on the fake shaped as vLLM,
// which allocates per step and preempts, and as TGI, which reserves
// prompt + max_tokens (METHOD §3 rule 1). A 4,096-token cache (256
// blocks of 16), 768-token prompts and 1,024 tokens of max output:
//
//   - 768 × 2 needs 2 × 1,792 = 3,584 tokens: Valid on both;
//   - 768 × 4 needs 4 × 1,792 = 7,168 > 4,096 reserved: TGI's is Over
//     capacity before any load. Per step its prompts and a token each,
//     4 × ⌈769 ÷ 16⌉ = 196 blocks, fit, so vLLM's is run; once each
//     request passes 256 tokens of output the cache is full and the
//     engine preempts, which the cell's evidence shows: Over capacity,
//     the counter's growth its reason. The requests run to their end
//     (FinishRequests), so the preemptions come however slow the
//     machine.
func TestAllocationRules(t *testing.T) {
	t.Parallel()
	model := func(f fixtures.Flavor) fixtures.Model {
		m := fixtures.DefaultModel()
		m.Flavor, m.KVCapacity, m.MaxRunning = f, 4096, 8
		m.PrefillTokPerSec, m.PrefillSlowdown, m.FirstEventDelay = 50000, 0, 5*time.Millisecond
		m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 2*time.Millisecond, 0, 0
		return m
	}
	sc := scenarios.Scenario{Name: "alloc", Contexts: []int{768}, Concurrency: []int{1, 2, 4},
		Window: time.Second, MaxOutput: 1024, API: "chat"}
	t.Run("vllm", func(t *testing.T) {
		res, _, e := runFakeEngine(t, model(fixtures.FlavorVLLM), sc, Config{FinishRequests: true})
		checkStatuses(t, res, cellWant{{768, 1}: result.Valid, {768, 2}: result.Valid, {768, 4}: result.OverCapacity})
		c := res.Cell(768, 4)
		want := fmt.Sprintf("preempted running requests %d times (vllm:num_preemptions_total)", e.Preemptions())
		if !c.Measured || e.Preemptions() == 0 || !strings.Contains(c.Reason, want) {
			t.Errorf("768 × 4: measured %v, reason %q; want it run and %q", c.Measured, c.Reason, want)
		}
	})
	// SGLang admits a request while its prompt and all its max_tokens
	// fit beside the running ones' max_tokens left × the new-token ratio
	// (fixtures' ratio.go): 768 × 4 is run, unlike TGI's, but its third
	// request needs 768 + 1,024 + 1 = 1,793 where two running leave
	// 4,096 − 2 × 768 − 2 × 1,024 × 0.7 = 1,126 at most, so it waits for
	// one to end: Requests queued, by the engine's own gauge, and no
	// retraction.
	t.Run("sglang", func(t *testing.T) {
		res, _, e := runFakeEngine(t, model(fixtures.FlavorSGLang), sc, Config{FinishRequests: true})
		checkStatuses(t, res, cellWant{{768, 1}: result.Valid, {768, 2}: result.Valid, {768, 4}: result.RequestsQueued})
		if c := res.Cell(768, 4); !c.Measured || e.Preemptions() != 0 || !strings.Contains(c.Reason, "waiting requests") {
			t.Errorf("768 × 4: measured %v, reason %q, %d retractions; want it run, queued by the engine, none retracted", c.Measured, c.Reason, e.Preemptions())
		}
	})
	t.Run("tgi", func(t *testing.T) {
		res, _, e := runFakeEngine(t, model(fixtures.FlavorTGI), sc, Config{FinishRequests: true})
		checkStatuses(t, res, cellWant{{768, 1}: result.Valid, {768, 2}: result.Valid, {768, 4}: result.OverCapacity})
		if c := res.Cell(768, 4); c.Measured || c.Reason != "4 × (768 + 1024) = 7168 tokens > KV cache capacity 4096 tokens" || e.Preemptions() != 0 {
			t.Errorf("768 × 4: measured %v, reason %q: want the reservation rule before any load", c.Measured, c.Reason)
		}
	})
}
