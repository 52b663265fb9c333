package report

import (
	"bytes"
	"encoding/csv"
	"math"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

func TestNumberFormats(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"headline above 1,000 has no decimals", fmtHeadline(9918), "9,918"},
		{"headline rounds", fmtHeadline(2340.6), "2,341"},
		{"headline below 1,000 has one decimal", fmtHeadline(606), "606.0"},
		{"headline just under 1,000 rounding up", fmtHeadline(999.96), "1,000"},
		{"headline grid value", fmtHeadline(156.2), "156.2"},
		{"headline absent", fmtHeadline(0), "—"},
		{"headline NaN", fmtHeadline(math.NaN()), "—"},
		{"rate keeps one decimal with separators", fmtRate(9918), "9,918.0"},
		{"rate large", fmtRate(1234567.89), "1,234,567.9"},
		{"ttft integer ms with separators", fmtMs(211378), "211,378 ms"},
		{"ttft rounds", fmtMs(43.6), "44 ms"},
		{"tbt one decimal", fmtTBT(6.21), "6.2 ms"},
		{"active one decimal", fmtActive(0.7), "0.7"},
		{"active sixteen", fmtActive(16), "16.0"},
		{"measured for", fmtSeconds(30), "30.0 s"},
		{"window", fmtWindow(30), "30 s"},
		{"window fraction", fmtWindow(2.5), "2.5 s"},
		{"int", fmtInt(8192), "8,192"},
		{"int small", fmtInt(0), "0"},
		{"negative", fmtFixed(-12345.5, 1), "-12,345.5"},
		{"ctx 0", ctxLabel(0), "0"},
		{"ctx 16K", ctxLabel(16384), "16K"},
		{"ctx 248K", ctxLabel(253952), "248K"},
		{"ctx not a multiple", ctxLabel(1000), "1,000"},
		{"ratio", fmtRatio(1.0949), "×1.09"},
		{"ratio absent", fmtRatio(math.NaN()), "—"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestTitle(t *testing.T) {
	tests := []struct {
		name string
		r    result.Result
		want string
	}{
		{"gpu with vram", result.Result{Model: result.Model{Name: "M"}, Hardware: result.Hardware{GPU: "RTX 3060", VRAM: "12 GB"}}, "M on RTX 3060 12GB"},
		{"several gpus", result.Result{Model: result.Model{Name: "M"}, Hardware: result.Hardware{GPU: "2× RTX 3090", VRAM: "2 × 24 GB"}}, "M on 2× RTX 3090"},
		{"cpu only", result.Result{Model: result.Model{Served: "bench"}, Hardware: result.Hardware{CPU: "AMD EPYC 7B13 (2C)"}}, "bench on AMD EPYC 7B13"},
		{"nothing", result.Result{}, "Unknown model"},
	}
	for _, tt := range tests {
		if got := title(&tt.r); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestEdgeDocuments renders documents the matrix can produce besides a
// full run: empty, interrupted with cells missing, a failed prefill row.
func TestEdgeDocuments(t *testing.T) {
	empty := &result.Result{Schema: 1}
	interrupted := &result.Result{Schema: 1, Interrupted: true,
		Model:    result.Model{Name: "M"},
		Settings: result.Settings{Contexts: []int{0, 1024}, Concurrency: []int{1, 2}, PrefillAt: []int{1024}},
		Prefill:  []result.Prefill{{Context: 1024, Status: result.Failed, Requests: 1, Error: "HTTP 500"}},
		Decode: []result.Cell{{Context: 0, Concurrency: 1, Status: result.Valid, Measured: true, TotalTokPerSec: 50,
			PerRequestTokPerSec: 50, TTFTms: 20, TBTms: 20, AvgActive: 1, OutputTokens: 500, MeasuredForSeconds: 10}}}
	for _, r := range []*result.Result{empty, interrupted} {
		for _, f := range Formats {
			var buf bytes.Buffer
			if err := Render(&buf, r, f); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			if buf.Len() == 0 {
				t.Errorf("%s: empty output", f)
			}
		}
	}
	var buf bytes.Buffer
	if err := Render(&buf, interrupted, "md"); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{"| 0 | 50.0<br>20 ms TTFT, warm prefix | Not run |", "| 1K | Not run | Not run |",
		"Not run: the run stopped before this measurement.", "| 1K | Failed | — |",
		"| Prefill | 1K | 1 | Failed | — | — | — | — | — | 1 | — | — |", "The run was interrupted"} {
		if !strings.Contains(md, want) {
			t.Errorf("interrupted run's Markdown lacks %q\n%s", want, md)
		}
	}
	if strings.Contains(md, "Over capacity:") {
		t.Error("footnote for a status that is not present")
	}
	if err := Render(&buf, nil, "text"); err == nil {
		t.Error("nil result should fail")
	}
	if err := Render(&buf, empty, "yaml"); err == nil || !strings.Contains(err.Error(), "text, md, csv, json, html") {
		t.Errorf("unknown format error should list the formats: %v", err)
	}
}

// TestJSONRoundTrip: the json format is the document itself.
func TestJSONRoundTrip(t *testing.T) {
	r := loadRun(t)
	var a, b bytes.Buffer
	if err := Render(&a, r, "json"); err != nil {
		t.Fatal(err)
	}
	r2, err := result.Read(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("json output does not round-trip")
	}
}

func renderCSVRows(t *testing.T, r *result.Result) [][]string {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, r, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestCSVRows: one row per prefill row and cell, every column, raw numbers.
func TestCSVRows(t *testing.T) {
	r := loadSeed(t, "002")
	var buf bytes.Buffer
	if err := Render(&buf, r, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(r.Prefill) + len(r.Decode); len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	want := len(csvColumns) + len(csvPercentileColumns(result.DefaultPercentiles)) + 1 + len(csvRunColumns)
	for i, row := range rows {
		if len(row) != want {
			t.Fatalf("row %v has %d columns, want %d", row, len(row), want)
		}
		// Every row ends with the run's settings, so rows of several
		// runs in one sheet keep theirs.
		if run := strings.Join(row[len(row)-len(csvRunColumns):], ","); i > 0 && run != ",bench,vllm,0.32.0,,30,8192,,,0,," {
			t.Errorf("row %d's run columns %q, want the run's model, engine, window and max output", i, run)
		}
		for _, c := range row[1:13] {
			if strings.Contains(c, ",") || strings.Contains(c, "—") || strings.Contains(c, " ms") {
				t.Errorf("not a raw number: %q in %v", c, row)
			}
		}
	}
	if got := strings.Join(rows[6][:13], ","); got != "decode,0,1,valid,49.6,49.7,164,warm_prefix,20.1,1,0,1488,30" {
		t.Errorf("first decode row: %s", got)
	}
	// One precision: no figure carries more than 3 decimals (the hit rate,
	// a share, 4); full-precision floats were mixed in before.
	rrows := renderCSVRows(t, loadRun(t))
	for _, row := range rrows[1:] {
		for i, c := range row {
			if _, frac, ok := strings.Cut(c, "."); ok && strings.IndexFunc(c, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' }) < 0 {
				limit := 3
				if rrows[0][i] == "prefix_cache_hit_rate" {
					limit = 4
				}
				if len(frac) > limit {
					t.Errorf("%s = %s: more than %d decimals", rrows[0][i], c, limit)
				}
			}
		}
	}
}

func TestFormatForFile(t *testing.T) {
	for name, want := range map[string]Format{"a.html": "html", "b.MD": "md", "c.markdown": "md", "d.csv": "csv", "e.json": "json", "f.txt": "text", "g.pdf": "", "": ""} {
		got, ok := FormatForFile(name)
		if got != want || ok != (want != "") {
			t.Errorf("FormatForFile(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	r, err := result.ReadFile("testdata/run.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range Formats {
		b.Run(string(f), func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := Render(&buf, r, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCellColumnsFollowStatus: the All measurements row shows figures
// exactly where the grid does (METHOD §3): a Failed cell shows none, even
// when it measured some before its failure (one failed request of 38 once
// blanked the grid cell while this table still printed tok/s and TTFT),
// and no window (a cell stopped at its first failure was measured for
// milliseconds; seed 000's Failed row shows "—"); its request counts stay.
func TestCellColumnsFollowStatus(t *testing.T) {
	figs := result.Cell{Measured: true, TotalTokPerSec: 612.5, PerRequestTokPerSec: 80.1, TTFTms: 44, TBTms: 12.3,
		AvgActive: 7.9, Completed: 37, OutputTokens: 18375, MeasuredForSeconds: 30}
	with := func(st result.Status) result.Cell { c := figs; c.Status = st; return c }
	tests := []struct {
		name    string
		cell    result.Cell
		figures bool   // tok/s … measured for printed
		counts  string // completed requests
	}{
		{"failed after 37 good requests", with(result.Failed), false, "37"},
		{"failed after 12 ms", result.Cell{Status: result.Failed, Measured: true, MeasuredForSeconds: 0.012}, false, "0"},
		{"valid", with(result.Valid), true, "37"},
		{"queued", with(result.RequestsQueued), true, "37"},
		{"cache missed", with(result.CacheMissed), true, "37"},
		{"over capacity never run", result.Cell{Status: result.OverCapacity}, false, "—"},
		{"over capacity: the engine refused in the window", with(result.OverCapacity), false, "37"},
	}
	for _, tt := range tests {
		cols := cellColumns(&tt.cell, false, false)
		for _, i := range []int{4, 5, 6, 7, 8, 11} { // tok/s, per request, TTFT, TBT, active, measured for
			if tt.cell.Status == result.OverCapacity && (i == 8 || i == 11) {
				continue // tried and refused: its window and active requests stay (seed 002's 248K × 1)
			}
			if got := cols[i] != dash; got != tt.figures {
				t.Errorf("%s: column %q = %q; figures shown %v, want %v", tt.name, allColumns[i], cols[i], got, tt.figures)
			}
		}
		if cols[9] != tt.counts {
			t.Errorf("%s: completed %q, want %q", tt.name, cols[9], tt.counts)
		}
	}
}

// TestMarkdownTablesAreWellFormed: every Markdown table has as many cells
// in its separator and every row as in its header, with and without the
// prefix-cache column (a separator one short renders the table as text),
// and in the SLO, TTFT split and bandwidth-limit sections.
func TestMarkdownTablesAreWellFormed(t *testing.T) {
	docs := map[string]*result.Result{"run": loadRun(t), "seed 002": loadSeed(t, "002"), "beyond": beyondDoc(t)}
	for name, r := range docs {
		var b strings.Builder
		if err := Render(&b, r, "md"); err != nil {
			t.Fatal(err)
		}
		cols := -1
		for i, line := range strings.Split(b.String(), "\n") {
			if !strings.HasPrefix(line, "|") {
				cols = -1
				continue
			}
			n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") - 1
			if cols < 0 {
				cols = n
				continue
			}
			if n != cols {
				t.Errorf("%s: line %d has %d cells, its table's header %d: %q", name, i+1, n, cols, line)
			}
		}
	}
}

// TestGridAndTableAgree: for every status, the decode grid shows a cell's
// figures exactly when All measurements does (METHOD §3), in every format
// that has both.
func TestGridAndTableAgree(t *testing.T) {
	statuses := []result.Status{result.Valid, result.RequestsQueued, result.CacheMissed, result.Failed, result.OverCapacity, result.NotRun}
	r := &result.Result{Schema: 1, Settings: result.Settings{Contexts: []int{0}}}
	for i, st := range statuses {
		r.Settings.Concurrency = append(r.Settings.Concurrency, i+1)
		r.Decode = append(r.Decode, result.Cell{Context: 0, Concurrency: i + 1, Status: st, Measured: true, TotalTokPerSec: 612.5,
			PerRequestTokPerSec: 80, TTFTms: 44, TBTms: 12, AvgActive: 1, Completed: 3, OutputTokens: 900, MeasuredForSeconds: 30})
	}
	// A queued cell whose window saw no token (its engine still
	// prefilling what it ran) has no figures to show.
	statuses = append(statuses, result.RequestsQueued)
	r.Settings.Concurrency = append(r.Settings.Concurrency, len(statuses))
	r.Decode = append(r.Decode, result.Cell{Context: 0, Concurrency: len(statuses), Status: result.RequestsQueued, Measured: true, MeasuredForSeconds: 8,
		Reason: "the engine reported up to 4 waiting requests during the window; no token arrived in the 8.0 s window"})
	v := newView(r)
	for i, g := range v.Grid[0].Cells {
		inGrid := g.TokS != ""
		inTable := v.All[i][4] != dash
		if want := r.Decode[i].ShowsFigures(); inGrid != inTable || inGrid != want {
			t.Errorf("%s: figures in the grid %v, in All measurements %v; METHOD says %v", statuses[i], inGrid, inTable, want)
		}
	}
	last := v.Grid[0].Cells[len(statuses)-1]
	if last.TokS != "" || last.TTFT != "" || gridCellMD(last) != "Requests queued" {
		t.Errorf("queued cell without a token shows %q tok/s, TTFT %q, Markdown %q", last.TokS, last.TTFT, gridCellMD(last))
	}
	if !strings.Contains(strings.Join(v.Failures, "\n"), "no token arrived in the 8.0 s window") {
		t.Errorf("the reports' list of what went wrong does not say why it shows nothing: %q", v.Failures)
	}
}

// TestCSVFloat: CSV figures carry no arithmetic noise (a percentile read
// from microsecond histograms printed as 0.049424800000000005).
func TestCSVFloat(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{0.049424800000000005, "0.0494248"},
		{0.1 + 0.2, "0.3"},
		{69.65357371002449, "69.65357371"},
		{10002.431, "10002.431"},
		{123456789.5, "123456789.5"},
		{0, "0"},
	} {
		if got := csvFloat(tt.in); got != tt.want {
			t.Errorf("csvFloat(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
