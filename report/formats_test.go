package report

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestEveryKindEveryFormat holds every kind of report to the one list of
// formats: a format added to the table and not to a kind fails here.
func TestEveryKindEveryFormat(t *testing.T) {
	want := slices.Sorted(slices.Values(Formats))
	for name, has := range map[string][]Format{
		"run": runWriters.has(), "comparison": compareWriters.has(), "traffic": trafficWriters.has(),
		"board": boardWriters.has(),
	} {
		if !slices.Equal(has, want) {
			t.Errorf("%s reports are written in %v, want %v", name, has, want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Format
		err  bool
	}{
		{"", Text, false}, {" TXT ", Text, false}, {"text", Text, false}, {"Markdown", Markdown, false},
		{"md", Markdown, false}, {"csv", CSV, false}, {"JSON", JSON, false}, {"htm", HTML, false},
		{"html", HTML, false}, {"pdf", "", true}, {"none", "", true},
	} {
		got, err := ParseFormat(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "text, md, csv, json, html") {
			t.Errorf("ParseFormat(%q) error %q does not list the formats", tt.in, err)
		}
	}
}

// TestReporterAlias: a reporter takes any name ParseFormat reads, and an
// unknown one is refused before anything is written.
func TestReporterAlias(t *testing.T) {
	r := loadRun(t)
	var a, b bytes.Buffer
	if err := Render(&a, r, "markdown"); err != nil {
		t.Fatal(err)
	}
	if err := Render(&b, r, Markdown); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() || a.Len() == 0 {
		t.Error(`Render "markdown" and Markdown differ`)
	}
	var c bytes.Buffer
	if _, err := NewRunReporter(r, "yaml", Options{}); err == nil || c.Len() != 0 {
		t.Errorf("NewRunReporter yaml: %v", err)
	}
}
