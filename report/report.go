// Package report renders a run's result document (result.Result) for people:
// an aligned terminal report, Markdown, CSV, the JSON document itself, and a
// self-contained HTML page with a heat-map grid and percentile charts. The
// content and order follow the seed speed-test-matrix pages (title, engine
// line, Hardware, Engine, Run, Launch command, Prefill, Sustained decode,
// All measurements), with numbers formatted as those pages format them.
// Compare renders two runs side by side with per-cell ratios. A run with
// SLOs, the engine's TTFT figures or the decode limit's inputs (METHOD.md
// §6–§8) gets their sections and columns as well (figures.go, slo.go, ttftsplit.go, limit.go).
//
// Everything is rendered from the document alone, so a run can be
// re-rendered or compared long after it ran.
package report

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/tokentap/tokentap/result"
)

// Options change what a report shows.
type Options struct {
	// Percentiles (in percent, e.g. 50, 90, 99) every format shows for
	// TTFT, time between tokens and end-to-end, read off each cell's
	// histograms; nil: the ones the run recorded (Settings.Percentiles),
	// else result.DefaultPercentiles.
	Percentiles []float64
}

// percentilesFor is what o asks for, else what r recorded, else the
// default.
func (o Options) percentilesFor(r *result.Result) []float64 {
	switch {
	case len(o.Percentiles) > 0:
		return o.Percentiles
	case len(r.Settings.Percentiles) > 0:
		return r.Settings.Percentiles
	}
	return result.DefaultPercentiles
}

// run is a run's report subject: the document and the options.
type run struct {
	r *result.Result
	o Options
}

// runWriters write a run's report in each format.
var runWriters = writers[run]{
	Text:     func(w io.Writer, x run) error { return writeText(w, newViewWith(x.r, x.o)) },
	Markdown: func(w io.Writer, x run) error { return writeMarkdown(w, newViewWith(x.r, x.o)) },
	HTML:     func(w io.Writer, x run) error { return writeHTML(w, x.r, newViewWith(x.r, x.o)) },
	CSV:      func(w io.Writer, x run) error { return writeCSV(w, x.r, x.o.percentilesFor(x.r)) },
	JSON: func(w io.Writer, x run) error {
		// The numbers beside the histograms are the ones asked for.
		cp := *x.r
		cp.Decode = slices.Clone(x.r.Decode)
		cp.SetPercentiles(x.o.percentilesFor(x.r))
		return cp.Write(w)
	},
}

// NewRunReporter is the report of run r in format f: Text (aligned for a
// terminal, fits 100 columns), Markdown, CSV (one row per prefill row and
// decode cell, raw numbers), JSON (the document re-encoded) or HTML (one
// self-contained page).
func NewRunReporter(r *result.Result, f Format, o Options) (Reporter, error) {
	if r == nil {
		return nil, errors.New("report: no result to render")
	}
	return runWriters.reporter(f, run{r, o})
}

// Render writes r in format f.
func Render(w io.Writer, r *result.Result, f Format) error {
	return RenderWith(w, r, f, Options{})
}

// RenderWith is Render with options.
func RenderWith(w io.Writer, r *result.Result, f Format, o Options) error {
	rep, err := NewRunReporter(r, f, o)
	if err != nil {
		return err
	}
	return rep(w)
}

// errWriter remembers the first write error so renderers can write freely
// and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func (e *errWriter) print(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}
