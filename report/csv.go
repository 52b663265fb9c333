package report

import (
	"encoding/csv"
	"io"
	"strconv"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
)

// csvColumns head the CSV: every column of METHOD §3 in raw units, the
// cell's bookkeeping, and tail percentiles read from its histograms.
var csvColumns = []string{"phase", "context_tokens", "concurrency", "status", "total_tok_s", "per_request_tok_s",
	"ttft_ms", "tbt_ms", "avg_active", "completed", "output_tokens", "measured_for_s",
	"prompt_tokens", "sent", "failed_requests", "max_waiting",
	"ttft_p90_ms", "ttft_p99_ms", "tbt_p90_ms", "tbt_p99_ms", "prefix_cache_hit_rate", "avg_active_source", "peak_decoding", "reason"}

func num(v float64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func pctMs(s *histo.Set, ttft bool, q float64) string {
	if s == nil {
		return ""
	}
	h := s.TBT
	if ttft {
		h = s.TTFT
	}
	d, ok := histo.Latency(h, q)
	if !ok {
		return ""
	}
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64)
}

// writeCSV writes one row per prefill row and decode cell, raw numbers
// (tokens, ms, seconds; no separators), empty where a figure is absent.
func writeCSV(w io.Writer, r *result.Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	for _, p := range r.Prefill {
		row := []string{"prefill", strconv.Itoa(p.Context), "1", string(p.Status), num(p.TokPerSec), "",
			num(p.TTFTms), "", "", strconv.Itoa(p.Requests), "", "",
			strconv.Itoa(p.PromptTokens), "", "", "", "", "", "", "", "", "", "", p.Error}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	contexts, conc := axes(r)
	for _, c := range contexts {
		for _, n := range conc {
			cell := r.Cell(c, n)
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
				if cell.Cache != nil {
					cache = strconv.FormatFloat(cell.Cache.HitRate, 'f', 4, 64)
				}
			}
			row := []string{"decode", strconv.Itoa(c), strconv.Itoa(n), string(cell.Status),
				num(cell.TotalTokPerSec), num(cell.PerRequestTokPerSec), num(cell.TTFTms), num(cell.TBTms),
				num(cell.AvgActive), completed, output, num(cell.MeasuredForSeconds),
				numInt(cell.PromptTokens), numInt(cell.Sent), numInt(cell.FailedReqs), waiting,
				pctMs(cell.Histograms, true, 0.90), pctMs(cell.Histograms, true, 0.99),
				pctMs(cell.Histograms, false, 0.90), pctMs(cell.Histograms, false, 0.99), cache, cell.AvgActiveSource,
				numInt(cell.PeakDecoding), cell.Reason}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

func numInt(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
