package report

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// Format is a report format. The formats table below is the one place
// that lists them: a name added there is accepted by every command, guessed
// from an output file's extension and, through each kind's writers, made
// by every kind of report (a run, a comparison, a traffic summary, a
// board of many runs).
type Format string

// The formats.
const (
	Text     Format = "text" // aligned for a terminal, fits 100 columns
	Markdown Format = "md"
	CSV      Format = "csv"  // raw numbers, one row per row of the report
	JSON     Format = "json" // a document with a schema
	HTML     Format = "html" // one self-contained page, no scripts, nothing fetched
)

// formats lists every format with the other names (which are the file
// extensions too) that mean it.
var formats = []struct {
	Format  Format
	Aliases []string
}{
	{Text, []string{"txt"}},
	{Markdown, []string{"markdown"}},
	{CSV, nil},
	{JSON, nil},
	{HTML, []string{"htm"}},
}

// Formats lists the formats every kind of report is written in.
var Formats = func() []Format {
	var l []Format
	for _, f := range formats {
		l = append(l, f.Format)
	}
	return l
}()

// formatNames is "text, md, csv, json, html", for messages.
func formatNames() string {
	var l []string
	for _, f := range formats {
		l = append(l, string(f.Format))
	}
	return strings.Join(l, ", ")
}

// lookup finds the format a name (or alias, any case) means.
func lookup(name string) (Format, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, f := range formats {
		if name == string(f.Format) || slices.Contains(f.Aliases, name) {
			return f.Format, true
		}
	}
	return "", false
}

// ParseFormat checks a format name (or alias) and returns its format, so
// a command can refuse an unknown one before it does any work. An empty
// name is Text.
func ParseFormat(name string) (Format, error) {
	if strings.TrimSpace(name) == "" {
		return Text, nil
	}
	if f, ok := lookup(name); ok {
		return f, nil
	}
	return "", fmt.Errorf("unknown report format %q (use %s)", name, formatNames())
}

// FormatForFile guesses the format from an output file's extension
// (".md" → Markdown, ".html" → HTML …); ok is false when it cannot tell.
func FormatForFile(name string) (format Format, ok bool) {
	ext := strings.TrimPrefix(filepath.Ext(name), ".")
	if ext == "" {
		return "", false
	}
	return lookup(ext)
}

// A Reporter writes one report, its subject and format bound when it was
// made (as vegeta's Reporter).
type Reporter func(io.Writer) error

// writers are what one kind of report writes in each format, the subject
// T given. Every kind lists every format (TestEveryKindEveryFormat).
type writers[T any] map[Format]func(io.Writer, T) error

// reporter binds subject v and format f (any name ParseFormat reads).
func (ws writers[T]) reporter(f Format, v T) (Reporter, error) {
	f, err := ParseFormat(string(f))
	if err != nil {
		return nil, err
	}
	write, ok := ws[f]
	if !ok {
		return nil, fmt.Errorf("report: this report has no %s form", f)
	}
	return func(w io.Writer) error { return write(w, v) }, nil
}

// write makes the reporter and runs it.
func (ws writers[T]) write(w io.Writer, f Format, v T) error {
	rep, err := ws.reporter(f, v)
	if err != nil {
		return err
	}
	return rep(w)
}

// has lists the formats ws writes, for the test that every kind has all.
func (ws writers[T]) has() []Format {
	var l []Format
	for f := range ws {
		l = append(l, f)
	}
	slices.Sort(l)
	return l
}
