//go:build live

package live

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// llamaSplit checks the TTFT split of every Valid cell of a matrix run on
// llama-server with --metrics: the prefill part is each ended request's
// own timings.prompt_ms (preferred), or on a build before b10406 the
// llamacpp:prompt_seconds_total growth over the window's requests (from
// b10406 it is batch wall time, not read), positive and inside the TTFT
// tokentap measured of the same requests, and every request's own
// timings.prompt_ms (where its usage came) inside its own TTFT. A cell
// none of whose requests ended in its window (a slow machine) has only the
// counter, and with a build that does not say (or from b10406) no split.
func llamaSplit(t *testing.T, res *result.Result, recs []record.Record) {
	ended := map[string]bool{} // cell tag → a request of it ended with timings
	for _, r := range recs {
		ended[r.Tag] = ended[r.Tag] || r.EnginePrefillSet
	}
	counterRead := true
	for _, n := range res.Notes {
		counterRead = counterRead && !strings.Contains(n, "TTFT's prefill is not read from the engine's counter")
	}
	for _, c := range res.Decode {
		if c.Status != result.Valid {
			continue
		}
		s := c.TTFTSplit
		if s == nil && !counterRead && !ended[fmt.Sprintf("C=%d N=%d", c.Context, c.Concurrency)] {
			t.Logf("%4s × %d: no split: none of its requests ended in the window, and the engine's counter is not read (a note says why)", matrix.TokenLabel(c.Context), c.Concurrency)
			continue
		}
		if s == nil || s.Prefill == nil || s.UnaccountedMs == nil {
			t.Errorf("cell %s × %d: split %+v", matrix.TokenLabel(c.Context), c.Concurrency, s)
			continue
		}
		t.Logf("%4s × %d: TTFT %.1f ms = prefill %.1f ms (%s) + %.1f ms not accounted by the engine, over %d requests",
			matrix.TokenLabel(c.Context), c.Concurrency, s.ClientMs, s.Prefill.Ms, s.Prefill.Source, *s.UnaccountedMs, s.ClientRequests)
		if !(strings.Contains(s.Prefill.Source, "timings.prompt_ms") || strings.Contains(s.Prefill.Source, "llamacpp:prompt_seconds_total")) || s.Prefill.Ms <= 0 || s.Prefill.Ms > s.ClientMs || s.Queue != nil || s.EngineTTFT != nil {
			t.Errorf("cell %s × %d: prefill %+v against TTFT %.1f ms", matrix.TokenLabel(c.Context), c.Concurrency, s.Prefill, s.ClientMs)
		}
	}
	timed := 0
	for _, r := range recs {
		ttft, ok := r.TTFT()
		if !r.EnginePrefillSet || !ok {
			continue
		}
		timed++
		if r.EnginePrefill <= 0 || r.EnginePrefill > ttft {
			t.Errorf("request %s: the engine's prompt processing %v, TTFT %v", r.ID, r.EnginePrefill, ttft)
		}
	}
	if timed == 0 {
		t.Error("no request carried llama.cpp's timings.prompt_ms")
	}
}

// llamaSplitFromTimings runs a short matrix on a llama-server without
// --metrics: the split comes from each ended request's timings.prompt_ms.
func llamaSplitFromTimings(t *testing.T, bin string) {
	port := freePort(t)
	s := start(t, llamaServer, bin, nil, "-m", modelPath, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-t", "1", "-c", "8192", "-np", "2")
	s.url = "http://127.0.0.1:" + strconv.Itoa(port)
	s.waitOK(t, s.url+"/health", 60*time.Second)
	sc := scenarios.Scenario{Name: "live-llama-timings", Contexts: []int{0, 1024}, Concurrency: []int{1, 2}, Window: 3 * time.Second, MaxOutput: 32, API: "chat"}
	res, err := matrix.Run(context.Background(), matrix.Config{Target: replay.Target{BaseURL: s.url, IdleTimeout: idle}, Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Decode {
		sp := c.TTFTSplit
		if c.Status != result.Valid || sp == nil || sp.Prefill == nil || !strings.Contains(sp.Prefill.Source, "timings.prompt_ms") ||
			sp.Prefill.Ms <= 0 || sp.Prefill.Ms > sp.ClientMs || sp.UnaccountedMs == nil {
			t.Errorf("cell %s × %d (%s): split %+v", matrix.TokenLabel(c.Context), c.Concurrency, c.Status, sp)
			continue
		}
		t.Logf("%4s × %d (no --metrics): TTFT %.1f ms = prefill %.1f ms (timings.prompt_ms) + %.1f ms, over %d ended requests",
			matrix.TokenLabel(c.Context), c.Concurrency, sp.ClientMs, sp.Prefill.Ms, *sp.UnaccountedMs, sp.ClientRequests)
	}
}

// llamaBandwidthInputs: the decode limit's model inputs come from the
// engine itself and equal what tinygguf wrote: the weights' bytes from
// /v1/models meta.size, the KV layout from the GGUF /props names, the KV
// dtype from the launch command (f16, llama.cpp's default); with a given
// bandwidth every Valid cell gets its limit.
func llamaBandwidthInputs(t *testing.T, res *result.Result) {
	b := res.Bandwidth
	if b == nil {
		t.Fatal("no bandwidth inputs")
	}
	t.Logf("inputs: weights %d bytes (%s); %d layers × %d KV heads × %d head dim (%s); KV %s (%s); %.0f bytes per token",
		b.WeightBytes, b.WeightSource, b.Layers, b.KVHeads, b.HeadDim, b.ShapeSource, b.KVDType, b.KVDTypeSource, b.KVBytesPerToken)
	if len(b.Missing) > 0 || b.WeightBytes != modelCfg.WeightBytes() || b.Layers != modelCfg.Layers || b.KVHeads != modelCfg.KVHeads ||
		b.HeadDim != modelCfg.HeadDim() || b.KVBytesPerToken != float64(modelCfg.KVBytesPerToken()) || b.KVDType != "f16" ||
		!strings.Contains(b.WeightSource, "meta.size") || !strings.Contains(b.ShapeSource, "GGUF metadata of "+modelPath) {
		t.Errorf("inputs %+v; tinygguf says %d bytes, %d layers, %d KV heads of %d, %d bytes per token", b,
			modelCfg.WeightBytes(), modelCfg.Layers, modelCfg.KVHeads, modelCfg.HeadDim(), modelCfg.KVBytesPerToken())
	}
	for _, c := range res.Decode {
		if c.Status == result.Valid && c.DecodeLimit == nil {
			t.Errorf("cell %s × %d: no limit", matrix.TokenLabel(c.Context), c.Concurrency)
		}
		if d := c.DecodeLimit; d != nil {
			t.Logf("%4s × %d: %.1f tok/s is %.1f%% of the %.0f tok/s a %s memory allows at %.2f active, %.0f tokens each",
				matrix.TokenLabel(c.Context), c.Concurrency, c.TotalTokPerSec, 100*d.ShareOfBandwidthLimit, d.BandwidthLimitTokPerSec,
				fmtGBs(b.GBPerSec), d.Batch, d.SeqTokens)
		}
	}
}

func fmtGBs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " GB/s" }

// llamaLimits are the matrix settings the live run's bandwidth check
// needs: a CPU has no GPU in the table, so the bandwidth is given (what
// the figure means on a CPU is beside the point: the inputs from the
// engine are), and the launch command says the KV cache type.
func llamaLimits(flags []string) (matrix.Limits, result.Engine) {
	return matrix.Limits{GPU: bandwidth.GPUBandwidth{GBPerSec: 20, From: "given for the live tier (a CPU)"}, ReadModelFile: true},
		result.Engine{LaunchCommand: "llama-server -m " + modelPath + " " + strings.Join(flags, " ")}
}

// ollamaBandwidthInputs: Ollama's /api/show gives the weights' bytes (its
// tensors' types and shapes) and the KV layout (model_info), equal to what
// tinygguf wrote; it says neither the KV cache type nor, on a CPU, any
// GPU, so both are named missing and no cell gets a limit. It has no
// TTFT figures either: the run says so once.
func ollamaBandwidthInputs(t *testing.T, res *result.Result) {
	b := res.Bandwidth
	if b == nil || b.WeightBytes != modelCfg.WeightBytes() || b.Layers != modelCfg.Layers || b.KVHeads != modelCfg.KVHeads ||
		b.HeadDim != modelCfg.HeadDim() || !strings.Contains(b.WeightSource, "/api/show") || !strings.Contains(b.ShapeSource, "/api/show") {
		t.Fatalf("inputs %+v; tinygguf says %d bytes, %d layers, %d KV heads of %d", b, modelCfg.WeightBytes(), modelCfg.Layers, modelCfg.KVHeads, modelCfg.HeadDim())
	}
	missing := strings.Join(b.Missing, "; ")
	if len(b.Missing) != 2 || !strings.Contains(missing, "GPU memory bandwidth") || !strings.Contains(missing, "KV cache dtype") {
		t.Errorf("missing %q: want the GPU bandwidth and the KV cache dtype", b.Missing)
	}
	t.Logf("inputs: weights %d bytes (%s); %d layers × %d KV heads × %d (%s); missing: %s", b.WeightBytes, b.WeightSource,
		b.Layers, b.KVHeads, b.HeadDim, b.ShapeSource, missing)
	notes := 0
	for _, n := range res.Notes {
		if strings.Contains(n, "TTFT is not split") {
			notes++
		}
	}
	for _, c := range res.Decode {
		if c.DecodeLimit != nil || c.TTFTSplit != nil {
			t.Errorf("cell %s × %d has a limit or a split", matrix.TokenLabel(c.Context), c.Concurrency)
		}
	}
	if notes != 1 {
		t.Errorf("%d notes that TTFT is not split, want one: %q", notes, res.Notes)
	}
}
