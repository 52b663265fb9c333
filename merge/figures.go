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
// again at the merged batch. A TTFT split is merged only where every shard's
// is over per-response timings (llama.cpp's timings.prompt_ms), which are
// each request's own: means weighted by each shard's requests. A shard
// reads no engine counters for a split (they count every shard's requests),
// so no other split is merged.

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

// mergeSplit is the cell's TTFT split from its shards' (METHOD.md §7,
// §10): where every shard's split is over its own requests' per-response
// timings, the means weighted by each shard's requests; nil otherwise.
func mergeSplit(parts []*result.Cell) *result.TTFTSplit {
	var client, prefill float64
	n := 0
	var src string
	for _, c := range parts {
		s := c.TTFTSplit
		if s == nil || s.Over != result.OverTimed || s.Prefill == nil || s.ClientRequests <= 0 || s.Prefill.Requests != s.ClientRequests {
			return nil
		}
		client += s.ClientMs * float64(s.ClientRequests)
		prefill += s.Prefill.Ms * float64(s.ClientRequests)
		n += s.ClientRequests
		src = s.Prefill.Source
	}
	if n == 0 {
		return nil
	}
	return (&result.TTFTSplit{ClientMs: client / float64(n), ClientRequests: n, Over: result.OverTimed,
		Prefill: &result.TTFTPart{Ms: prefill / float64(n), Requests: n, Source: src + ", every shard's"}}).Finish()
}
