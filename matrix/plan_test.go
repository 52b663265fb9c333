package matrix

import (
	"slices"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

const k = 1024

// TestPlanSeed000 checks the plan against seed page 000 (Fara 4B on a 12 GB
// RTX 3060): its Over capacity cells follow N × (C + 8192) > KV capacity.
// The page does not print the capacity; 81,920 tokens (the fake engine's
// default, 5,120 blocks of 16) reproduces every cell of it exactly.
func TestPlanSeed000(t *testing.T) {
	contexts := []int{0, 16 * k, 32 * k, 64 * k, 128 * k, 248 * k}
	conc := []int{1, 2, 4, 8, 16, 32, 64, 128}
	p := makePlan(contexts, conc, nil, []int{8 * k, 16 * k, 32 * k}, 8192, 262144, kvFit{Tokens: 81920}, nil) // the seed pages' rule: an engine that reserves
	want := map[int][]int{
		0:       {1, 2, 4, 8}, // seed: Valid up to 8, Over capacity from 16
		16 * k:  {1, 2},
		32 * k:  {1, 2}, // 2 × 40,960 = 81,920: exactly fits
		64 * k:  {1},    // seed: run (and Failed)
		128 * k: nil,
		248 * k: nil,
	}
	for c, ns := range want {
		if got := p.runnable(c); !slices.Equal(got, ns) {
			t.Errorf("C=%s: runnable %v, want %v (seed 000)", TokenLabel(c), got, ns)
		}
	}
	if len(p.cells) != len(contexts)*len(conc) {
		t.Fatalf("%d cells, want %d", len(p.cells), len(contexts)*len(conc))
	}
	if len(p.dropped) != 0 || !slices.Equal(p.coldPrefill, []int{8 * k}) {
		t.Errorf("dropped %v, cold prefill %v; want none dropped and only 8K cold (16K and 32K are measured during warm-up)", p.dropped, p.coldPrefill)
	}
	if overCapacity(0, 128, 8192, 0) {
		t.Error("an unknown capacity (0) must never rule a cell out")
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name        string
		contexts    []int
		conc        []int
		prefill     []int
		maxOut      int
		maxLen, kv  int
		kvMax       int
		kept        []int
		dropped     []int
		runnable    map[int][]int
		cold        []int
		mode        string
		noteHas     string
		prefillRows int
	}{
		{
			name:     "demo shape",
			contexts: []int{0, 1 * k, 2 * k, 4 * k, 8 * k, 16 * k}, conc: []int{1, 2, 4, 8, 16},
			prefill: []int{1 * k, 2 * k, 4 * k}, maxOut: 512, maxLen: 16 * k, kv: 13312,
			kept:    []int{0, 1 * k, 2 * k, 4 * k, 8 * k},
			dropped: []int{16 * k},
			runnable: map[int][]int{
				0: {1, 2, 4, 8, 16}, 1 * k: {1, 2, 4, 8}, 2 * k: {1, 2, 4}, 4 * k: {1, 2}, 8 * k: {1},
			},
			mode:        "Measured during decode warm-up",
			noteHas:     "16K dropped",
			prefillRows: 3,
		},
		{
			name:     "prefill context that is no decode row is a cold request",
			contexts: []int{0, 16 * k}, conc: []int{1, 2}, prefill: []int{8 * k, 16 * k},
			maxOut: 8192, maxLen: 0, kv: 0,
			kept:        []int{0, 16 * k},
			runnable:    map[int][]int{0: {1, 2}, 16 * k: {1, 2}},
			cold:        []int{8 * k},
			mode:        "Measured during decode warm-up; separate cold requests where the context is not a decode row",
			prefillRows: 2,
		},
		{
			name:     "a row entirely over capacity measures its prefill cold",
			contexts: []int{0, 64 * k}, conc: []int{1}, prefill: []int{64 * k},
			maxOut: 8192, maxLen: 262144, kv: 65536,
			kept:        []int{0, 64 * k},
			runnable:    map[int][]int{0: {1}, 64 * k: nil},
			cold:        []int{64 * k},
			mode:        "Separate cold requests",
			prefillRows: 1,
		},
		{
			// llama-server -c 20480 -np 4 -kvu: each slot's n_ctx is 20480
			// and the capacity between 20480 and 81920. 8K × 8 needs
			// 8 × 8448 = 67584 ≤ 81920: tried; 16K × 8 needs 135168: not.
			name:     "bounded capacity: only cells over the upper bound are not run",
			contexts: []int{0, 8 * k, 16 * k}, conc: []int{1, 4, 8}, maxOut: 256, maxLen: 20480, kv: 0, kvMax: 81920,
			kept:     []int{0, 8 * k, 16 * k},
			runnable: map[int][]int{0: {1, 4, 8}, 8 * k: {1, 4, 8}, 16 * k: {1, 4}},
			mode:     "Separate cold requests",
		},
		{
			name:     "prefill longer than the model is dropped",
			contexts: []int{0}, conc: []int{1}, prefill: []int{8 * k, 128 * k},
			maxOut: 8192, maxLen: 90112, kv: 0,
			kept:        []int{0},
			runnable:    map[int][]int{0: {1}},
			cold:        []int{8 * k},
			mode:        "Separate cold requests",
			noteHas:     "Prefill contexts 128K dropped",
			prefillRows: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := makePlan(tt.contexts, tt.conc, nil, tt.prefill, tt.maxOut, tt.maxLen, kvFit{Tokens: tt.kv, Max: tt.kvMax}, nil)
			if !slices.Equal(p.contexts, tt.kept) {
				t.Errorf("kept %v, want %v", p.contexts, tt.kept)
			}
			if !slices.Equal(p.dropped, tt.dropped) {
				t.Errorf("dropped %v, want %v", p.dropped, tt.dropped)
			}
			for c, want := range tt.runnable {
				if got := p.runnable(c); !slices.Equal(got, want) {
					t.Errorf("runnable(%d) = %v, want %v", c, got, want)
				}
			}
			if !slices.Equal(p.coldPrefill, tt.cold) {
				t.Errorf("cold prefill %v, want %v", p.coldPrefill, tt.cold)
			}
			if got := p.prefillMode(); got != tt.mode {
				t.Errorf("prefill mode %q, want %q", got, tt.mode)
			}
			if len(p.prefill) != tt.prefillRows {
				t.Errorf("%d prefill rows, want %d", len(p.prefill), tt.prefillRows)
			}
			notes := strings.Join(p.notes, "\n")
			if tt.noteHas != "" && !strings.Contains(notes, tt.noteHas) {
				t.Errorf("notes %q lack %q", notes, tt.noteHas)
			}
			for _, c := range p.cells {
				if c.Status != result.OverCapacity && c.Status != result.NotRun {
					t.Errorf("cell %d/%d starts as %s", c.Context, c.Concurrency, c.Status)
				}
				if c.Status == result.OverCapacity && c.Reason == "" {
					t.Errorf("over-capacity cell %d/%d has no reason", c.Context, c.Concurrency)
				}
			}
		})
	}
}

func TestTokenLabel(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0"}, {16384, "16K"}, {253952, "248K"}, {1500, "1500"}, {1024, "1K"}} {
		if got := TokenLabel(tc.n); got != tc.want {
			t.Errorf("TokenLabel(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
