package engines

import (
	"context"
)

// Allocation is how an engine gives a request its KV cache, which decides
// what a cell's KV need means (METHOD.md §3, the per-engine rule).
type Allocation int

const (
	// AllocReserve: a request reserves prompt + max_tokens when it is
	// admitted (TGI: its router admits against max_batch_total_tokens with
	// every request's max_new_tokens counted); also the rule for an engine
	// tokentap does not know, as the seed pages' Over capacity is.
	AllocReserve Allocation = iota
	// AllocPerStep: blocks are taken as tokens are computed and a running
	// request is preempted when none is free (vLLM v1's scheduler,
	// vllm/v1/core/sched/scheduler.py, counted by vllm:num_preemptions).
	AllocPerStep
	// AllocRatio: a request is admitted against its prompt plus
	// max_new_tokens × a new-token ratio that decays while nothing runs
	// out, and a running one is retracted when decode does (SGLang,
	// sglang:num_retracted_requests_total).
	AllocRatio
	// AllocSlots: per token within fixed slots (llama.cpp, Ollama), whose
	// capacity is bounded by what their answers say (see KVMin, KVMax).
	AllocSlots
)

// AllocationOf is the allocation rule of an engine kind.
func AllocationOf(kind string) Allocation {
	switch kind {
	case KindVLLM:
		return AllocPerStep
	case KindSGLang:
		return AllocRatio
	case KindLlamaCpp, KindOllama:
		return AllocSlots
	}
	return AllocReserve
}

// Reserves reports whether a request holds prompt + max_tokens from its
// admission on: then a cell's reservations decide whether it fits, before
// any load (the seed pages' Over capacity).
func (a Allocation) Reserves() bool { return a == AllocReserve }

func (a Allocation) String() string {
	switch a {
	case AllocPerStep:
		return "per step, preempting when full"
	case AllocRatio:
		return "prompt + max_new_tokens × a new-token ratio, retracting when full"
	case AllocSlots:
		return "per token, in fixed slots"
	}
	return "prompt + max_tokens reserved on admission"
}

// preemptionCounters are the cumulative counters of requests an engine
// took back from running because its KV cache ran out, by kind: vLLM
// 0.32's vllm:num_preemptions (a counter: _total in the exposition;
// vllm/v1/metrics/loggers.py) and SGLang's retractions.
var preemptionCounters = map[string][]string{
	KindVLLM:   {"vllm:num_preemptions_total", "vllm:num_preemptions"},
	KindSGLang: {"sglang:num_retracted_requests_total"},
}

// Preemptions reads the engine's preemption counter since it started
// (diff two readings for a window) and names it. ok is false, with a nil
// error, where the engine has none.
func (in *Info) Preemptions(ctx context.Context) (n int64, name string, ok bool, err error) {
	names := preemptionCounters[in.Kind]
	if len(names) == 0 || in.c == nil {
		return 0, "", false, nil
	}
	m, err := in.scrape(ctx)
	if err != nil {
		return 0, "", false, err
	}
	for _, nm := range names {
		if v, found := m.Sum(nm); found {
			return int64(v + 0.5), nm, true, nil
		}
	}
	// SGLang's counter is there from its first retraction on (a labelled
	// counter); its gauge of the last batch's retractions is there from
	// the start, and with it the counter's absence is 0.
	if w, ok := preemptionWitness[in.Kind]; ok {
		if _, found := m.Sum(w); found {
			return 0, names[0], true, nil
		}
	}
	return 0, "", false, nil
}

// preemptionWitness is a metric present from an engine's start whose
// presence makes its preemption counter's absence a 0.
var preemptionWitness = map[string]string{KindSGLang: "sglang:num_retracted_reqs"}
