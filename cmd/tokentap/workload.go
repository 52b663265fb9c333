package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/scenarios"
)

// workloadFlags are matrix's workload flags, named as vllm bench serve and
// GuideLLM users would guess them.
type workloadFlags struct {
	Dataset    string `env:"DATASET"`
	Requests   string `env:"REQUESTS"`
	Burstiness string `env:"BURSTINESS"`
	Sweep      bool   `env:"SWEEP"`
	Seed       string `env:"SEED"`
}

func (f *workloadFlags) register(fs *cli) {
	fs.StringVar(&f.Dataset, "dataset", f.Dataset, "your prompts in place of synthetic ones: JSONL of {\"messages\": [...]} or {\"prompt\": ...} (optional max_tokens or output_tokens), or ShareGPT JSON; sampled without replacement by --seed; contexts do not apply [TOKENTAP_DATASET]")
	fs.StringVar(&f.Requests, "requests", f.Requests, "end each cell after N requests were sent and ended (as --num-prompts, --max-requests); with --window, whichever comes first [TOKENTAP_REQUESTS]")
	fs.StringVar(&f.Burstiness, "burstiness", f.Burstiness, "gamma shape of --rate cells' gaps, same mean: 1 is Poisson, below 1 burstier (as vllm bench serve --burstiness) [TOKENTAP_BURSTINESS]")
	fs.BoolVar(&f.Sweep, "sweep", f.Sweep, "find the limit: per context, one request at a time, then the throughput (the largest --concurrency that fits), then rates between (as GuideLLM's sweep) [TOKENTAP_SWEEP]")
	fs.StringVar(&f.Seed, "seed", f.Seed, "seed of the dataset's sample and the arrival schedules (default 0: the same every run) [TOKENTAP_SEED]")
}

// apply lays the workload flags over the scenario, before the run
// flags' check that there are decode cells. windowGiven: --window (or a
// scenario file's window) was given.
func (f workloadFlags) apply(sc *scenarios.Scenario, windowGiven, contextsGiven, prefillGiven, builtin bool, src func(string) string) error {
	if f.Requests != "" {
		n, err := strconv.Atoi(strings.TrimSpace(f.Requests))
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
		if err != nil || !(b > 0) || b > scenarios.MaxBurstiness {
			return fmt.Errorf("%s %q: want a gamma shape above 0 and at most %d (1: Poisson; 0.25: bursty)", src("burstiness"), f.Burstiness, scenarios.MaxBurstiness)
		}
		sc.Burstiness = b
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
	if sc.Sweep {
		sc.Rates = nil
		if len(sc.Concurrency) == 0 {
			sc.Concurrency = scenarios.Seed().Concurrency
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
