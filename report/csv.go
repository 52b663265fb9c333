package report

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// csvColumns head the CSV: every column of METHOD §3 in raw units, the
// cell's bookkeeping and its arrival-rate figures; the percentile columns
// (csvPercentileColumns) and the reason follow.
var csvColumns = []string{"phase", "context_tokens", "concurrency", "status", "total_tok_s", "per_request_tok_s",
	"ttft_ms", "ttft_kind", "tbt_ms", "avg_active", "completed", "output_tokens", "measured_for_s",
	"prompt_tokens", "sent", "failed_requests", "max_waiting", "prefix_cache_hit_rate", "avg_active_source", "peak_decoding",
	"request_rate", "achieved_rate", "peak_in_flight", "avg_in_flight"}

// csvPercentileColumns are, for TTFT, time between tokens and end-to-end,
// the sample count and the value at each percentile (ms), then the
// percentiles read from too few samples ("ttft_p99 tbt_p99.9").
func csvPercentileColumns(ps []float64) []string {
	var cols []string
	for _, m := range []string{"ttft", "tbt", "e2e"} {
		cols = append(cols, m+"_n")
		for _, p := range ps {
			cols = append(cols, m+"_"+result.Label(p)+"_ms")
		}
	}
	return append(cols, "low_count")
}

// num is a figure to 3 decimals (tok/s, ms, seconds: no more precision
// than they were measured with), empty when absent (0).
func num(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

func numInt(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// csvPercentiles are a cell's percentile columns, empty when it shows no
// figures or kept no histograms.
func csvPercentiles(c *result.Cell, ps []float64) []string {
	out := make([]string, 0, 3*(len(ps)+1)+1)
	var p *result.Percentiles
	if c != nil && c.Status.ShowsFigures() {
		p = result.PercentilesOf(c.Histograms, ps)
	}
	var low []string
	for _, m := range []string{"ttft", "tbt", "e2e"} {
		d := pctDist(p, m)
		if d == nil {
			out = append(out, "")
			for range ps {
				out = append(out, "")
			}
			continue
		}
		out = append(out, strconv.FormatInt(d.N, 10))
		for _, q := range ps {
			v, _ := d.Value(q)
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
			if d.Low(q) {
				low = append(low, m+"_"+result.Label(q))
			}
		}
	}
	return append(out, strings.Join(low, " "))
}

// writeCSV writes one row per prefill row and decode cell, raw numbers
// (tokens, ms, seconds; no separators, at most 3 decimals), empty where a
// figure is absent or the status shows none (Failed, Over capacity).
func writeCSV(w io.Writer, r *result.Result, ps []float64) error {
	cw := csv.NewWriter(w)
	head := append(append(append([]string(nil), csvColumns...), csvPercentileColumns(ps)...), "reason")
	if err := cw.Write(head); err != nil {
		return err
	}
	blanks := func(n int) []string { return make([]string, n) }
	for _, p := range r.Prefill {
		row := []string{"prefill", strconv.Itoa(p.Context), "1", string(p.Status), num(p.TokPerSec), "",
			num(p.TTFTms), result.TTFTCold, "", "", strconv.Itoa(p.Requests), "", "",
			numInt(p.PromptTokens)}
		row = append(row, blanks(len(csvColumns)-len(row))...)
		row = append(row, csvPercentiles(nil, ps)...)
		if err := cw.Write(append(row, p.Error)); err != nil {
			return err
		}
	}
	contexts, cols := axes(r)
	for _, c := range contexts {
		for _, col := range cols {
			cell := r.CellAt(c, col)
			if cell == nil {
				continue
			}
			ran := cell.Measured || (cell.Status != result.OverCapacity && cell.Status != result.NotRun)
			completed, output, waiting, cache := "", "", "", ""
			if ran {
				completed, output = strconv.Itoa(cell.Completed), strconv.Itoa(cell.OutputTokens)
				if cell.MaxWaiting >= 0 {
					waiting = strconv.Itoa(cell.MaxWaiting)
				}
			}
			var f result.Cell // figures only where the status shows them (METHOD §3)
			kind := ""
			if cell.Status.ShowsFigures() {
				f, kind = *cell, cell.TTFTOf()
				if f.Cache != nil {
					cache = strconv.FormatFloat(math.Round(f.Cache.HitRate*1e4)/1e4, 'f', -1, 64)
				}
			}
			row := []string{"decode", strconv.Itoa(c), numInt(cell.Concurrency), string(cell.Status),
				num(f.TotalTokPerSec), num(f.PerRequestTokPerSec), num(f.TTFTms), kind, num(f.TBTms),
				num(f.AvgActive), completed, output, num(f.MeasuredForSeconds),
				numInt(cell.PromptTokens), numInt(cell.Sent), numInt(cell.FailedReqs), waiting, cache, f.AvgActiveSource,
				numInt(f.PeakDecoding), num(cell.Rate), num(f.AchievedRate), numInt(f.PeakInFlight), num(f.AvgInFlight)}
			row = append(row, csvPercentiles(cell, ps)...)
			if err := cw.Write(append(row, cell.Reason)); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
