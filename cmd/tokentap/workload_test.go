package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/scenarios"
)

// TestWorkloadFlags: each workload flag lands in the scenario or is
// refused with a message naming it, before any load.
func TestWorkloadFlags(t *testing.T) {
	src := func(n string) string { return "--" + n }
	tests := []struct {
		name         string
		f            WorkloadFlags
		window, ctxs bool
		err          string
		check        func(sc scenarios.Scenario) bool
	}{
		{name: "requests without a window: the count alone", f: WorkloadFlags{Requests: "20"},
			check: func(sc scenarios.Scenario) bool { return sc.Requests == 20 && sc.Window == 0 }},
		{name: "requests with a window: both", f: WorkloadFlags{Requests: "20"}, window: true,
			check: func(sc scenarios.Scenario) bool { return sc.Requests == 20 && sc.Window == 30*time.Second }},
		{name: "burstiness", f: WorkloadFlags{Burstiness: "0.25"}, check: func(sc scenarios.Scenario) bool { return sc.Burstiness == 0.25 }},
		{name: "seed", f: WorkloadFlags{Seed: "7"}, check: func(sc scenarios.Scenario) bool { return sc.Seed == 7 }},
		{name: "sweep", f: WorkloadFlags{Sweep: true}, check: func(sc scenarios.Scenario) bool { return sc.Sweep && len(sc.Rates) == 0 }},
		{name: "dataset: one row, no seed prefill rows", f: WorkloadFlags{Dataset: "d.jsonl"},
			check: func(sc scenarios.Scenario) bool {
				return len(sc.Contexts) == 1 && sc.Contexts[0] == 0 && len(sc.Prefill) == 0
			}},
		{name: "prompt and output spreads, GuideLLM's names", f: WorkloadFlags{PromptTokensStdev: "128", PromptTokensMin: "1k", PromptTokensMax: "64k", OutputTokensStdev: "16", OutputTokensMin: "8", OutputTokensMax: "100"},
			check: func(sc scenarios.Scenario) bool {
				return sc.PromptLengths == scenarios.Lengths{Stdev: 128, Min: 1024, Max: 65536} && sc.OutputLengths == scenarios.Lengths{Stdev: 16, Min: 8, Max: 100}
			}},
		{name: "vLLM's range ratio: prompts and outputs", f: WorkloadFlags{RandomRangeRatio: "0.5"},
			check: func(sc scenarios.Scenario) bool {
				return sc.PromptLengths.RangeRatio == 0.5 && sc.OutputLengths.RangeRatio == 0.5
			}},
		{name: "range ratio 1", f: WorkloadFlags{RandomRangeRatio: "1"}, err: "--random-range-ratio \"1\": want a ratio from 0 up to, not including, 1"},
		{name: "stdev not a count", f: WorkloadFlags{PromptTokensStdev: "wide"}, err: "--prompt-tokens-stdev: token count \"wide\""},
		{name: "requests 0", f: WorkloadFlags{Requests: "0"}, err: "--requests \"0\": want a whole number of requests, at least 1"},
		// Token counts take a k (1,024); a request count does not guess.
		{name: "requests 1k", f: WorkloadFlags{Requests: "1k"}, err: "--requests \"1k\": write the count in full (such as 1000)"},
		{name: "requests 2.5", f: WorkloadFlags{Requests: "2.5"}, err: "--requests \"2.5\": want a whole number of requests, at least 1"},
		{name: "requests 0k", f: WorkloadFlags{Requests: "0k"}, err: "--requests \"0k\": want a whole number of requests, at least 1"},
		{name: "requests -1k", f: WorkloadFlags{Requests: "-1k"}, err: "--requests \"-1k\": want a whole number of requests, at least 1"},
		{name: "burstiness 0", f: WorkloadFlags{Burstiness: "0"}, err: "--burstiness \"0\""},
		// A shape so small every gamma draw underflows to 0: the schedule
		// had no times and the cell waited for ever.
		{name: "burstiness 1e-6", f: WorkloadFlags{Burstiness: "1e-6"}, err: "--burstiness \"1e-6\": want a gamma shape from 0.01 to 1000"},
		{name: "burstiness at the least", f: WorkloadFlags{Burstiness: "0.01"}, check: func(sc scenarios.Scenario) bool { return sc.Burstiness == 0.01 }},
		{name: "seed negative", f: WorkloadFlags{Seed: "-1"}, err: "--seed \"-1\""},
		{name: "dataset with contexts", f: WorkloadFlags{Dataset: "d.jsonl"}, ctxs: true, err: "--dataset and --contexts are both given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := scenarios.Seed()
			err := tt.f.apply(&sc, tt.window, tt.ctxs, false, true, src)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(sc) {
				t.Errorf("scenario %+v", sc)
			}
		})
	}
}

// TestLoadDatasetRefuses: more requests than the file holds, or a file
// that is no dataset, is refused naming the file.
func TestLoadDatasetRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "d.jsonl")
	os.WriteFile(good, []byte(`{"prompt":"a"}`+"\n"+`{"prompt":"b"}`+"\n"+`{"foo":1}`+"\n"), 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("not json\n"), 0o644)
	for _, tt := range []struct {
		path     string
		requests int
		err      string
	}{
		{good, 3, "holds 2 usable requests (1 line skipped: 1 neither messages nor prompt (line 3)); 3 requests would send some twice"},
		{bad, 0, "not a dataset"},
		{good, 2, ""},
	} {
		var cfg matrix.Config
		err := loadDataset(scenarios.Scenario{Dataset: tt.path, Requests: tt.requests}, &cfg)
		switch {
		case tt.err == "" && (err != nil || cfg.Dataset == nil || cfg.Dataset.Format != "completions"):
			t.Errorf("%s: %v", tt.path, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s with %d requests: error %v, want one saying %q", tt.path, tt.requests, err, tt.err)
		}
	}
}

// TestWorkloadEnv: every workload flag's TOKENTAP_* variable loads, and
// lands in the scenario as the flag would.
func TestWorkloadEnv(t *testing.T) {
	for k, v := range map[string]string{
		"TOKENTAP_DATASET": "d.jsonl", "TOKENTAP_REQUESTS": "20", "TOKENTAP_BURSTINESS": "0.5", "TOKENTAP_SWEEP": "yes", "TOKENTAP_SEED": "3",
		"TOKENTAP_PROMPT_TOKENS_STDEV": "10", "TOKENTAP_PROMPT_TOKENS_MIN": "5", "TOKENTAP_PROMPT_TOKENS_MAX": "50",
		"TOKENTAP_OUTPUT_TOKENS_STDEV": "4", "TOKENTAP_OUTPUT_TOKENS_MIN": "2", "TOKENTAP_OUTPUT_TOKENS_MAX": "40",
		"TOKENTAP_RANDOM_RANGE_RATIO": "0.1",
	} {
		t.Setenv(k, v)
	}
	var f matrixFlags
	if err := loadEnv(&f); err != nil {
		t.Fatal(err)
	}
	want := WorkloadFlags{Dataset: "d.jsonl", Requests: "20", Burstiness: "0.5", Sweep: true, Seed: "3",
		PromptTokensStdev: "10", PromptTokensMin: "5", PromptTokensMax: "50", OutputTokensStdev: "4", OutputTokensMin: "2", OutputTokensMax: "40", RandomRangeRatio: "0.1"}
	if f.WorkloadFlags != want {
		t.Errorf("loaded %+v, want %+v", f.WorkloadFlags, want)
	}
}

// TestSweepWithRates: a sweep picks its own rates, so rates given beside
// it (--rate, or a scenario file's) are refused, not dropped in silence.
func TestSweepWithRates(t *testing.T) {
	sc := scenarios.Seed()
	sc.Concurrency, sc.Rates = nil, []float64{1, 2}
	err := WorkloadFlags{Sweep: true}.apply(&sc, false, false, false, true, func(s string) string { return "--" + s })
	if err == nil || !strings.Contains(err.Error(), "--sweep and rates (--rate) are both given: a sweep picks its own rates") {
		t.Fatalf("error %v", err)
	}
}

// TestSweepOfOne: a sweep whose most requests at once is 1 has no
// throughput above its one-at-a-time cell and no rates between: refused.
func TestSweepOfOne(t *testing.T) {
	sc := scenarios.Seed()
	sc.Concurrency = []int{1}
	err := WorkloadFlags{Sweep: true}.apply(&sc, false, false, false, true, func(s string) string { return "--" + s })
	if err == nil || !strings.Contains(err.Error(), "--sweep with concurrency [1]: a sweep's throughput cell is its most requests at once") {
		t.Fatalf("error %v", err)
	}
}
