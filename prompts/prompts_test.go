package prompts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokentap/tokentap/fixtures"
)

// Local counters, each a tokenizer with a different character, so the
// length search is shown to work for more than one kind of tokenizer.

// fakeCount is the fake engine's rule, chat template included.
func fakeCount(_ context.Context, api, text string) (int, error) {
	n := fixtures.Tokenize(text)
	if api == APIChat {
		n += fixtures.ChatReplyOverhead + fixtures.ChatMessageOverhead
	}
	return n, nil
}

// bpeish counts about one token per 3.3 bytes of each word, full stops and
// newlines apart, plus a BOS: uneven per word, like a real BPE vocabulary.
func bpeish(_ context.Context, api, text string) (int, error) {
	n := 1
	for _, w := range strings.Fields(text) {
		if strings.HasSuffix(w, ".") {
			n++
			w = w[:len(w)-1]
		}
		n += (len(w)*10 + 32) / 33
	}
	n += strings.Count(text, "\n")
	if api == APIChat {
		n += 11
	}
	return n, nil
}

// merging is not additive: a common pair of words becomes one token, the
// way BPE merges across a boundary.
func merging(ctx context.Context, api, text string) (int, error) {
	n, _ := bpeish(ctx, api, text)
	return n - strings.Count(text, " of the") - strings.Count(text, " in the"), nil
}

var counters = []struct {
	name string
	f    CounterFunc
}{{"fake rule", fakeCount}, {"bpe-ish", bpeish}, {"merging", merging}}

func TestPromptExactLength(t *testing.T) {
	ctx := context.Background()
	for _, c := range counters {
		for _, api := range []string{APIChat, APICompletions} {
			b := NewBuilder("r4nd0m", c.f)
			b.API = api
			for _, target := range []int{0, 1, 20, 100, 1024, 16384, 65536, 253952} {
				t.Run(fmt.Sprintf("%s/%s/%d", c.name, api, target), func(t *testing.T) {
					p, err := b.Prompt(ctx, target, 3)
					if err != nil {
						t.Fatal(err)
					}
					again, _ := c.f(ctx, api, p.Text)
					if again != p.Tokens {
						t.Fatalf("Tokens %d but the text counts %d", p.Tokens, again)
					}
					minimal, _ := c.f(ctx, api, b.Salt()+" s3 c"+fmt.Sprint(target)+"\n")
					if target <= minimal {
						if p.Tokens != minimal {
							t.Errorf("target %d below the minimal prompt (%d): got %d tokens", target, minimal, p.Tokens)
						}
						return
					}
					if d := p.Tokens - target; d > Tolerance(target) || -d > Tolerance(target) {
						t.Errorf("%d tokens, target %d ± %d", p.Tokens, target, Tolerance(target))
					}
					if p.Counts > MaxCounts+2 {
						t.Errorf("%d count calls", p.Counts)
					}
					if !strings.HasPrefix(p.Text, "r4nd0m s3 c") {
						t.Errorf("prompt does not start with salt and slot: %.40q", p.Text)
					}
					t.Logf("%d tokens (%+d) in %d counts, %d bytes", p.Tokens, p.Tokens-target, p.Counts, len(p.Text))
				})
			}
		}
	}
}

func TestPromptContextZeroIsMinimal(t *testing.T) {
	b := NewBuilder("abc", CounterFunc(fakeCount))
	p, err := b.Prompt(context.Background(), 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.Text != "abc s5 c0\n" || p.Tokens > 16 {
		t.Errorf("context 0: %q, %d tokens", p.Text, p.Tokens)
	}
}

func TestPromptDistinctPerSlotFromTheStart(t *testing.T) {
	ctx := context.Background()
	b := NewBuilder("salt1", CounterFunc(fakeCount))
	firstLines := map[string]int{}
	texts := map[string]bool{}
	for slot := 0; slot < 64; slot++ {
		p, err := b.Prompt(ctx, 2048, slot)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(p.Text, "\n")
		if other, dup := firstLines[first]; dup {
			t.Fatalf("slots %d and %d share their first line %q", other, slot, first)
		}
		firstLines[first] = slot
		// The slot id follows the salt: the first two words differ.
		if f := strings.Fields(p.Text); f[0] != "salt1" || f[1] != fmt.Sprintf("s%d", slot) {
			t.Fatalf("slot %d starts %q %q", slot, f[0], f[1])
		}
		texts[p.Text] = true
	}
	// A row's prompts never start like another row's (prefill rows must be cold).
	p16, _ := b.Prompt(ctx, 16384, 0)
	p2, _ := b.Prompt(ctx, 2048, 0)
	if strings.HasPrefix(p16.Text, p2.Text[:len(p2.Text)/2]) {
		t.Error("the 16K prompt of slot 0 extends the 2K one: its prefill would be cached")
	}
}

func TestPromptSalt(t *testing.T) {
	ctx := context.Background()
	a1, _ := NewBuilder("aaaa", CounterFunc(bpeish)).Prompt(ctx, 4096, 1)
	a2, _ := NewBuilder("aaaa", CounterFunc(bpeish)).Prompt(ctx, 4096, 1)
	b1, _ := NewBuilder("bbbb", CounterFunc(bpeish)).Prompt(ctx, 4096, 1)
	if a1.Text != a2.Text || a1.Tokens != a2.Tokens {
		t.Error("the same salt did not reproduce the prompt")
	}
	if a1.Text[0] == b1.Text[0] || a1.Text[200:400] == b1.Text[200:400] {
		t.Error("different salts give prompts that start or continue alike")
	}
	s1, s2 := NewSalt(), NewSalt()
	if s1 == s2 || len(s1) != 8 {
		t.Errorf("NewSalt: %q %q", s1, s2)
	}
}

func TestPromptSharedPrefix(t *testing.T) {
	ctx := context.Background()
	for _, c := range counters {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("shr", c.f)
			b.SharedPrefix = 1000
			var prefix string
			for slot := 0; slot < 4; slot++ {
				p, err := b.Prompt(ctx, 8192, slot)
				if err != nil {
					t.Fatal(err)
				}
				if d := p.Shared - 1000; d > 16 || d < -16 {
					t.Errorf("shared prefix %d tokens, want 1000 ± 16", p.Shared)
				}
				if d := p.Tokens - 8192; d > Tolerance(8192) || d < -Tolerance(8192) {
					t.Errorf("%d tokens, want 8192 ± %d", p.Tokens, Tolerance(8192))
				}
				cut := strings.Index(p.Text, fmt.Sprintf("\ns%d c8192\n", slot))
				if cut < 0 {
					t.Fatalf("no slot line after the shared prefix: %.80q", p.Text)
				}
				if slot == 0 {
					prefix = p.Text[:cut]
				} else if p.Text[:cut] != prefix {
					t.Errorf("slot %d does not share the prefix", slot)
				}
				if n, _ := c.f(ctx, b.API, prefix); n != p.Shared && slot == 0 && b.API != "" {
					t.Errorf("prefix counts %d, Shared %d", n, p.Shared)
				}
			}
			if !strings.HasPrefix(prefix, "shr shared\n") {
				t.Errorf("shared prefix does not start with the salt: %.30q", prefix)
			}
		})
	}
}

func TestPromptErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("engine said no")
	failing := CounterFunc(func(context.Context, string, string) (int, error) { return 0, boom })
	if _, err := NewBuilder("x", failing).Prompt(ctx, 100, 0); !errors.Is(err, boom) {
		t.Errorf("counter error not passed on: %v", err)
	}
	constant := CounterFunc(func(context.Context, string, string) (int, error) { return 7, nil })
	if _, err := NewBuilder("x", constant).Prompt(ctx, 100, 0); err == nil || !strings.Contains(err.Error(), "does not count") {
		t.Errorf("a counter that ignores the text: %v", err)
	}
	// Counts that jump around: the search gives up after MaxCounts.
	var calls atomic.Int64
	erratic := CounterFunc(func(_ context.Context, api, s string) (int, error) {
		n, _ := fakeCount(context.TODO(), api, s)
		if calls.Add(1) > 2 {
			n += int(calls.Load()%2) * 5000
		}
		return n, nil
	})
	if _, err := NewBuilder("x", erratic).Prompt(ctx, 20000, 0); err == nil || !strings.Contains(err.Error(), "could not reach") {
		t.Errorf("erratic counter: %v", err)
	}
	// An engine that cuts prompts to 4,096 tokens (Ollama, without an
	// error): the counts stop growing, and the error says where.
	capped := CounterFunc(func(_ context.Context, api, s string) (int, error) {
		n, _ := fakeCount(context.TODO(), api, s)
		return min(n, 4096), nil
	})
	var ce *CappedError
	if _, err := NewBuilder("x", capped).Prompt(ctx, 5120, 0); !errors.As(err, &ce) || ce.Max != 4096 || ce.Target != 5120 {
		t.Errorf("a counter capped at 4,096: %v", err)
	}
	if p, err := NewBuilder("x", capped).Prompt(ctx, 2048, 0); err != nil || p.Tokens < 2048-Tolerance(2048) {
		t.Errorf("below the cap the capped counter still builds: %+v %v", p, err)
	}
	b := NewBuilder("x", CounterFunc(fakeCount))
	b.API = "responses"
	if _, err := b.Prompt(ctx, 10, 0); err == nil {
		t.Error("unknown API accepted")
	}
	if _, err := NewBuilder("x", nil).Prompt(ctx, 10, 0); err == nil {
		t.Error("nil counter accepted")
	}
	if _, err := NewBuilder("x", CounterFunc(fakeCount)).Prompt(ctx, -1, 0); err == nil {
		t.Error("negative context accepted")
	}
}

func TestPromptConcurrentSlots(t *testing.T) {
	b := NewBuilder("conc", CounterFunc(merging))
	var wg sync.WaitGroup
	got := make([]Prompt, 16)
	errs := make([]error, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = b.Prompt(context.Background(), 30000, i)
		}()
	}
	wg.Wait()
	for i, p := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if d := p.Tokens - 30000; d > Tolerance(30000) || d < -Tolerance(30000) {
			t.Errorf("slot %d: %d tokens", i, p.Tokens)
		}
	}
}

func TestPromptsRow(t *testing.T) {
	ctx := context.Background()
	b := NewBuilder("row", CounterFunc(bpeish))
	ps, err := b.Prompts(ctx, 5000, 12)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		one, _ := NewBuilder("row", CounterFunc(bpeish)).Prompt(ctx, 5000, i)
		if p.Slot != i || p.Text != one.Text {
			t.Errorf("slot %d: Prompts differs from Prompt", i)
		}
	}
	boom := errors.New("no")
	var n atomic.Int64
	failing := CounterFunc(func(ctx context.Context, api, s string) (int, error) {
		if n.Add(1) > 5 {
			return 0, boom
		}
		return bpeish(ctx, api, s)
	})
	if _, err := NewBuilder("row", failing).Prompts(ctx, 5000, 12); !errors.Is(err, boom) {
		t.Errorf("Prompts error: %v", err)
	}
}

func TestPromptsEstimate(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	counting := CounterFunc(func(ctx context.Context, api, s string) (int, error) {
		calls.Add(1)
		return merging(ctx, api, s)
	})
	b := NewBuilder("est", counting)
	b.Estimate = true
	ps, err := b.Prompts(ctx, 100000, 16)
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Estimated || ps[0].Counts == 0 {
		t.Errorf("slot 0 was not counted: %+v", ps[0].Counts)
	}
	for i, p := range ps[1:] {
		if !p.Estimated || p.Counts != 0 || p.Tokens != ps[0].Tokens {
			t.Errorf("slot %d: estimated %v, %d counts, %d tokens", i+1, p.Estimated, p.Counts, p.Tokens)
		}
		real, _ := merging(ctx, APIChat, p.Text)
		if d := real - 100000; d > Tolerance(100000) || -d > Tolerance(100000) {
			t.Errorf("slot %d: really %d tokens", i+1, real)
		}
		if i == 0 && strings.HasPrefix(p.Text, ps[0].Text[:20]) {
			t.Error("estimated prompts are not per slot")
		}
	}
	// Calibration (2) and one search.
	if calls.Load() > 2+MaxCounts {
		t.Errorf("%d counts for a 16-slot row", calls.Load())
	}
}

// FuzzPrompt: for any salt, slot and target, a prompt is within tolerance
// (or the minimal prompt), starts with its salt, and is reproducible.
func FuzzPrompt(f *testing.F) {
	f.Add("abc", 0, uint32(0))
	f.Add("r4nd0m", 7, uint32(1000))
	f.Add("x y\nz", -3, uint32(65536))
	f.Fuzz(func(t *testing.T, salt string, slot int, target uint32) {
		ctx := context.Background()
		tgt := int(target % 70000)
		b := NewBuilder(salt, CounterFunc(merging))
		p, err := b.Prompt(ctx, tgt, slot)
		if err != nil {
			if strings.TrimSpace(salt) == "" && strings.Contains(err.Error(), "does not count") {
				return
			}
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.Text, salt) {
			t.Fatalf("prompt does not start with the salt %q", salt)
		}
		real, _ := merging(ctx, APIChat, p.Text)
		if real != p.Tokens {
			t.Fatalf("Tokens %d, text counts %d", p.Tokens, real)
		}
		minimal, _ := merging(ctx, APIChat, p.Text[:strings.IndexByte(p.Text[len(salt):], '\n')+len(salt)+1])
		if p.Tokens != minimal && (p.Tokens-tgt > Tolerance(tgt) || tgt-p.Tokens > Tolerance(tgt)) {
			t.Fatalf("target %d: %d tokens", tgt, p.Tokens)
		}
		again, err := NewBuilder(salt, CounterFunc(merging)).Prompt(ctx, tgt, slot)
		if err != nil || again.Text != p.Text {
			t.Fatal("not reproducible")
		}
	})
}
