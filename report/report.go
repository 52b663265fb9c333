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
	"path/filepath"
	"slices"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// Formats lists the formats Render and Compare accept.
var Formats = []string{"text", "md", "csv", "json", "html"}

// normalize maps a format name (or alias) to its canonical name.
func normalize(format string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "text", "txt", "":
		return "text", nil
	case "md", "markdown":
		return "md", nil
	case "csv":
		return "csv", nil
	case "json":
		return "json", nil
	case "html", "htm":
		return "html", nil
	}
	return "", fmt.Errorf("unknown report format %q (use %s)", format, strings.Join(Formats, ", "))
}

// ParseFormat checks a format name (or alias) and returns its canonical
// name, so a command can refuse an unknown one before it does any work.
func ParseFormat(format string) (string, error) { return normalize(format) }

// FormatForFile guesses the format from an output file's extension
// (".md" → "md", ".html" → "html" …); ok is false when it cannot tell.
func FormatForFile(name string) (format string, ok bool) {
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(name)), ".")
	switch ext {
	case "txt", "md", "markdown", "csv", "json", "html", "htm":
		f, _ := normalize(ext)
		return f, true
	}
	return "", false
}

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

// Render writes r in format: "text" (aligned for a terminal, fits 100
// columns), "md" (Markdown), "csv" (one row per prefill row and decode cell,
// raw numbers), "json" (the document re-encoded) or "html" (one
// self-contained page).
func Render(w io.Writer, r *result.Result, format string) error {
	return RenderWith(w, r, format, Options{})
}

// RenderWith is Render with options.
func RenderWith(w io.Writer, r *result.Result, format string, o Options) error {
	if r == nil {
		return errors.New("report: no result to render")
	}
	f, err := normalize(format)
	if err != nil {
		return err
	}
	switch f {
	case "json":
		// The numbers beside the histograms are the ones asked for.
		cp := *r
		cp.Decode = slices.Clone(r.Decode)
		cp.SetPercentiles(o.percentilesFor(r))
		return cp.Write(w)
	case "csv":
		return writeCSV(w, r, o.percentilesFor(r))
	}
	v := newViewWith(r, o)
	switch f {
	case "md":
		return writeMarkdown(w, v)
	case "html":
		return writeHTML(w, r, v)
	}
	return writeText(w, v)
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
