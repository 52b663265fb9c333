package report

import (
	"cmp"
	"encoding/csv"
	"io"
	"math"
	"slices"
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
// percentiles read from too few samples ("ttft_p99 tbt_p99.9"), then, for
// TTFT and end to end, the requests they are over (seen and censored,
// METHOD §3) and the percentiles that are lower bounds ("ttft_p50 e2e_p90").
func csvPercentileColumns(ps []float64) []string {
	var cols []string
	for _, m := range []string{"ttft", "tbt", "e2e"} {
		cols = append(cols, m+"_n")
		for _, p := range ps {
			cols = append(cols, m+"_"+result.Label(p)+"_ms")
		}
	}
	return append(cols, "low_count", "ttft_sent", "e2e_sent", "at_least")
}

// num is a figure to 3 decimals (tok/s, ms, seconds: no more precision
// than they were measured with), empty when absent (0).
func num(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// csvFloat is a figure to 12 significant digits, as the shortest decimal:
// arithmetic noise such as 0.049424800000000005 (a percentile in ms read
// from microsecond histograms) prints as 0.0494248.
func csvFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil {
		r = v
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
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
	if c != nil && c.ShowsFigures() {
		p = result.PercentilesOf(c.Histograms, ps)
	}
	var low, atLeast []string
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
			out = append(out, csvFloat(v))
			if d.Low(q) {
				low = append(low, m+"_"+result.Label(q))
			}
			if d.Censored(q) {
				atLeast = append(atLeast, m+"_"+result.Label(q))
			}
		}
	}
	out = append(out, strings.Join(low, " "))
	for _, m := range []string{"ttft", "e2e"} {
		s := ""
		if d := pctDist(p, m); d != nil {
			s = strconv.FormatInt(d.Total(), 10)
		}
		out = append(out, s)
	}
	return append(out, strings.Join(atLeast, " "))
}

// writeCSV writes one row per prefill row and decode cell, raw numbers
// (tokens, ms, seconds; no separators, at most 3 decimals), empty where a
// figure is absent or the status shows none (Failed, Over capacity).
func writeCSV(w io.Writer, r *result.Result, ps []float64) error {
	cw := csv.NewWriter(w)
	extra := csvExtra(r)
	head := append(append(append(append(slices.Clone(csvColumns), csvPercentileColumns(ps)...), "reason"), extra.head()...), csvRunColumns...)
	if err := cw.Write(head); err != nil {
		return err
	}
	run := csvRun(r)
	blanks := func(n int) []string { return make([]string, n) }
	for _, p := range r.Prefill {
		row := []string{"prefill", strconv.Itoa(p.Context), "1", string(p.Status), num(p.TokPerSec), "",
			num(p.TTFTms), result.TTFTCold, "", "", strconv.Itoa(p.Requests), "", "",
			numInt(p.PromptTokens)}
		row = append(row, blanks(len(csvColumns)-len(row))...)
		row = append(row, csvPercentiles(nil, ps)...)
		if err := cw.Write(append(append(append(row, p.Error), extra.prefill(p)...), run...)); err != nil {
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
			if cell.ShowsFigures() {
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
			if err := cw.Write(append(append(append(row, cell.Reason), extra.cell(cell)...), run...)); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvRunColumns end every row with the run's settings, so rows of many
// runs' files pasted into one sheet still say which run and how they were
// measured.
var csvRunColumns = []string{"run_started", "model", "engine", "engine_version", "api", "window_s", "max_output",
	"requests", "rate_burstiness", "seed", "dataset", "dataset_sha256"}

// csvRun is csvRunColumns' values for r.
func csvRun(r *result.Result) []string {
	s := r.Settings
	started := ""
	if !r.Started.IsZero() {
		started = r.Started.UTC().Format("2006-01-02T15:04:05Z")
	}
	name, sum := "", ""
	if s.Dataset != nil {
		name, sum = s.Dataset.Name, s.Dataset.SHA256
	}
	burst := ""
	if r.RateRun() {
		burst = "1" // Poisson
		if s.Burstiness > 0 {
			burst = strconv.FormatFloat(s.Burstiness, 'f', -1, 64)
		}
	}
	return []string{started, cmp.Or(r.Model.Served, r.Model.Name), r.Engine.Name, r.Engine.Version, s.API, num(s.WindowSeconds),
		numInt(s.MaxOutput), numInt(s.Requests), burst, strconv.FormatInt(s.Seed, 10), name, sum}
}

// csvMore are the column groups a run adds where it has the figures
// (METHOD.md §6–§8), after the seeds' columns.
// sloHigh: a cell's attainment has an upper bound (undecided requests,
// METHOD §6); defs: the peers' time between tokens (tbtdefs.go).
// repeats: a prefill row of more than one cold request (METHOD §3).
// sweep: a sweep's rows (sweep.go), each cell's part in them.
type csvMore struct {
	slo, split, limit, sloHigh, defs, repeats bool
	sweep                                     map[result.Column]map[int]sweepMarks // by column, then context
}

// sweepMarks are a cell's part in its sweep row: the knees it is, and
// whether it is the highest rate meeting the SLOs (with the rate
// interpolated between it and the next cell, which missed).
type sweepMarks struct {
	knees        []string
	slo          string
	interpolated float64
}

// sweepCSV marks the cells of r's sweep rows.
func sweepCSV(r *result.Result) map[result.Column]map[int]sweepMarks {
	if len(r.Sweeps) == 0 {
		return nil
	}
	m := map[result.Column]map[int]sweepMarks{}
	mark := func(ctx int, p result.SweepPoint, f func(*sweepMarks)) {
		col := result.Column{N: p.Concurrency, Rate: p.Rate}
		if m[col] == nil {
			m[col] = map[int]sweepMarks{}
		}
		x := m[col][ctx]
		f(&x)
		m[col][ctx] = x
	}
	for _, row := range r.Sweeps {
		for _, k := range row.Knees {
			if k.Found {
				mark(row.Context, row.Points[k.Point], func(x *sweepMarks) { x.knees = append(x.knees, k.Metric) })
			}
		}
		if s := row.SLO; s != nil && s.Met >= 0 {
			mark(row.Context, row.Points[s.Met], func(x *sweepMarks) { x.slo, x.interpolated = "highest_met", s.Interpolated })
		}
	}
	return m
}

func csvExtra(r *result.Result) csvMore {
	var m csvMore
	m.slo = r.SLO != nil
	m.defs = hasTBTDefs(r)
	m.sweep = sweepCSV(r)
	for _, c := range r.Decode {
		m.split = m.split || c.TTFTSplit != nil
		m.limit = m.limit || c.DecodeLimit != nil
		m.sloHigh = m.sloHigh || c.SLO != nil && c.SLO.AttainmentAtLeast != nil
	}
	m.repeats = hasRepeats(r)
	return m
}

func (m csvMore) head() []string {
	var h []string
	if m.slo {
		h = append(h, "slo_judged", "slo_good", "slo_attainment", "goodput_req_s", "goodput_tok_s", "slo_failed", "slo_most_missed", "slo_undecided", "slo_judged_cut")
	}
	if m.split {
		h = append(h, "ttft_mean_ms", "engine_queue_ms", "engine_prefill_ms", "engine_ttft_ms", "outside_engine_ms", "unaccounted_ms", "engine_validation_ms", "ttft_split_requests", "ttft_split_over")
	}
	if m.limit {
		h = append(h, "bandwidth_limit_tok_s", "share_of_bandwidth_limit", "limit_batch", "limit_seq_tokens")
	}
	if m.sloHigh {
		h = append(h, "slo_attainment_at_least", "slo_attainment_at_most")
	}
	if m.defs {
		h = append(h, "itl_chunk_ms", "tpot_request_ms")
	}
	if m.sweep != nil {
		h = append(h, "sweep_knee", "sweep_slo", "sweep_slo_interpolated_rate")
	}
	if m.repeats {
		h = append(h, csvRepeatColumns...)
	}
	return h
}

// cell is a decode cell's values of the extra columns, empty where absent.
func (m csvMore) cell(c *result.Cell) []string {
	var out []string
	f := csvFloat
	if m.slo {
		if s := c.SLO; s != nil {
			att := ""
			if s.Attainment != nil {
				att = strconv.FormatFloat(*s.Attainment, 'f', 4, 64)
			}
			out = append(out, strconv.Itoa(s.Judged), strconv.Itoa(s.Good), att, f(s.GoodputReqPerSec), f(s.GoodputTokPerSec),
				strconv.Itoa(s.Failed), s.MostMissed, strconv.Itoa(s.Undecided), strconv.Itoa(s.JudgedCut))
		} else {
			out = append(out, make([]string, 9)...)
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
			out = append(out, f(s.ClientMs), part(s.Queue), part(s.Prefill), part(s.EngineTTFT), ptr(s.OutsideMs), ptr(s.UnaccountedMs),
				part(s.Validation), strconv.Itoa(s.ClientRequests), s.Over)
		} else {
			out = append(out, make([]string, 9)...)
		}
	}
	if m.limit {
		if d := c.DecodeLimit; d != nil {
			out = append(out, f(d.BandwidthLimitTokPerSec), strconv.FormatFloat(d.ShareOfBandwidthLimit, 'f', 4, 64), f(d.Batch), f(d.SeqTokens))
		} else {
			out = append(out, make([]string, 4)...)
		}
	}
	if m.sloHigh {
		lo, hi := "", ""
		if s := c.SLO; s != nil && s.AttainmentAtLeast != nil && s.AttainmentAtMost != nil {
			lo, hi = strconv.FormatFloat(*s.AttainmentAtLeast, 'f', 4, 64), strconv.FormatFloat(*s.AttainmentAtMost, 'f', 4, 64)
		}
		out = append(out, lo, hi)
	}
	if m.defs {
		if c.ShowsFigures() {
			out = append(out, num(c.ITLChunkMs), num(c.TPOTRequestMs))
		} else {
			out = append(out, "", "")
		}
	}
	if m.sweep != nil {
		x := m.sweep[c.Column()][c.Context]
		out = append(out, strings.Join(x.knees, " "), x.slo, num(x.interpolated))
	}
	if m.repeats {
		out = append(out, make([]string, len(csvRepeatColumns))...)
	}
	return out
}

// csvRepeatColumns are a prefill row's repeats: asked, measured, and the
// measured ones' lowest and highest tok/s (tok_s is their median).
var csvRepeatColumns = []string{"prefill_repeats", "prefill_measured", "prefill_tok_s_min", "prefill_tok_s_max"}

// prefill is a prefill row's values of the extra columns: only its
// repeats'.
func (m csvMore) prefill(p result.Prefill) []string {
	out := make([]string, len(m.head()))
	if m.repeats {
		out = append(out[:len(out)-len(csvRepeatColumns)], strconv.Itoa(p.RepeatsAsked()), strconv.Itoa(p.RepeatsMeasured()), "", "")
		if p.RepeatsMeasured() > 0 {
			out[len(out)-2], out[len(out)-1] = num(prefillMin(p)), num(prefillMax(p))
		}
	}
	return out
}
