package engines

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// timingMetric is one figure an engine's /metrics keeps of a part of time
// to first token (METHOD.md §7).
type timingMetric struct {
	part string // result.PartQueue, PartValidation, PartPrefill or PartEngineTTFT
	name string // a histogram's base name (_sum and _count follow), or a counter's full name
	// label and value, when set, pick the samples with that label (SGLang's
	// stage="prefill_forward").
	label, value string
	// counter: a counter of seconds with no count beside it (llama.cpp's
	// prompt_seconds_total); the requests are the ones tokentap saw.
	counter bool
	// finishedOnly: the engine observes it only for requests that finish
	// normally, never for one aborted (a client that left, a cut stream).
	finishedOnly bool
	// note qualifies what the figure counts.
	note string
}

// timingMetrics names, per engine, the figures of TTFT's parts it keeps,
// and which requests each counts (METHOD.md §7, with the engines' source
// files):
//
//   - vLLM v1 observes TTFT when a request's first token is made
//     (OutputProcessor._update_stats_from_output), and its queue and
//     prefill times only when it finishes normally
//     (_update_stats_from_finished, called from process_outputs for a
//     finish_reason the engine gave; abort_requests pops an aborted
//     request's state without it: vllm/v1/engine/output_processor.py).
//     Its queue and prefill buckets start at 0.3 s, too coarse for a
//     window's requests: only _sum and _count are read, of every histogram
//     alike.
//   - SGLang (--enable-metrics) observes queue time when a request leaves
//     its queue, TTFT at the first token, and each stage of a request as it
//     ends: sglang:per_stage_req_latency_seconds{stage="prefill_forward"}
//     (python/sglang/srt/observability/metrics_collector.py, observed from
//     req_time_stats.py).
//   - TGI records tgi_request_validation_duration and
//     tgi_request_queue_duration only when a request ends successfully
//     (router/src/server.rs, beside tgi_request_success). Its
//     tgi_batch_inference_duration{method="prefill"} is per batch, over
//     every request of it, and is not read.
//   - llama.cpp: llamacpp:prompt_seconds_total, whose meaning depends on
//     the build (llamaPromptSeconds).
var timingMetrics = map[string][]timingMetric{
	KindVLLM: {
		{part: result.PartQueue, name: "vllm:request_queue_time_seconds", finishedOnly: true, note: "of the requests that finished (vLLM drops an aborted request's)"},
		{part: result.PartPrefill, name: "vllm:request_prefill_time_seconds", finishedOnly: true, note: "of the requests that finished (vLLM drops an aborted request's)"},
		{part: result.PartEngineTTFT, name: "vllm:time_to_first_token_seconds"},
	},
	KindSGLang: {
		{part: result.PartQueue, name: "sglang:queue_time_seconds"},
		{part: result.PartPrefill, name: "sglang:per_stage_req_latency_seconds", label: "stage", value: "prefill_forward"},
		{part: result.PartEngineTTFT, name: "sglang:time_to_first_token_seconds"},
	},
	KindTGI: {
		{part: result.PartValidation, name: "tgi_request_validation_duration", finishedOnly: true, note: "of the requests that succeeded (TGI records it only then)"},
		{part: result.PartQueue, name: "tgi_request_queue_duration", finishedOnly: true, note: "of the requests that succeeded (TGI records it only then)"},
	},
	KindLlamaCpp: {
		{part: result.PartPrefill, name: "llamacpp:prompt_seconds_total", counter: true,
			note: "over the window's requests that got a first token"},
	},
}

// LlamaBatchPromptBuild is the first llama.cpp build whose
// llamacpp:prompt_seconds_total is the wall time of the batches that
// carried prompt tokens (PR #26920, commit decaf508b, 2026-08-13: a batch's
// time is counted once, shared by the prompts in it, and includes the
// other slots' decode work in it). Before it, the counter summed each
// prompt's own processing time (its first token − the start of its
// prompt), added when the prompt's first token was made
// (server_metrics::on_prompt_eval, tools/server/server-context.cpp).
const LlamaBatchPromptBuild = 10406

// llamaBuild reads the build number of a llama.cpp build_info such as
// "b10573-82bb48500"; ok is false when it has none.
func llamaBuild(version string) (int, bool) {
	v, ok := strings.CutPrefix(strings.TrimSpace(version), "b")
	if !ok {
		return 0, false
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		v = v[:i]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// llamaPromptSeconds says what llama.cpp's prompt_seconds_total means at
// version: perPrompt when it sums each prompt's own processing time (a
// part of each request's TTFT), with why it is or is not.
func llamaPromptSeconds(version string) (perPrompt bool, why string) {
	n, ok := llamaBuild(version)
	switch {
	case !ok:
		return false, fmt.Sprintf("llama.cpp's build (%q) does not say which meaning its prompt_seconds_total has: each prompt's processing time before b%d, the wall time of the batches carrying prompt tokens from it", version, LlamaBatchPromptBuild)
	case n >= LlamaBatchPromptBuild:
		return false, fmt.Sprintf("llama.cpp b%d's prompt_seconds_total is the wall time of the batches carrying prompt tokens (from b%d, PR #26920), shared by the prompts in a batch and holding other slots' decode work: not a time of each request", n, LlamaBatchPromptBuild)
	}
	return true, fmt.Sprintf("llama.cpp b%d's prompt_seconds_total: the sum of each prompt's processing time (before b%d)", n, LlamaBatchPromptBuild)
}

// Timing is one TTFT part's figure as an engine keeps it: seconds summed
// over Count requests since the engine started (Count is 0 for a counter
// of seconds alone, see timingMetric.counter).
type Timing struct {
	Seconds float64
	Count   float64
	// Counter: Count is not the engine's; the caller divides by the
	// requests it sent.
	Counter bool
	// FinishedOnly: the engine counts only the requests that finished
	// normally (not one aborted).
	FinishedOnly bool
	// Source names the engine's figure.
	Source string
}

// Timings are an engine's TTFT-part figures by part (result.Part…).
type Timings map[string]Timing

// HasTimings reports whether the engine kind keeps TTFT-part figures at
// all (the engine may still not expose them: Timings says).
func HasTimings(kind string) bool { return len(timingMetrics[kind]) > 0 }

// Timings reads the engine's TTFT-part figures from its /metrics: an empty
// map, with a nil error, where the engine keeps none (Ollama, a plain
// OpenAI server, llama-server without --metrics, an engine whose version
// lacks them). Subtract two readings (Since) for a window.
func (in *Info) Timings(ctx context.Context) (Timings, error) {
	ms := timingMetrics[in.Kind]
	if len(ms) == 0 || in.c == nil || !in.Gauges {
		return Timings{}, nil
	}
	m, err := in.scrape(ctx)
	if err != nil {
		return nil, err
	}
	return readTimings(in.Kind, in.Version, m), nil
}

// TimingsNote says what of the engine's TTFT figures is not read, and why
// (llama.cpp's prompt_seconds_total at a build where it is no time of each
// request); "" when everything is.
func (in *Info) TimingsNote() string {
	if in.Kind != KindLlamaCpp {
		return ""
	}
	if per, why := llamaPromptSeconds(in.Version); !per {
		return why
	}
	return ""
}

// readTimings picks kind's TTFT-part figures out of a scrape; version is
// the engine's, which says what llama.cpp's counter means.
func readTimings(kind, version string, m Metrics) Timings {
	out := Timings{}
	for _, tm := range timingMetrics[kind] {
		if tm.counter {
			per, why := llamaPromptSeconds(version)
			if !per {
				continue
			}
			if s, ok := sumWhere(m, tm.name, tm.label, tm.value); ok {
				out[tm.part] = Timing{Seconds: s, Counter: true, Source: "GET /metrics " + tm.name + " growth over the window, " + tm.note + " (" + why + ")"}
			}
			continue
		}
		s, okS := sumWhere(m, tm.name+"_sum", tm.label, tm.value)
		c, okC := sumWhere(m, tm.name+"_count", tm.label, tm.value)
		if okS && okC {
			name := tm.name
			if tm.label != "" {
				name += "{" + tm.label + `="` + tm.value + `"}`
			}
			out[tm.part] = Timing{Seconds: s, Count: c, FinishedOnly: tm.finishedOnly, Source: source(tm, "GET /metrics "+name+" _sum/_count growth over the window")}
		}
	}
	return out
}

func source(tm timingMetric, s string) string {
	if tm.note != "" {
		return s + ", " + tm.note
	}
	return s
}

// sumWhere sums the samples called name, only those with label = value
// when label is set.
func sumWhere(m Metrics, name, label, value string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range m {
		if s.Name != name || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			continue
		}
		if label != "" {
			if v, ok := s.Label(label); !ok || v != value {
				continue
			}
		}
		sum += s.Value
		found = true
	}
	return sum, found
}

// Since is what grew from before to t: per part present in both, the
// seconds and requests added. A part that went backwards (the engine
// restarted) is left out.
func (t Timings) Since(before Timings) Timings {
	out := Timings{}
	for part, a := range t {
		b, ok := before[part]
		if !ok || a.Seconds < b.Seconds || a.Count < b.Count {
			continue
		}
		out[part] = Timing{Seconds: a.Seconds - b.Seconds, Count: a.Count - b.Count, Counter: a.Counter, FinishedOnly: a.FinishedOnly, Source: a.Source}
	}
	return out
}
