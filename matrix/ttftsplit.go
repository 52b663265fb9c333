package matrix

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// This file reads the engine's TTFT figures around a window (METHOD.md §7).

// beyondStart reads the engine's TTFT-part figures before a window; nil
// when it keeps none.
func (r *runner) beyondStart(ctx context.Context) engines.Timings {
	if !r.beyond.timed || r.sharded() {
		// A shard's engine figures would count every shard's requests.
		return nil
	}
	t, err := r.settledTimings(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("matrix: reading the engine's TTFT figures failed; this cell gets no TTFT split")
		return nil
	}
	return t
}

// settledTimings reads the engine's TTFT figures once two readings 50 ms
// apart agree (for at most a second): an engine idle by its gauges may
// still be observing the requests that just finished (vLLM 0.32 records
// its histograms from the output processor, after the scheduler's
// gauges), and a reading taken between would count a warm-up request in
// the window, or leave one of the window's out (live vllm at load 12: the
// engine counted 40 requests for tokentap's 39).
func (r *runner) settledTimings(ctx context.Context) (engines.Timings, error) {
	t, err := r.info.Timings(ctx)
	for i := 0; err == nil && i < 20; i++ {
		select {
		case <-ctx.Done():
			return t, nil
		case <-time.After(50 * time.Millisecond):
		}
		again, aerr := r.info.Timings(ctx)
		if aerr != nil || sameCounts(t, again) {
			return t, nil
		}
		t = again
	}
	return t, err
}

// sameCounts says whether two readings hold the same counts and sums.
func sameCounts(a, b engines.Timings) bool {
	if len(a) != len(b) {
		return false
	}
	for name, x := range a {
		if y, ok := b[name]; !ok || x.Count != y.Count || x.Seconds != y.Seconds {
			return false
		}
	}
	return true
}

// splitCell adds a measured cell's TTFT split (cell.Split): the engine's
// figures are read again once it let go of the window's requests (vLLM
// observes queue and prefill times when a request finishes, and only for
// one that finished normally), their growth over the window beside
// tokentap's TTFT of the same requests.
func (r *runner) splitCell(ctx context.Context, out *result.Cell, recs []record.Record, w cell.Window, before engines.Timings) {
	var parts []cell.EnginePart
	if before != nil {
		r.drain(ctx)
		if after, err := r.settledTimings(ctx); err == nil {
			for name, d := range after.Since(before) {
				parts = append(parts, cell.EnginePart{Name: name, Total: time.Duration(d.Seconds * float64(time.Second)),
					Requests: int(d.Count + 0.5), Counter: d.Counter, FinishedOnly: d.FinishedOnly, Source: d.Source})
			}
		}
	}
	slices.SortFunc(parts, func(a, b cell.EnginePart) int { return strings.Compare(a.Name, b.Name) })
	if s := cell.Split(recs, w, parts); s != nil {
		out.TTFTSplit = s
		r.beyond.splits++
	}
}

// splitNotes says once what the engine's TTFT figures could not give: a
// sharded run's engine figures (every shard's requests), llama.cpp's
// counter at a build where it is no time of each request, or nothing at
// all.
func (r *runner) splitNotes() {
	if r.beyond.timed && r.sharded() {
		r.note("TTFT is not split by the engine's metrics in a sharded run: they count every shard's requests, a shard's TTFT only its own (per-response timings, where the engine gives them, are per request and are kept).")
	}
	if n := r.info.TimingsNote(); n != "" && r.info.Gauges {
		r.note("TTFT's prefill is not read from the engine's counter: " + n + "; each response's timings.prompt_ms is used where requests ended.")
	}
	measured := false
	for _, c := range r.res.Decode {
		measured = measured || c.ShowsFigures()
	}
	// Only a measured cell could have been split: with none, the engine
	// was never asked, and saying it keeps nothing would be untrue.
	if r.beyond.splits > 0 || !measured {
		return
	}
	why := "it keeps none tokentap reads"
	switch {
	case r.beyond.timed && !r.info.Gauges:
		why = "its /metrics is not on (llama-server: --metrics; SGLang: --enable-metrics)"
	case r.beyond.timed:
		why = "its /metrics has none of them"
	case r.info.Kind == engines.KindOllama:
		why = "Ollama has no metrics and no per-response timings"
	}
	if r.info.Kind == engines.KindLlamaCpp && r.beyond.timed && !r.info.Gauges {
		why += ", and no request of a window ended with its timings"
	}
	r.note(fmt.Sprintf("TTFT is not split into queue, prefill and time outside the engine (—): the engine (%s) says nothing of them: %s.", r.info.Kind, why))
}
