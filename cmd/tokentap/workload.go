package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/scenarios"
)

// WorkloadFlags are matrix's workload flags, named as vllm bench serve and
// GuideLLM users would guess them.
type WorkloadFlags struct {
	Dataset    string `env:"DATASET"`
	Requests   string `env:"REQUESTS"`
	Burstiness string `env:"BURSTINESS"`
	Sweep      bool   `env:"SWEEP"`
	Seed       string `env:"SEED"`

	// Length spreads of synthetic prompts, as GuideLLM's synthetic data
	// and vllm bench serve's random dataset name them.
	PromptTokensStdev string `env:"PROMPT_TOKENS_STDEV"`
	PromptTokensMin   string `env:"PROMPT_TOKENS_MIN"`
	PromptTokensMax   string `env:"PROMPT_TOKENS_MAX"`
	OutputTokensStdev string `env:"OUTPUT_TOKENS_STDEV"`
	OutputTokensMin   string `env:"OUTPUT_TOKENS_MIN"`
	OutputTokensMax   string `env:"OUTPUT_TOKENS_MAX"`
	RandomRangeRatio  string `env:"RANDOM_RANGE_RATIO"`
}

func (f *WorkloadFlags) register(fs *cli) {
	fs.StringVar(&f.Dataset, "dataset", f.Dataset, "your prompts in place of synthetic ones: JSONL of {\"messages\": [...]} or {\"prompt\": ...} (optional max_tokens or output_tokens), or ShareGPT JSON; sampled without replacement by --seed; contexts do not apply [TOKENTAP_DATASET]")
	fs.StringVar(&f.Requests, "requests", f.Requests, "end each cell after N requests were sent and ended (as --num-prompts, --max-requests); with --window, whichever comes first [TOKENTAP_REQUESTS]")
	fs.StringVar(&f.Burstiness, "burstiness", f.Burstiness, "gamma shape of --rate cells' gaps, same mean: 1 is Poisson, below 1 burstier (as vllm bench serve --burstiness) [TOKENTAP_BURSTINESS]")
	fs.BoolVar(&f.Sweep, "sweep", f.Sweep, "find the limit: per context, one request at a time, then the throughput (the largest --concurrency that fits), then rates between (as GuideLLM's sweep); the report draws latency against the rate, its knee and, with --slo, the highest rate meeting it [TOKENTAP_SWEEP]")
	fs.StringVar(&f.Seed, "seed", f.Seed, "seed of the dataset's sample, the arrival schedules and drawn lengths (default 0: the same every run) [TOKENTAP_SEED]")
	fs.StringVar(&f.PromptTokensStdev, "prompt-tokens-stdev", f.PromptTokensStdev, "draw each synthetic prompt's length from a normal distribution around its row's context with this deviation, within --prompt-tokens-min/max (as GuideLLM's prompt_tokens_stdev) [TOKENTAP_PROMPT_TOKENS_STDEV]")
	fs.StringVar(&f.PromptTokensMin, "prompt-tokens-min", f.PromptTokensMin, "least drawn prompt length (without a deviation, with --prompt-tokens-max: uniform between) [TOKENTAP_PROMPT_TOKENS_MIN]")
	fs.StringVar(&f.PromptTokensMax, "prompt-tokens-max", f.PromptTokensMax, "most drawn prompt length [TOKENTAP_PROMPT_TOKENS_MAX]")
	fs.StringVar(&f.OutputTokensStdev, "output-tokens-stdev", f.OutputTokensStdev, "draw each request's max_tokens from a normal distribution around --max-output with this deviation, within --output-tokens-min/max (as GuideLLM's output_tokens_stdev) [TOKENTAP_OUTPUT_TOKENS_STDEV]")
	fs.StringVar(&f.OutputTokensMin, "output-tokens-min", f.OutputTokensMin, "least drawn max_tokens (without a deviation, with --output-tokens-max: uniform between) [TOKENTAP_OUTPUT_TOKENS_MIN]")
	fs.StringVar(&f.OutputTokensMax, "output-tokens-max", f.OutputTokensMax, "most drawn max_tokens [TOKENTAP_OUTPUT_TOKENS_MAX]")
	fs.StringVar(&f.RandomRangeRatio, "random-range-ratio", f.RandomRangeRatio, "draw each synthetic prompt's length and max_tokens uniformly within ±ratio of the row's context and --max-output, 0 to below 1 (as vllm bench serve --random-range-ratio) [TOKENTAP_RANDOM_RANGE_RATIO]")
}

// applyLengths lays the length-spread flags over the scenario; the
// scenario's Validate checks them against its rows.
func (f WorkloadFlags) applyLengths(sc *scenarios.Scenario, src func(string) string) error {
	tokens := func(name, v string, p *int) error {
		if v == "" {
			return nil
		}
		n, err := scenarios.ParseTokens(v)
		if err != nil {
			return fmt.Errorf("%s: %v", src(name), err)
		}
		*p = n
		return nil
	}
	for _, t := range []struct {
		name, v string
		p       *int
	}{
		{"prompt-tokens-stdev", f.PromptTokensStdev, &sc.PromptLengths.Stdev},
		{"prompt-tokens-min", f.PromptTokensMin, &sc.PromptLengths.Min},
		{"prompt-tokens-max", f.PromptTokensMax, &sc.PromptLengths.Max},
		{"output-tokens-stdev", f.OutputTokensStdev, &sc.OutputLengths.Stdev},
		{"output-tokens-min", f.OutputTokensMin, &sc.OutputLengths.Min},
		{"output-tokens-max", f.OutputTokensMax, &sc.OutputLengths.Max},
	} {
		if err := tokens(t.name, t.v, t.p); err != nil {
			return err
		}
	}
	if f.RandomRangeRatio != "" {
		r, err := strconv.ParseFloat(strings.TrimSpace(f.RandomRangeRatio), 64)
		if err != nil || !(r >= 0 && r < 1) {
			return fmt.Errorf("%s %q: want a ratio from 0 up to, not including, 1 (0.25: each length uniform within ±25%% of its mean)", src("random-range-ratio"), f.RandomRangeRatio)
		}
		sc.PromptLengths.RangeRatio, sc.OutputLengths.RangeRatio = r, r
	}
	return nil
}

// apply lays the workload flags over the scenario, before the run
// flags' check that there are decode cells. windowGiven: --window (or a
// scenario file's window) was given.
func (f WorkloadFlags) apply(sc *scenarios.Scenario, windowGiven, contextsGiven, prefillGiven, builtin bool, src func(string) string) error {
	if f.Requests != "" {
		v := strings.TrimSpace(f.Requests)
		n, err := strconv.Atoi(v)
		if err != nil && scenarios.KShorthand(v) {
			return fmt.Errorf("%s %q: %s", src("requests"), f.Requests, scenarios.RequestsInFull)
		}
		if err != nil || n < 1 {
			return fmt.Errorf("%s %q: want a whole number of requests, at least 1", src("requests"), f.Requests)
		}
		sc.Requests = n
		if !windowGiven {
			sc.Window = 0 // the count alone ends a cell
		}
	}
	if f.Burstiness != "" {
		b, err := strconv.ParseFloat(strings.TrimSpace(f.Burstiness), 64)
		if err != nil || !(b >= scenarios.MinBurstiness) || b > scenarios.MaxBurstiness {
			return fmt.Errorf("%s %q: want a gamma shape from %g to %d (1: Poisson; 0.25: bursty)", src("burstiness"), f.Burstiness, scenarios.MinBurstiness, scenarios.MaxBurstiness)
		}
		sc.Burstiness = b
	}
	if err := f.applyLengths(sc, src); err != nil {
		return err
	}
	if f.Seed != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(f.Seed), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%s %q: want a whole number, 0 or more", src("seed"), f.Seed)
		}
		sc.Seed = n
	}
	if f.Sweep {
		sc.Sweep = true
	}
	if sc.Sweep && len(sc.Rates) > 0 {
		return fmt.Errorf("%s and rates (%s) are both given: a sweep picks its own rates (one request at a time, the engine's throughput, then rates between them); drop one", src("sweep"), src("rate"))
	}
	if sc.Sweep {
		if len(sc.Concurrency) == 0 {
			sc.Concurrency = scenarios.Seed().Concurrency
		}
		if slices.Max(sc.Concurrency) < 2 {
			return fmt.Errorf("%s with concurrency %v: a sweep's throughput cell is its most requests at once, and its rates lie between that and one at a time; give a level above 1 (or no --concurrency: the seed's, up to %d)",
				src("sweep"), sc.Concurrency, slices.Max(scenarios.Seed().Concurrency))
		}
	}
	if f.Dataset != "" {
		sc.Dataset = f.Dataset
	}
	if sc.Dataset != "" {
		if contextsGiven {
			return fmt.Errorf("%s and %s are both given: a dataset's prompts have their own lengths; contexts are for synthetic prompts", src("dataset"), src("contexts"))
		}
		sc.Contexts = []int{0} // one row: the dataset's
		if builtin && !prefillGiven {
			sc.Prefill = nil // the seed's prefill rows measure synthetic prompts: only when asked
		}
	}
	return nil
}

// loadDataset reads the scenario's dataset before any load; nil without
// one.
func loadDataset(sc scenarios.Scenario, cfg *matrix.Config) error {
	if sc.Dataset == "" {
		return nil
	}
	d, err := dataset.Load(sc.Dataset)
	if err != nil {
		return err
	}
	if sc.Requests > len(d.Entries) {
		return fmt.Errorf("%s holds %d usable requests (%s); %d requests would send some twice: give --requests %d or fewer, or a larger dataset",
			sc.Dataset, len(d.Entries), d.SkipSummary(), sc.Requests, len(d.Entries))
	}
	if cfg.Shard.Sharded() && sc.Requests > 0 && sc.Requests < cfg.Shard.Count {
		return errors.New("--requests is split among the shards: give at least one request per shard")
	}
	cfg.Dataset = d
	return nil
}

// datasetAPI is the API a dataset format's requests go to.
func datasetAPI(format string) string {
	if format == dataset.Completions {
		return "completions"
	}
	return "chat"
}
