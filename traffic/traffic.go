// Package traffic summarises a set of request records — a proxy capture,
// a capture's replay — the way the matrix summarises a cell: requests by
// model and outcome, TTFT, time between tokens and end-to-end percentiles
// with their sample counts, and tokens per second over the span from the
// first request sent to the last one's end. The figures come from package
// cell, so they mean what a matrix cell's mean (METHOD.md §3).
//
// Reports render a Summary (tokentap report capture.jsonl); a Replay
// (replay.go) puts a capture's Summary beside its replay's, as tokentap
// replay prints it.
package traffic

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// Figures are one set of records' counts and distributions.
type Figures struct {
	Requests  int            `json:"requests"`
	OK        int            `json:"ok"`
	Failed    int            `json:"failed"`
	Cancelled int            `json:"cancelled"`
	Errors    map[string]int `json:"errors,omitempty"` // failing outcome → count

	PromptTokens int `json:"prompt_tokens"`
	// OutputTokens are the tokens that arrived (a non-streaming
	// response's from its usage), OutputTokPerS those over the span.
	OutputTokens  int     `json:"output_tokens"`
	OutputTokPerS float64 `json:"output_tok_s"`
	// RequestsPerS are the requests sent over the span.
	RequestsPerS float64 `json:"requests_per_s"`
	// AvgActive is the time-average of the requests decoding (first
	// token to end) over the span.
	AvgActive float64 `json:"avg_active"`

	TTFTms     *result.Dist `json:"ttft_ms,omitempty"`
	TBTms      *result.Dist `json:"tbt_ms,omitempty"`
	E2Ems      *result.Dist `json:"e2e_ms,omitempty"`
	PerRequest *result.Dist `json:"per_request_tok_s,omitempty"`

	// Hist holds the values the percentiles were read from.
	Hist *histo.Set `json:"-"`
}

// Outcome counts the requests of one model that ended one way.
type Outcome struct {
	Model   string         `json:"model"`
	Outcome record.Outcome `json:"outcome"`
	Blame   record.Blame   `json:"blame,omitempty"`
	Status  int            `json:"status,omitempty"` // HTTP status, for HTTP errors
	Count   int            `json:"count"`
}

// Model is one model's figures.
type Model struct {
	Name string `json:"model"`
	Figures
}

// Summary is a set of records summarised.
type Summary struct {
	Figures
	// First and Last are the wall-clock times of the first request sent
	// and the last end; SpanSeconds the span between, on the run clock.
	First       time.Time `json:"first,omitempty"`
	Last        time.Time `json:"last,omitempty"`
	SpanSeconds float64   `json:"span_s"`
	// Percentiles are the percentiles (in percent) the distributions hold.
	Percentiles []float64 `json:"percentiles"`
	// Outcomes are the requests by model, outcome, whose fault and HTTP
	// status; Models each model's figures (one entry per model named).
	Outcomes []Outcome `json:"outcomes"`
	Models   []Model   `json:"models"`
}

// Summarize summarises recs (in any order) at percentiles ps (in percent;
// nil: result.DefaultPercentiles).
func Summarize(recs []record.Record, ps []float64) Summary {
	if len(ps) == 0 {
		ps = result.DefaultPercentiles
	}
	s := Summary{Percentiles: slices.Clone(ps)}
	if len(recs) == 0 {
		s.Figures = figures(nil, cell.Window{}, ps)
		return s
	}
	first, last := recs[0].Sent, recs[0].End
	firstWall := recs[0].Wall
	for i := range recs {
		r := &recs[i]
		if r.Sent < first {
			first, firstWall = r.Sent, r.Wall
		}
		last = max(last, r.End)
		if n, ok := r.Last(); ok {
			last = max(last, n)
		}
	}
	// The window is half-open: a nanosecond more keeps the last arrival
	// and the last end inside it.
	w := cell.Window{Start: first, End: last + 1}
	s.SpanSeconds = w.Len().Seconds()
	if !firstWall.IsZero() {
		s.First = firstWall
		s.Last = firstWall.Add(last - first)
	}
	s.Figures = figures(recs, w, ps)

	byModel := map[string][]record.Record{}
	counts := map[Outcome]int{}
	for i := range recs {
		r := &recs[i]
		byModel[r.Model] = append(byModel[r.Model], *r)
		k := Outcome{Model: r.Model, Outcome: r.Outcome, Blame: r.Blame}
		if r.Outcome == record.HTTPError {
			k.Status = r.Status
		}
		counts[k]++
	}
	for k, n := range counts {
		k.Count = n
		s.Outcomes = append(s.Outcomes, k)
	}
	slices.SortFunc(s.Outcomes, func(a, b Outcome) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(b.Count, a.Count), cmp.Compare(a.Outcome, b.Outcome),
			cmp.Compare(a.Blame, b.Blame), cmp.Compare(a.Status, b.Status))
	})
	for name, rs := range byModel {
		s.Models = append(s.Models, Model{Name: name, Figures: figures(rs, w, ps)})
	}
	slices.SortFunc(s.Models, func(a, b Model) int { return cmp.Compare(a.Name, b.Name) })
	return s
}

// figures computes one set of records' figures over window w.
func figures(recs []record.Record, w cell.Window, ps []float64) Figures {
	f := Figures{Requests: len(recs), Errors: map[string]int{}}
	for i := range recs {
		r := &recs[i]
		f.PromptTokens += r.PromptTokens
		switch {
		case r.Outcome == record.OK:
			f.OK++
		case r.Outcome == record.Cancelled:
			f.Cancelled++
		default:
			f.Failed++
			f.Errors[string(r.Outcome)]++
		}
	}
	if len(f.Errors) == 0 {
		f.Errors = nil
	}
	d := cell.Decode(recs, w)
	f.Hist = d.Hist
	f.OutputTokens = d.OutputTokens
	for i := range recs {
		// A non-streaming response has no token events: its tokens count
		// from its usage, at its end.
		if !recs[i].Stream && recs[i].Outcome == record.OK {
			f.OutputTokens += recs[i].CompletionTokens
		}
	}
	if secs := w.Len().Seconds(); secs > 0 {
		f.OutputTokPerS = float64(f.OutputTokens) / secs
		f.RequestsPerS = float64(len(recs)) / secs
		f.AvgActive = d.AvgDecoding
	}
	if p := result.PercentilesOf(d.Hist, ps); p != nil {
		f.TTFTms, f.TBTms, f.E2Ems, f.PerRequest = p.TTFTms, p.TBTms, p.E2Ems, p.PerRequest
	}
	return f
}
