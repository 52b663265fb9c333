package report

import (
	"encoding/csv"
	"io"
	"slices"
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
	extra := csvExtra(r)
	if err := cw.Write(append(slices.Clone(csvColumns), extra.head()...)); err != nil {
		return err
	}
	for _, p := range r.Prefill {
		row := []string{"prefill", strconv.Itoa(p.Context), "1", string(p.Status), num(p.TokPerSec), "",
			num(p.TTFTms), "", "", strconv.Itoa(p.Requests), "", "",
			strconv.Itoa(p.PromptTokens), "", "", "", "", "", "", "", "", "", "", p.Error}
		row = append(row, make([]string, len(extra.head()))...)
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
			row = append(row, extra.cell(cell)...)
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

// csvMore are the column groups a run adds where it has the figures
// (METHOD.md §6–§8), after the seeds' columns.
type csvMore struct{ slo, split, limit bool }

func csvExtra(r *result.Result) csvMore {
	var m csvMore
	m.slo = r.SLO != nil
	for _, c := range r.Decode {
		m.split = m.split || c.TTFTSplit != nil
		m.limit = m.limit || c.DecodeLimit != nil
	}
	return m
}

func (m csvMore) head() []string {
	var h []string
	if m.slo {
		h = append(h, "slo_judged", "slo_good", "slo_attainment", "goodput_req_s", "goodput_tok_s", "slo_failed", "slo_most_missed", "slo_excluded")
	}
	if m.split {
		h = append(h, "ttft_mean_ms", "engine_queue_ms", "engine_prefill_ms", "engine_ttft_ms", "outside_engine_ms", "unaccounted_ms")
	}
	if m.limit {
		h = append(h, "bandwidth_limit_tok_s", "share_of_bandwidth_limit", "limit_batch", "limit_seq_tokens")
	}
	return h
}

// cell is a decode cell's values of the extra columns, empty where absent.
func (m csvMore) cell(c *result.Cell) []string {
	var out []string
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if m.slo {
		if s := c.SLO; s != nil {
			att := ""
			if s.Attainment != nil {
				att = strconv.FormatFloat(*s.Attainment, 'f', 4, 64)
			}
			out = append(out, strconv.Itoa(s.Judged), strconv.Itoa(s.Good), att, f(s.GoodputReqPerSec), f(s.GoodputTokPerSec),
				strconv.Itoa(s.Failed), s.MostMissed, strconv.Itoa(s.Excluded))
		} else {
			out = append(out, make([]string, 8)...)
		}
	}
	if m.split {
		if s := c.TTFTSplit; s != nil {
			part := func(p *result.TTFTPart) string {
				if p == nil {
					return ""
				}
				return f(p.Ms)
			}
			ptr := func(p *float64) string {
				if p == nil {
					return ""
				}
				return f(*p)
			}
			out = append(out, f(s.ClientMs), part(s.Queue), part(s.Prefill), part(s.EngineTTFT), ptr(s.OutsideMs), ptr(s.UnaccountedMs))
		} else {
			out = append(out, make([]string, 6)...)
		}
	}
	if m.limit {
		if d := c.DecodeLimit; d != nil {
			out = append(out, f(d.BandwidthLimitTokPerSec), strconv.FormatFloat(d.ShareOfBandwidthLimit, 'f', 4, 64), f(d.Batch), f(d.SeqTokens))
		} else {
			out = append(out, make([]string, 4)...)
		}
	}
	return out
}
