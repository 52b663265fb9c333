package matrix

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// This file adds to a run what METHOD.md §6–§8 define beyond the seed
// columns: each cell's requests judged against the run's SLOs, the TTFT
// split from the engine's own figures read at the window's start and end,
// and decode against the GPU's bandwidth limit.

// Limits is what the decode limit is computed from besides what the
// engine says (METHOD.md §8).
type Limits struct {
	// GPU is the bandwidth given (--gpu-bandwidth); zero: looked up in the
	// table by the run's Hardware GPU and VRAM.
	GPU bandwidth.GPUBandwidth
	// Told is what the user said of the model, in the order it wins over
	// the engine: the flags, then a config.json (--model-config).
	Told []bandwidth.Told
	// ReadModelFile lets the run read the GGUF file the engine says it
	// serves (llama.cpp's /props model_path), where the engine runs on
	// this machine.
	ReadModelFile bool
}

// beyond is a run's state for these figures.
type beyond struct {
	limits   bandwidth.Inputs
	limitsOK bool
	tallies  map[beyondKey]slo.Tally // per cell
	seconds  map[beyondKey]float64
	splits   int // cells with a TTFT split
	timed    bool
}

// setupBeyond resolves the decode limit's inputs once the engine is probed,
// and notes what is missing.
func (r *runner) setupBeyond() {
	r.bey = &beyond{tallies: map[beyondKey]slo.Tally{}, seconds: map[beyondKey]float64{}, timed: engines.HasTimings(r.info.Kind)}
	if !r.cfg.SLO.IsZero() {
		r.res.SLO = &result.SLORun{Spec: r.cfg.SLO.Result()}
	}
	gpu := r.cfg.Limits.GPU
	if gpu.GBPerSec <= 0 {
		h := r.res.Hardware
		if g, ok, why := bandwidth.Lookup(h.GPU, h.VRAM); ok {
			gpu = bandwidth.GPUBandwidth{GBPerSec: g.GBPerSec, From: fmt.Sprintf("tokentap's table: %s, %s (GPU %s)", g.Name, g.Source, hardwareSource(h))}
		} else {
			gpu.Missing = why
		}
	}
	told := append(slices.Clone(r.cfg.Limits.Told), r.engineTold())
	doc, in, ok := bandwidth.Resolve(gpu, told...)
	r.res.Bandwidth = &doc
	r.bey.limits, r.bey.limitsOK = in, ok
}

func hardwareSource(h result.Hardware) string {
	if strings.Contains(h.Source, "given") {
		return "given"
	}
	return "detected"
}

// engineTold is what the engine said of its model (engines.ModelFacts),
// with the GGUF file it names read where it is on this machine, and
// llama.cpp's KV cache type from the launch command where one was given.
func (r *runner) engineTold() bandwidth.Told {
	f := r.info.ModelFacts
	t := bandwidth.Told{WeightFrom: f.WeightSource, KeyDType: f.KVDType, DTypeFrom: f.KVDTypeSource}
	t.WeightBytes = f.WeightBytes
	if f.Layers > 0 {
		t.Layers, t.KVHeads, t.HeadDim, t.KeyDim, t.ValueDim = f.Layers, f.KVHeads, f.HeadDim, f.KeyDim, f.ValueDim
		t.ShapeFrom = f.ShapeSource
	}
	if !t.HasKV() && f.Path != "" {
		switch {
		case !r.cfg.Limits.ReadModelFile:
			t.Why = append(t.Why, fmt.Sprintf("the engine serves %s (%s), a file on its machine: the KV layout is read from it only where the engine runs on this one (give --model-config, or --layers, --kv-heads and --head-dim)", f.Path, f.PathSource))
		default:
			if m, err := bandwidth.ReadGGUFFile(f.Path); err != nil {
				t.Why = append(t.Why, fmt.Sprintf("the KV layout could not be read from the engine's model file: %v (give --model-config, or --layers, --kv-heads and --head-dim)", err))
			} else if s, ok := m.Shape(); ok {
				t.Layers, t.KVHeads, t.HeadDim, t.KeyDim, t.ValueDim = s.Layers, s.KVHeads, s.HeadDim, s.KeyDim, s.ValueDim
				t.ShapeFrom = fmt.Sprintf("GGUF metadata of %s (%s)", f.Path, f.PathSource)
			} else {
				t.Why = append(t.Why, s.Why...)
			}
		}
	}
	if t.KeyDType == "" && r.info.Kind == engines.KindLlamaCpp && r.res.Engine.LaunchCommand != "" {
		t.KeyDType, t.ValueDType, t.DTypeFrom = llamaCacheTypes(r.res.Engine.LaunchCommand)
	}
	return t
}

var (
	cacheK = regexp.MustCompile(`(?:^|\s)(?:-ctk|--cache-type-k)[\s=]+(\S+)`)
	cacheV = regexp.MustCompile(`(?:^|\s)(?:-ctv|--cache-type-v)[\s=]+(\S+)`)
)

// llamaCacheTypes reads llama-server's KV cache types from its launch
// command: --cache-type-k/-ctk and --cache-type-v/-ctv, each f16 (its
// default) where the command does not set it.
func llamaCacheTypes(cmd string) (k, v, from string) {
	k, v = "f16", "f16"
	var set []string
	if m := cacheK.FindStringSubmatch(cmd); m != nil {
		k = m[1]
		set = append(set, "--cache-type-k")
	}
	if m := cacheV.FindStringSubmatch(cmd); m != nil {
		v = m[1]
		set = append(set, "--cache-type-v")
	}
	if len(set) == 0 {
		return k, v, "the launch command sets no --cache-type-k/-v: llama.cpp's default, f16"
	}
	return k, v, "the launch command's " + strings.Join(set, " and ") + " (f16 where not set)"
}

// beyondStart reads the engine's TTFT-part figures before a window; nil
// when it keeps none.
func (r *runner) beyondStart(ctx context.Context) engines.Timings {
	if !r.bey.timed {
		return nil
	}
	t, err := r.info.Timings(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("matrix: reading the engine's TTFT figures failed; this cell gets no TTFT split")
		return nil
	}
	return t
}

// beyondCell adds a measured cell's SLO figures (judging the requests sent
// in the window that ended by judgeUntil: the window's end, or an open
// loop's grace), TTFT split and decode
// limit. The engine's TTFT figures are read again once it let go of the
// window's requests: vLLM observes queue and prefill times when a request
// finishes, a cancelled one too.
func (r *runner) beyondCell(ctx context.Context, out *result.Cell, recs []record.Record, w cell.Window, judgeUntil time.Duration, before engines.Timings) {
	key := beyondKey{out.Context, out.Column()}
	if !r.cfg.SLO.IsZero() {
		t := r.cfg.SLO.WindowUntil(recs, w.Start, w.End, judgeUntil)
		r.bey.tallies[key] = t
		r.bey.seconds[key] = w.Len().Seconds()
		out.SLO = t.Figures(w.Len().Seconds())
	}
	var parts []cell.EnginePart
	if before != nil {
		r.drain(ctx)
		if after, err := r.info.Timings(ctx); err == nil {
			for name, d := range after.Since(before) {
				parts = append(parts, cell.EnginePart{Name: name, Total: time.Duration(d.Seconds * float64(time.Second)),
					Requests: int(d.Count + 0.5), Counter: d.Counter, Source: d.Source})
			}
		}
	}
	slices.SortFunc(parts, func(a, b cell.EnginePart) int { return strings.Compare(a.Name, b.Name) })
	if s := cell.Split(recs, w, parts); s != nil {
		out.TTFTSplit = s
		r.bey.splits++
	}
	if r.bey.limitsOK && out.Status.ShowsFigures() {
		seq := cell.MeanSeqTokens(recs, w, out.PromptTokens)
		out.DecodeLimit = r.bey.limits.Figures(out.TotalTokPerSec, out.AvgActive, seq)
	}
}

// finishBeyond sums the run's SLO figures and notes what the engine did
// not say.
func (r *runner) finishBeyond() {
	if r.bey == nil {
		return
	}
	if r.res.SLO != nil {
		var all slo.Tally
		secs := 0.0
		for k, t := range r.bey.tallies {
			all.Merge(t)
			secs += r.bey.seconds[k]
		}
		r.res.SLO.Overall = *all.Figures(secs)
		r.res.SLO.Capacity = slo.Capacity(r.res, r.res.SLO.Spec.Target)
	}
	measured := false
	for _, c := range r.res.Decode {
		measured = measured || c.Status.ShowsFigures()
	}
	// Only a measured cell could have been split: with none, the engine
	// was never asked, and saying it keeps nothing would be untrue.
	if r.bey.splits == 0 && measured {
		why := "it keeps none tokentap reads"
		switch {
		case r.bey.timed && !r.info.Gauges:
			why = "its /metrics is not on (llama-server: --metrics; SGLang: --enable-metrics)"
		case r.bey.timed:
			why = "its /metrics has none of them"
		case r.info.Kind == engines.KindOllama:
			why = "Ollama has no metrics and no per-response timings"
		}
		if r.info.Kind == engines.KindLlamaCpp && r.bey.timed && !r.info.Gauges {
			why += ", and no request of a window ended with its timings"
		}
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("TTFT is not split into queue, prefill and time outside the engine (—): the engine (%s) says nothing of them: %s.", r.info.Kind, why))
	}
	if b := r.res.Bandwidth; b != nil && len(b.Missing) > 0 {
		r.res.Notes = append(r.res.Notes, "No decode cell is put against the GPU's bandwidth limit: missing "+strings.Join(b.Missing, "; ")+".")
	}
}

// beyondSummary is what a cell's progress line adds: its SLO attainment
// and its share of the bandwidth limit.
func beyondSummary(c *result.Cell) string {
	s := ""
	if c.SLO != nil && c.SLO.Attainment != nil {
		s += fmt.Sprintf("  SLO met %.0f%%", 100**c.SLO.Attainment)
	}
	if c.DecodeLimit != nil {
		s += fmt.Sprintf("  %.0f%% of bandwidth limit", 100*c.DecodeLimit.ShareOfBandwidthLimit)
	}
	return s
}

// beyondKey names a cell of the run: its context and its column.
type beyondKey struct {
	c   int
	col result.Column
}
