package replay

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// Quantiles are percentiles of one distribution, in the unit its field names.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Summary is what a capture replay reports: the same TTFT, time between
// tokens and throughput a matrix cell has (package cell computes them, over
// the window from the first request sent to the last one's end), so two
// engines can be compared on the same traffic.
type Summary struct {
	Target string  `json:"target,omitempty"`
	Engine string  `json:"engine,omitempty"`
	Speed  float64 `json:"speed,omitempty"`

	Requests  int            `json:"requests"`
	OK        int            `json:"ok"`
	Failed    int            `json:"failed"`
	Cancelled int            `json:"cancelled"`
	Errors    map[string]int `json:"errors,omitempty"` // outcome → count

	SpanSeconds   float64 `json:"span_s"` // first sent to last end
	OutputTokens  int     `json:"output_tokens"`
	OutputTokPerS float64 `json:"output_tok_s"`
	PromptTokens  int     `json:"prompt_tokens"`
	AvgActive     float64 `json:"avg_active"`

	TTFTms        Quantiles `json:"ttft_ms"`
	TBTms         Quantiles `json:"tbt_ms"`
	E2Ems         Quantiles `json:"e2e_ms"`
	DecodeTokPerS Quantiles `json:"per_request_tok_s"`

	// LateMaxMs and LateMedianMs say how far behind the capture's schedule
	// requests were sent.
	LateMaxMs    float64 `json:"late_max_ms"`
	LateMedianMs float64 `json:"late_median_ms"`

	Hist *histo.Set `json:"histograms,omitempty"`

	// SLOSpec and SLO are the objectives (--slo) and how the replayed
	// requests met them, goodput over the span (METHOD.md §6).
	SLOSpec *result.SLOSpec `json:"slo_spec,omitempty"`
	SLO     *result.SLO     `json:"slo,omitempty"`
}

// AddSLO judges the replayed records against the objectives: every one
// that ended (OK or failed) is judged; one cancelled (the replay stopped)
// is not. Goodput is over the summary's span.
func (s *Summary) AddSLO(recs []record.Record, spec slo.Spec) {
	var t slo.Tally
	for i := range recs {
		t.Add(spec, &recs[i])
	}
	r := spec.Result()
	s.SLOSpec, s.SLO = &r, t.Figures(s.SpanSeconds)
}

// Summarize computes the summary of replayed records.
func Summarize(recs []record.Record) Summary {
	s := Summary{Requests: len(recs), Errors: map[string]int{}}
	if len(recs) == 0 {
		return s
	}
	first, last := recs[0].Sent, recs[0].End
	for i := range recs {
		r := &recs[i]
		first = min(first, r.Sent)
		last = max(last, r.End)
		if n, ok := r.Last(); ok {
			last = max(last, n)
		}
		s.PromptTokens += r.PromptTokens
		switch {
		case r.Outcome == record.OK:
			s.OK++
		case r.Outcome == record.Cancelled:
			s.Cancelled++
		default:
			s.Failed++
			s.Errors[string(r.Outcome)]++
		}
	}
	// The window is half-open: extend it by a nanosecond so the last
	// arrival and the last end count.
	f := cell.Decode(recs, cell.Window{Start: first, End: last + 1})
	s.SpanSeconds = f.MeasuredFor.Seconds()
	// A non-streaming response has no token events: its tokens count from
	// its usage, at its end.
	s.OutputTokens = f.OutputTokens
	for i := range recs {
		if !recs[i].Stream && recs[i].Outcome == record.OK {
			s.OutputTokens += recs[i].CompletionTokens
		}
	}
	if s.SpanSeconds > 0 {
		s.OutputTokPerS = float64(s.OutputTokens) / s.SpanSeconds
	}
	s.AvgActive = f.AvgActive
	s.TTFTms = latency(f.Hist.TTFT)
	s.TBTms = latency(f.Hist.TBT)
	s.E2Ems = latency(f.Hist.E2E)
	for _, q := range []struct {
		q   float64
		dst *float64
	}{{0.5, &s.DecodeTokPerS.P50}, {0.9, &s.DecodeTokPerS.P90}, {0.99, &s.DecodeTokPerS.P99}, {1, &s.DecodeTokPerS.Max}} {
		*q.dst, _ = f.Hist.RateAt(q.q)
	}
	s.Hist = f.Hist
	if len(s.Errors) == 0 {
		s.Errors = nil
	}
	return s
}

func latency(h interface {
	TotalCount() int64
	ValueAtQuantile(float64) int64
}) Quantiles {
	if h.TotalCount() == 0 {
		return Quantiles{}
	}
	ms := func(q float64) float64 {
		return float64(time.Duration(h.ValueAtQuantile(q))*time.Microsecond) / float64(time.Millisecond)
	}
	return Quantiles{P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100)}
}

// WriteText prints the summary for a terminal.
func (s Summary) WriteText(w io.Writer) {
	if s.Target != "" {
		fmt.Fprintf(w, "Replay against %s (%s) at %gx speed\n\n", s.Target, s.Engine, s.Speed)
	}
	fmt.Fprintf(w, "Requests      %d sent, %d ok, %d failed, %d cancelled\n", s.Requests, s.OK, s.Failed, s.Cancelled)
	if len(s.Errors) > 0 {
		keys := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-12s%d\n", k, s.Errors[k])
		}
	}
	fmt.Fprintf(w, "Span          %.1f s\n", s.SpanSeconds)
	fmt.Fprintf(w, "Throughput    %.1f output tok/s (%d tokens), %.2f requests decoding on average\n", s.OutputTokPerS, s.OutputTokens, s.AvgActive)
	fmt.Fprintf(w, "\n%-26s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "max")
	row := func(name string, q Quantiles, unit string) {
		fmt.Fprintf(w, "%-26s %10.1f %10.1f %10.1f %10.1f\n", name+" ("+unit+")", q.P50, q.P90, q.P99, q.Max)
	}
	row("TTFT", s.TTFTms, "ms")
	row("Time between tokens", s.TBTms, "ms")
	row("End to end", s.E2Ems, "ms")
	row("Per request", s.DecodeTokPerS, "tok/s")
	if s.SLO != nil && s.SLOSpec != nil {
		fmt.Fprintf(w, "\nSLO           %s\n", slo.FromResult(*s.SLOSpec).Describe())
		att := "—"
		if s.SLO.Attainment != nil {
			att = fmt.Sprintf("%.1f%%", 100**s.SLO.Attainment)
		}
		fmt.Fprintf(w, "Met every SLO %s of %d requests judged (%d good, %d failed, %d not judged)\n", att, s.SLO.Judged, s.SLO.Good, s.SLO.Failed, s.SLO.Excluded)
		fmt.Fprintf(w, "Goodput       %.2f good requests/s, %.1f good output tok/s\n", s.SLO.GoodputReqPerSec, s.SLO.GoodputTokPerSec)
		if s.SLO.MostMissed != "" {
			fmt.Fprintf(w, "Most missed   %s (by %d of %d judged)\n", slo.Label(s.SLO.MostMissed), s.SLO.Missed[s.SLO.MostMissed], s.SLO.Judged)
		}
	}
	fmt.Fprintf(w, "\nSends ran behind the capture's schedule by %.1f ms (median), %.1f ms at most.\n", s.LateMedianMs, s.LateMaxMs)
}
