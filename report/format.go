package report

import (
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// dash marks an absent figure, as the seed pages do.
const dash = "—"

// groupDigits inserts thousands separators into the integer part of a
// decimal string: "2341.0" → "2,341.0", "-12345" → "-12,345".
func groupDigits(s string) string {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if hasFrac {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

// fmtInt formats an integer with thousands separators: 8192 → "8,192".
func fmtInt(n int) string { return groupDigits(strconv.Itoa(n)) }

// fmtFixed formats v with d decimals and thousands separators.
func fmtFixed(v float64, d int) string {
	return groupDigits(strconv.FormatFloat(v, 'f', d, 64))
}

// fmtRate is tok/s in the All measurements table: one decimal with
// separators ("9,918.0", "606.0", "156.2").
func fmtRate(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	return fmtFixed(v, 1)
}

// fmtHeadline is tok/s in the Prefill list and the decode grid: whole
// numbers with separators from 1,000 up ("9,918", "2,341"), one decimal
// below ("606.0", "156.2"), as the seed pages print them.
func fmtHeadline(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	if math.Round(v*10)/10 >= 1000 {
		return fmtFixed(v, 0)
	}
	return fmtFixed(v, 1)
}

// fmtMs is a latency in whole milliseconds with separators: "7,302 ms".
func fmtMs(ms float64) string {
	if ms <= 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return dash
	}
	return fmtFixed(ms, 0) + " ms"
}

// fmtTTFT is a median TTFT, "≥ 12,954 ms" where it lies among the requests
// without a first token and is only a lower bound (METHOD §3).
func fmtTTFT(ms float64, atLeast bool) string {
	s := fmtMs(ms)
	if atLeast && s != dash {
		s = atLeastMark + s
	}
	return s
}

// atLeastMark prefixes a percentile that lies among censored requests.
const atLeastMark = "≥ "

// atLeastNote explains atLeastMark and "n of sent" under a table.
const atLeastNote = atLeastMark + "the percentile lies among requests that had no first token (or no end) when they were cut or failed: it is a lower bound, the longest such wait. TTFT and end to end count every request sent in the window (n of sent: those seen of all sent), each one without a first token or an end counted as at least its wait (Kaplan–Meier, METHOD §3)."

// fmtTBT is time between tokens, one decimal: "6.2 ms".
func fmtTBT(ms float64) string {
	if ms <= 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return dash
	}
	return fmtFixed(ms, 1) + " ms"
}

// fmtActive is average active requests, one decimal: "1.0", "0.7".
func fmtActive(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	return fmtFixed(v, 1)
}

// fmtSeconds is a measured duration: "30.0 s".
func fmtSeconds(s float64) string {
	if s <= 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return dash
	}
	return fmtFixed(s, 1) + " s"
}

// fmtWindow is the run's time per measurement: "30 s", "2.5 s".
func fmtWindow(s float64) string {
	if s <= 0 {
		return dash
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

// ctxLabel names a context size: multiples of 1,024 as "16K", 0 as "0",
// anything else as a plain count ("1,000").
func ctxLabel(tokens int) string {
	if tokens > 0 && tokens%1024 == 0 {
		return strconv.Itoa(tokens/1024) + "K"
	}
	return fmtInt(tokens)
}

// statusNote is the footnote the seed pages print for a status; a rate
// run's (open loop, METHOD §3) say what the status means there.
func statusNote(s result.Status, rate bool) string {
	switch {
	case rate && s == result.RequestsQueued:
		return "Requests queued: the server reported requests waiting during this measurement, so arrivals waited and their latencies include the wait."
	case rate && s == result.OverCapacity:
		return "Over capacity: not run because one request at this context would exceed the server's KV cache, or the server refused a request at this rate or a lower one as not fitting."
	}
	switch s {
	case result.Failed:
		return "Failed: requests to the server failed during this measurement."
	case result.RequestsQueued:
		return "Requests queued: the server could not run all requests at once, so some waited in a queue."
	case result.CacheMissed:
		return "Cache missed: the server's prefix cache did not hold the warmed prompts, so this TTFT includes prefill."
	case result.LateWindow:
		return "Late window: one of the load generators of a sharded run opened this measurement late, so fewer requests than shown ran at its start."
	case result.OverCapacity:
		return "Over capacity: not run because this many requests at this context would exceed the server's KV cache."
	case result.NotRun:
		return "Not run: the run stopped before this measurement."
	}
	return ""
}

// footnoteOrder is the order footnotes appear in (the seeds put Over
// capacity last).
var footnoteOrder = []result.Status{result.Failed, result.RequestsQueued, result.LateWindow, result.CacheMissed, result.NotRun, result.OverCapacity}

// ttftNote is the seeds' remark under the decode grid; cacheNote follows it
// where the run has prefix-cache figures.
const (
	ttftNote  = "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly excludes prefill."
	cacheNote = "Prefix cache hits: the share of the prompt tokens the server served from its cache; a cell whose requests missed it is marked Cache missed, and its TTFT includes prefill. Below 1K tokens a prompt is a few cache blocks and the cache is not judged."
)

// fmtPct is a share as a percentage with one decimal: 0.9994 → "99.9%".
func fmtPct(v float64) string { return strconv.FormatFloat(v*100, 'f', 1, 64) + "%" }

// rateCacheNote explains the cache column of an arrival-rate run.
const rateCacheNote = "Prefix cache hits: the share of the prompt tokens the server served from its cache (near none: the prompts are cold)."

// coldTTFTNote replaces ttftNote under a grid whose cells' prompts were
// not warmed (a dataset's, sent as given).
const coldTTFTNote = "These cells' prompts were sent as given, not warmed into the server's prompt cache first, so their TTFT includes prefill, as vllm bench serve's and GuideLLM's do."

// rateTTFTNote replaces ttftNote under an arrival-rate grid: its prompts
// are cold.
const rateTTFTNote = "Arrival-rate cells send prompts no request sent before, so their TTFT includes prefill, as vllm bench serve's and GuideLLM's do; Requests queued marks a rate at which the engine made arrivals wait, so their latencies include the wait."

// columnsAre says what the grid's columns are, with its rate cells'
// arrivals (arrivals).
func columnsAre(rate bool, arrivals string) string {
	if rate {
		return "request rates (requests per second, " + arrivals + ")"
	}
	return "simultaneous requests"
}

// mixedColumnsAre is columnsAre for a sweep's grid: concurrency levels
// and request rates.
func mixedColumnsAre(arrivals string) string {
	return "simultaneous requests (N: a sweep's one-at-a-time and throughput cells) and request rates (/s: requests per second, " + arrivals + ")"
}

// columnsAre says what v's grid's columns are.
func (v *view) columnsAre() string {
	if v.Mixed {
		return mixedColumnsAre(v.Arrivals)
	}
	return columnsAre(v.Rate, v.Arrivals)
}

// colName names v's grid's column in a table head.
func (v *view) colName() string {
	if v.Mixed {
		return "N or rate"
	}
	return colName(v.Rate)
}

// columnHeadOf heads a table's column of r's grid's column values.
func columnHeadOf(r *result.Result) string {
	if mixedColumns(r) {
		return "Requests at once or rate"
	}
	return columnHead(r.RateRun())
}

// arrivals names how a run's rate cells' requests arrived: Poisson, or
// gamma gaps of its burstiness.
func arrivals(s result.Settings) string {
	if s.Burstiness > 0 && s.Burstiness != 1 {
		return "gamma arrivals of burstiness " + strconv.FormatFloat(s.Burstiness, 'g', -1, 64)
	}
	return "Poisson arrivals"
}

// columnHead heads a table's column of the grid's column values.
func columnHead(rate bool) string {
	if rate {
		return "Request rate"
	}
	return "Requests at once"
}

// columnAxis labels a chart's axis of the grid's columns.
func columnAxis(rate bool) string {
	if rate {
		return "requests per second"
	}
	return "requests at once"
}

// colName names a column of the grid in a table head.
func colName(rate bool) string {
	if rate {
		return "Rate"
	}
	return "N"
}

// pctIntro heads the Latency percentiles table.
func pctIntro(v *view) string {
	e2e := "of requests completed in the window"
	if v.Rate {
		e2e = "of requests sent in the window that completed, in it or in the grace after it"
	}
	return "Per cell, read from its histograms (microsecond resolution): TTFT, time between tokens and end to end (sent to the last byte, " + e2e + ") at " +
		pctList(v.Percentiles) + ", with the number of samples each is read from."
}

// pctList is "p50, p90 and p99".
func pctList(ps []float64) string {
	var l []string
	for _, p := range ps {
		l = append(l, result.Label(p))
	}
	return english.List(l)
}

// lowNote explains the low-count mark.
const lowNote = lowMark + " fewer samples than the percentile needs (fewer than 100 for p99, 10 for p90, 2 for p50): not one sample lies beyond it, so it is the largest value seen, not a tail estimate."

// fmtLatencyMs is a latency percentile: one decimal under 10 ms ("6.4
// ms"), whole milliseconds above ("1,574 ms").
func fmtLatencyMs(ms float64) string {
	if ms <= 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return dash
	}
	if ms < 10 {
		return fmtFixed(ms, 1) + " ms"
	}
	return fmtFixed(ms, 0) + " ms"
}

// prefillNote ends the Prefill table: its rate is over the cold TTFT, so
// it includes the engine's fixed time before a first token (METHOD §3).
const prefillNote = "Prompt tok/s = prompt tokens ÷ cold TTFT, which includes the engine's time before the first token besides prefill (scheduling, the first decode step): short prompts read low."

// repeatsNote follows prefillNote where a row has repeats.
const repeatsNote = "Each row sends its cold requests one at a time, each a prompt of its own; tok/s and TTFT are the median of those measured, the spread their lowest and highest tok/s, and n the requests measured of those asked (a request that failed or found its prompt cached counts, without a figure)."

// prefillNoteOf is the note under a run's Prefill table.
func prefillNoteOf(v *view) string {
	if v.Repeats {
		return prefillNote + " " + repeatsNote
	}
	return prefillNote
}

// allNote heads the All measurements table.
func allNote(rate bool) string {
	if rate {
		return "Latencies are medians. Total tok/s is output across all requests in flight."
	}
	return "Latencies are medians. Total tok/s is output across all simultaneous requests."
}
