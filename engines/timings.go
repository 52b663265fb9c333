package engines

import (
	"context"
	"math"

	"github.com/tokentap/tokentap/result"
)

// timingMetric is one figure an engine's /metrics keeps of a part of time
// to first token (METHOD.md §7).
type timingMetric struct {
	part string // result.PartQueue, PartPrefill or PartEngineTTFT
	name string // a histogram's base name (_sum and _count follow), or a counter's full name
	// label and value, when set, pick the samples with that label (TGI's
	// method="prefill").
	label, value string
	// counter: a counter of seconds with no count beside it (llama.cpp's
	// prompt_seconds_total); the requests are the ones tokentap saw.
	counter bool
	// note qualifies what the figure counts.
	note string
}

// timingMetrics names, per engine, the figures of TTFT's parts it keeps.
// vLLM's queue and prefill histograms have buckets from 0.3 s up, too
// coarse for a window's requests: only _sum and _count are read, of every
// histogram alike. vLLM observes TTFT when the first token is made and the
// queue and prefill times when a request finishes (an aborted one too), so
// the window's figures are read once the engine has let go of every
// request (the matrix drains it first).
var timingMetrics = map[string][]timingMetric{
	KindVLLM: {
		{part: result.PartQueue, name: "vllm:request_queue_time_seconds"},
		{part: result.PartPrefill, name: "vllm:request_prefill_time_seconds"},
		{part: result.PartEngineTTFT, name: "vllm:time_to_first_token_seconds"},
	},
	KindSGLang: {
		{part: result.PartQueue, name: "sglang:queue_time_seconds"},
		{part: result.PartEngineTTFT, name: "sglang:time_to_first_token_seconds"},
	},
	KindTGI: {
		{part: result.PartQueue, name: "tgi_request_queue_duration"},
		{part: result.PartPrefill, name: "tgi_batch_inference_duration", label: "method", value: "prefill",
			note: "per prefill batch, which may hold several requests"},
	},
	KindLlamaCpp: {
		{part: result.PartPrefill, name: "llamacpp:prompt_seconds_total", counter: true,
			note: "over the window's requests that got a first token"},
	},
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
	return readTimings(in.Kind, m), nil
}

// readTimings picks kind's TTFT-part figures out of a scrape.
func readTimings(kind string, m Metrics) Timings {
	out := Timings{}
	for _, tm := range timingMetrics[kind] {
		if tm.counter {
			if s, ok := sumWhere(m, tm.name, tm.label, tm.value); ok {
				out[tm.part] = Timing{Seconds: s, Counter: true, Source: source(tm, "GET /metrics "+tm.name+" growth over the window")}
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
			out[tm.part] = Timing{Seconds: s, Count: c, Source: source(tm, "GET /metrics "+name+" _sum/_count growth over the window")}
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
		out[part] = Timing{Seconds: a.Seconds - b.Seconds, Count: a.Count - b.Count, Counter: a.Counter, Source: a.Source}
	}
	return out
}
