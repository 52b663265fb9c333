package prompts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
)

// usagePromptTokens sends p to the fake with max_tokens 1, as the matrix
// will, and returns the engine's usage.prompt_tokens.
func usagePromptTokens(t *testing.T, url, model string, p Prompt) int {
	t.Helper()
	req := map[string]any{"model": model, "max_tokens": 1}
	path := "/v1/completions"
	if p.API == APIChat {
		path = "/v1/chat/completions"
		req["messages"] = []map[string]string{{"role": "user", "content": p.Text}}
	} else {
		req["prompt"] = p.Text
	}
	b, _ := json.Marshal(req)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("%s: HTTP %d", path, resp.StatusCode)
	}
	return r.Usage.PromptTokens
}

// Prompts built with the fake's own /tokenize (real HTTP, through
// engines.Info) are the length the fake then reports in usage.prompt_tokens
// (for 248K, the length its documented tokenizer rule gives).
func TestPromptsAgainstFakeEngine(t *testing.T) {
	m := fixtures.DefaultModel()
	m.MaxModelLen = 262144
	m.KVCapacity = 300000
	m.PrefillTokPerSec = 1e9 // the test checks lengths, not speed
	m.PrefillSlowdown = 0
	m.FirstEventDelay = 0
	e := fixtures.StartTest(t, m)
	ctx := context.Background()
	info, err := engines.Probe(ctx, engines.Target{BaseURL: e.URL()})
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []string{APIChat, APICompletions} {
		b := NewBuilder(NewSalt(), info)
		b.API = api
		for _, target := range []int{0, 1024, 16384, 253952} {
			if target > 65536 && api == APICompletions {
				continue // one 248K case is enough; each is slow under -race
			}
			t.Run(fmt.Sprintf("%s/%d", api, target), func(t *testing.T) {
				slots := 2
				if target > 65536 {
					slots = 1 // a 248K request through the fake is slow under -race
				}
				for slot := 0; slot < slots; slot++ {
					p, err := b.Prompt(ctx, target, slot)
					if err != nil {
						t.Fatal(err)
					}
					var used int
					if target > 65536 {
						// The fake's documented rule, computed here.
						used, _ = fakeCount(ctx, api, p.Text)
					} else {
						used = usagePromptTokens(t, e.URL(), m.Name, p)
					}
					if used != p.Tokens {
						t.Errorf("slot %d: Prompt says %d tokens, the fake's usage.prompt_tokens %d", slot, p.Tokens, used)
					}
					if target == 0 {
						if used > 16 {
							t.Errorf("context 0 prompt is %d tokens", used)
						}
						continue
					}
					if d := used - target; d > Tolerance(target) || -d > Tolerance(target) {
						t.Errorf("slot %d: %d tokens, target %d ± %d", slot, used, target, Tolerance(target))
					}
				}
			})
		}
	}
	// Slots are cold to each other from their first block: the fake's
	// prefix cache finds nothing of slot 0's prompt in slot 1's.
	e.ResetLedger()
	b := NewBuilder(NewSalt(), info)
	for slot := 0; slot < 3; slot++ {
		p, err := b.Prompt(ctx, 4096, slot)
		if err != nil {
			t.Fatal(err)
		}
		usagePromptTokens(t, e.URL(), m.Name, p)
	}
	for _, le := range e.Ledger() {
		if le.CachedTokens != 0 {
			t.Errorf("request %s found %d cached tokens: slots share a prefix", le.ID, le.CachedTokens)
		}
	}
}

// BenchmarkPromptsFakeHTTP128x248K builds a 248K row of 128 prompts with
// Prompts, every count a real POST /tokenize to the fake engine over
// 127.0.0.1 (the fake answers with all 248K token ids, as vLLM does). The
// fake's own tokenizing and JSON are in the figure: it is what a row costs
// against a vLLM-shaped engine, not tokentap's cost alone.
func BenchmarkPromptsFakeHTTP128x248K(b *testing.B) {
	m := fixtures.DefaultModel()
	m.MaxModelLen = 262144
	m.KVCapacity = 300000
	e := fixtures.StartTest(b, m)
	ctx := context.Background()
	info, err := engines.Probe(ctx, engines.Target{BaseURL: e.URL()})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ps, err := NewBuilder(NewSalt(), info).Prompts(ctx, 253952, 128)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ps {
			if d := p.Tokens - 253952; d > Tolerance(253952) || -d > Tolerance(253952) {
				b.Fatalf("%d tokens", p.Tokens)
			}
		}
	}
}
