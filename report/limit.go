package report

import (
	"fmt"
	"math"
	"strconv"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/result"
)

// This file renders decode against the GPU's bandwidth limit (METHOD.md §8).

func (b *beyondView) limitSection(r *result.Result, contexts []int, cols []result.Column) {
	bw := r.Bandwidth
	if bw == nil || len(bw.Missing) > 0 {
		return // the run's notes say what is missing
	}
	with := func(v, src string) string {
		if src == "" {
			return v
		}
		return v + " · " + src
	}
	shape := bw.KVLayout
	if shape == "" {
		shape = fmt.Sprintf("%d layers × %d KV heads × %d head dim", bw.Layers, bw.KVHeads, bw.HeadDim)
	}
	b.LimitInputs = []kv{
		{"GPU memory bandwidth", with(fmtGBs(bw.GBPerSec), bw.GBPerSecSource)},
		{"Model weights", with(bandwidth.FormatBytes(float64(bw.WeightBytes)), bw.WeightSource)},
	}
	if bw.InputEmbeddingBytes > 0 {
		b.LimitInputs = append(b.LimitInputs, kv{"Input embeddings (not read per step)", bandwidth.FormatBytes(float64(bw.InputEmbeddingBytes))})
	}
	if m := bw.MoE; m != nil {
		b.LimitInputs = append(b.LimitInputs, kv{"Routed experts", fmt.Sprintf("%s: %d per layer in %d layers, %d per token (a step reads those its tokens touch)",
			bandwidth.FormatBytes(float64(m.ExpertBytes)), m.Experts, m.Layers, m.ExpertsPerToken)})
	}
	perToken := "KV cache per token"
	if bw.SlidingWindow > 0 || bw.StateBytesPerSequence > 0 {
		perToken = "KV cache per token, full-attention layers"
	}
	b.LimitInputs = append(b.LimitInputs,
		kv{"KV cache layout", with(shape, bw.ShapeSource)},
		kv{"KV cache dtype", with(fmt.Sprintf("%s, %s bytes per element", bw.KVDType, strconv.FormatFloat(bw.KVBytesPerElem, 'g', 4, 64)), bw.KVDTypeSource)},
		kv{perToken, fmtInt(int(math.Round(bw.KVBytesPerToken))) + " bytes"})
	if bw.SlidingWindow > 0 {
		b.LimitInputs = append(b.LimitInputs, kv{"Sliding-window layers", fmt.Sprintf("%s bytes per token, up to %s tokens", fmtInt(int(math.Round(bw.WindowKVBytesPerToken))), fmtInt(bw.SlidingWindow))})
	}
	if bw.StateBytesPerSequence > 0 {
		b.LimitInputs = append(b.LimitInputs, kv{"Linear-attention state", bandwidth.FormatBytes(bw.StateBytesPerSequence) + " per sequence"})
	}
	if bw.Note != "" {
		b.LimitInputs = append(b.LimitInputs, kv{"Note", bw.Note})
	}
	for _, c := range contexts {
		for _, col := range cols {
			cl := r.CellAt(c, col)
			if cl == nil || cl.DecodeLimit == nil || !cl.ShowsFigures() {
				continue
			}
			d := cl.DecodeLimit
			b.LimitRows = append(b.LimitRows, []string{ctxLabel(c), col.Label(), fmtRate(cl.TotalTokPerSec),
				fmtRate(d.BandwidthLimitTokPerSec), fmtShare(d.ShareOfBandwidthLimit), fmtActive(d.Batch), fmtInt(int(math.Round(d.SeqTokens)))})
		}
	}
	over := 0.0
	for _, c := range r.Decode {
		if c.DecodeLimit != nil && c.ShowsFigures() {
			over = math.Max(over, c.DecodeLimit.ShareOfBandwidthLimit)
		}
	}
	if over > 1.05 {
		b.LimitNotes = append(b.LimitNotes, fmt.Sprintf("A cell at %s of the limit decodes faster than the bandwidth allows for these inputs: one of them overstates what a step reads (a quantized model's weights taken at full precision, the KV dtype, the GPU), or the engine reads less than it (speculative decoding, a simulated GPU).", fmtShare(over)))
	}
	b.LimitNotes = append(b.LimitNotes, "Decode is memory-bound: a step reads the weights it needs once (not the input embeddings; of a mixture of experts, the experts its tokens touch) and every active sequence's KV cache, so total tok/s ≤ bandwidth × active ÷ (weights read + active × KV of a sequence), "+
		"at each cell's average active requests and mean sequence (prompt and output so far, over the window's tokens). A share near 100% is decode at what the memory allows.")
}

func fmtGBs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " GB/s" }

func hasLimit(r *result.Result) bool {
	for _, c := range r.Decode {
		if c.DecodeLimit != nil {
			return true
		}
	}
	return false
}

// limitMark is what a grid cell says of its share of the bandwidth limit:
// "62% of limit", or "".
func limitMark(c *result.Cell) string {
	if c == nil || c.DecodeLimit == nil || !c.ShowsFigures() {
		return ""
	}
	return fmtShare(c.DecodeLimit.ShareOfBandwidthLimit) + " of limit"
}
