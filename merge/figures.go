package merge

import (
	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// The figures a run adds beyond the seed pages' columns (METHOD.md §6–§8),
// merged: SLO counts add up as requests do, goodput as tok/s does (each
// shard's over its own window), the run's totals and serving capacity are
// computed again from the merged cells, and the decode limit is computed
// again at the merged batch. The TTFT split is not merged: every shard read
// the engine's counters over the same window, so its parts are the engine's
// for all shards' requests together, beside one shard's client TTFT.

// mergeSLO adds the shards' SLO figures of one cell; nil when no shard has
// any.
func mergeSLO(parts []*result.Cell) *result.SLO {
	var t slo.Tally
	var reqRate, tokRate float64
	any := false
	for _, c := range parts {
		s := c.SLO
		if s == nil {
			continue
		}
		any = true
		t.Merge(slo.FromFigures(s))
		reqRate += s.GoodputReqPerSec
		tokRate += s.GoodputTokPerSec
	}
	if !any {
		return nil
	}
	out := t.Figures(0)
	out.GoodputReqPerSec, out.GoodputTokPerSec = reqRate, tokRate
	return out
}

// mergeLimit is the merged cell out against the bandwidth limit: the
// shards' sequences together (their mean context weighted by the tokens
// each shard decoded) at the merged batch. Nil without complete inputs or
// a shard's figure.
func mergeLimit(b *result.Bandwidth, out *result.Cell, parts []*result.Cell) *result.DecodeLimit {
	in, ok := bandwidth.FromResult(b)
	if !ok {
		return nil
	}
	var seq, weight float64
	for _, c := range parts {
		if c.DecodeLimit == nil {
			return nil
		}
		w := float64(max(c.OutputTokens, 1))
		seq += c.DecodeLimit.SeqTokens * w
		weight += w
	}
	if weight == 0 {
		return nil
	}
	return in.Figures(out.TotalTokPerSec, out.AvgActive, seq/weight)
}

// mergeRunSLO computes the run's SLO totals and serving capacity again from
// the merged cells (slo.Totals): the cells that show figures together, the
// failed ones apart.
func mergeRunSLO(r *result.Result) {
	if r.SLO == nil {
		return
	}
	run := *r.SLO // shard 0's, which the merged run must not change
	r.SLO = &run
	slo.Totals(r)
}
