package engines

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestReadTimings: each engine's TTFT parts come from _sum and _count
// (summed over label sets), TGI's prefill only from its prefill batches,
// llama.cpp's as a counter of seconds without a count.
func TestReadTimings(t *testing.T) {
	vllm, err := os.ReadFile("testdata/vllm/metrics_timings.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind, version, page string
		want                map[string]Timing
	}{
		{KindVLLM, "", string(vllm), map[string]Timing{
			result.PartEngineTTFT: {Seconds: 2, Count: 16},
			result.PartQueue:      {Seconds: 0.25, Count: 16, FinishedOnly: true},
			result.PartPrefill:    {Seconds: 1, Count: 16, FinishedOnly: true},
		}},
		{KindSGLang, "", `sglang:queue_time_seconds_sum 3
sglang:queue_time_seconds_count 6
sglang:time_to_first_token_seconds_sum 9
sglang:time_to_first_token_seconds_count 6
sglang:per_stage_req_latency_seconds_sum{stage="prefill_forward"} 1.2
sglang:per_stage_req_latency_seconds_count{stage="prefill_forward"} 6
sglang:per_stage_req_latency_seconds_sum{stage="decode_forward"} 40
sglang:per_stage_req_latency_seconds_count{stage="decode_forward"} 6
`, map[string]Timing{result.PartQueue: {Seconds: 3, Count: 6}, result.PartEngineTTFT: {Seconds: 9, Count: 6}, result.PartPrefill: {Seconds: 1.2, Count: 6}}},
		// TGI: validation and queue, kept only of requests that succeed;
		// the per-batch prefill is not a part of each request's TTFT.
		{KindTGI, "3.3.4", `tgi_request_queue_duration_sum 0.5
tgi_request_queue_duration_count 5
tgi_request_validation_duration_sum 0.01
tgi_request_validation_duration_count 5
tgi_batch_inference_duration_sum{method="prefill"} 2
tgi_batch_inference_duration_count{method="prefill"} 4
tgi_batch_inference_duration_sum{method="decode"} 90
tgi_batch_inference_duration_count{method="decode"} 900
`, map[string]Timing{result.PartQueue: {Seconds: 0.5, Count: 5, FinishedOnly: true}, result.PartValidation: {Seconds: 0.01, Count: 5, FinishedOnly: true}}},
		// llama.cpp's counter: each prompt's time before b10406, read;
		// batch wall time from it, or an unknown build, not read.
		{KindLlamaCpp, "b10400-3f545becc", "llamacpp:prompt_seconds_total 0.121368\nllamacpp:requests_deferred 0\n",
			map[string]Timing{result.PartPrefill: {Seconds: 0.121368, Counter: true}}},
		{KindLlamaCpp, "b10406-decaf508b", "llamacpp:prompt_seconds_total 0.121368\n", map[string]Timing{}},
		{KindLlamaCpp, "", "llamacpp:prompt_seconds_total 0.121368\n", map[string]Timing{}},
		{KindOllama, "", "anything 1\n", map[string]Timing{}},
		{KindVLLM, "", "vllm:num_requests_waiting 0\nvllm:time_to_first_token_seconds_sum 1\n", map[string]Timing{}}, // no _count: no figure
	}
	for _, tt := range tests {
		m, _ := ParseMetrics([]byte(tt.page))
		got := readTimings(tt.kind, tt.version, m)
		if len(got) != len(tt.want) {
			t.Errorf("%s %s: %d parts %+v, want %d", tt.kind, tt.version, len(got), got, len(tt.want))
		}
		for part, w := range tt.want {
			g := got[part]
			if math.Abs(g.Seconds-w.Seconds) > 1e-12 || g.Count != w.Count || g.Counter != w.Counter || g.FinishedOnly != w.FinishedOnly || !strings.HasPrefix(g.Source, "GET /metrics ") {
				t.Errorf("%s %s %s: %+v, want %+v", tt.kind, tt.version, part, g, w)
			}
		}
	}
	if s := readTimings(KindSGLang, "", mustMetrics(t, "sglang:per_stage_req_latency_seconds_sum{stage=\"prefill_forward\"} 1\nsglang:per_stage_req_latency_seconds_count{stage=\"prefill_forward\"} 1\n"))[result.PartPrefill].Source; !strings.Contains(s, `{stage="prefill_forward"}`) {
		t.Errorf("SGLang prefill source %q: should name the stage", s)
	}
	if s := readTimings(KindLlamaCpp, "b9000", mustMetrics(t, "llamacpp:prompt_seconds_total 1\n"))[result.PartPrefill].Source; !strings.Contains(s, "b9000") || !strings.Contains(s, "each prompt's processing time") {
		t.Errorf("llama.cpp source %q: should say the build and the meaning", s)
	}
}

// TestLlamaPromptSeconds: the counter's meaning by build number.
func TestLlamaPromptSeconds(t *testing.T) {
	for _, tt := range []struct {
		version string
		per     bool
		says    string
	}{
		{"b10405-abc", true, "b10405's prompt_seconds_total: the sum of each prompt's"},
		{"b10406-decaf508b", false, "wall time of the batches"},
		{"b10573", false, "b10573's prompt_seconds_total is the wall time"},
		{"", false, "does not say which meaning"},
		{"3.3.4", false, "does not say which meaning"},
		{"bx", false, "does not say"},
	} {
		per, why := llamaPromptSeconds(tt.version)
		if per != tt.per || !strings.Contains(why, tt.says) {
			t.Errorf("%q: %v, %q; want %v and %q", tt.version, per, why, tt.per, tt.says)
		}
	}
}

func mustMetrics(t *testing.T, s string) Metrics {
	t.Helper()
	m, err := ParseMetrics([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTimingsSince(t *testing.T) {
	before := Timings{result.PartQueue: {Seconds: 1, Count: 10, Source: "q"}, result.PartPrefill: {Seconds: 5, Count: 10}, result.PartEngineTTFT: {Seconds: 9, Count: 10}}
	after := Timings{result.PartQueue: {Seconds: 1.5, Count: 14, Source: "q"}, result.PartPrefill: {Seconds: 1, Count: 2}, "new": {Seconds: 1, Count: 1}}
	d := after.Since(before)
	if q := d[result.PartQueue]; math.Abs(q.Seconds-0.5) > 1e-12 || q.Count != 4 || q.Source != "q" {
		t.Errorf("queue delta %+v", q)
	}
	if _, ok := d[result.PartPrefill]; ok {
		t.Error("a part that went backwards (engine restart) has a delta")
	}
	if _, ok := d["new"]; ok {
		t.Error("a part missing from the first reading has a delta")
	}
	if _, ok := d[result.PartEngineTTFT]; ok {
		t.Error("a part missing from the second reading has a delta")
	}
}

// FuzzLlamaBuild: reading a build_info never panics, and a build number
// read is positive and the digits after its "b".
func FuzzLlamaBuild(f *testing.F) {
	for _, s := range []string{"b10573-82bb48500", "b10406", "b", "", "3.3.4", " b12x", "b-1", "b99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, ok := llamaBuild(in)
		digits := strings.TrimPrefix(strings.TrimSpace(in), "b")
		if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			digits = digits[:i]
		}
		if d, err := strconv.Atoi(digits); ok && (n <= 0 || err != nil || d != n || !strings.HasPrefix(strings.TrimSpace(in), "b")) {
			t.Fatalf("llamaBuild(%q) = %d", in, n)
		}
		per, why := llamaPromptSeconds(in)
		if why == "" || (per && (!ok || n >= LlamaBatchPromptBuild)) {
			t.Fatalf("llamaPromptSeconds(%q) = %v, %q", in, per, why)
		}
	})
}
