package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/change"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// fasterRun is the synthetic run made 10% faster (higher tok/s, lower
// latency) with two cells changing status: 32K×2 stops queueing and 64K×1
// no longer fails.
func fasterRun(t *testing.T) *result.Result {
	t.Helper()
	b := loadRun(t)
	b.Engine.Version = "0.2.0"
	for i := range b.Decode {
		c := &b.Decode[i]
		if c.Measured {
			c.TotalTokPerSec *= 1.1
			c.TTFTms /= 1.1
			c.TBTms /= 1.1
		}
		if c.Status == result.RequestsQueued {
			c.Status = result.Valid
		}
	}
	f := b.Cell(65536, 1)
	f.Status, f.Measured, f.TotalTokPerSec, f.TTFTms, f.TBTms = result.Valid, true, 30, 400, 33
	for i := range b.Prefill {
		b.Prefill[i].TokPerSec *= 1.1
	}
	return b
}

func TestCompare(t *testing.T) {
	a, b := loadRun(t), fasterRun(t)
	for _, format := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := CompareLabeled(&buf, a, b, "before.json", "after.json", format); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{"×1.10", "⚠", "before.json", "after.json", "0.1.0", "0.2.0", "2 of 16 cells in both runs changed status"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s comparison lacks %q", format, want)
			}
		}
		if format != "html" && strings.Count(out, "⚠") < 3 { // two cells + the note
			t.Errorf("%s: want a ⚠ mark on each changed cell, got %d marks", format, strings.Count(out, "⚠"))
		}
	}

	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(a.Prefill) + len(a.Decode); len(rows) != want {
		t.Fatalf("%d CSV rows, want %d", len(rows), want)
	}
	changed := 0
	for _, r := range rows[1:] {
		if r[5] == "true" {
			changed++
		}
		if r[3] == "valid" && r[4] == "valid" && r[0] == "decode" && r[8] != "1.1000" {
			t.Errorf("cell %s×%s tok/s ratio %s, want 1.1000", r[1], r[2], r[8])
		}
	}
	if changed != 2 {
		t.Errorf("%d changed cells in CSV, want 2", changed)
	}

	buf.Reset()
	if err := Compare(&buf, a, b, "json"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cells []jsonPair `json:"cells"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.Cells) != len(a.Decode) {
		t.Fatalf("JSON comparison: %v, %d cells", err, len(doc.Cells))
	}

	if err := Compare(&buf, a, b, "pdf"); err == nil || !strings.Contains(err.Error(), "unknown report format") {
		t.Errorf("unknown format: err = %v", err)
	}
	if err := Compare(&buf, a, nil, "text"); err == nil {
		t.Error("comparing with nil should fail")
	}
}

// TestCompareSame: a run against itself changes nothing, every ratio is 1.
func TestCompareSame(t *testing.T) {
	a := loadSeed(t, "002")
	var buf bytes.Buffer
	if err := Compare(&buf, a, a, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "⚠V") || !strings.Contains(out, "0 of 48 cells in both runs changed status") || !strings.Contains(out, "nothing: same model") {
		t.Errorf("self-comparison:\n%s", out)
	}
	if strings.Contains(out, "×0.") || strings.Contains(out, "×1.01") {
		t.Error("self-comparison has a ratio other than ×1.00")
	}
}

// TestCompareGolden pins the comparison layouts of two different seed runs.
func TestCompareGolden(t *testing.T) {
	a, b := loadSeed(t, "002"), loadSeed(t, "003")
	for _, f := range []struct {
		format Format
		ext    string
	}{{"text", "txt"}, {"md", "md"}, {"csv", "csv"}} {
		var buf bytes.Buffer
		if err := CompareLabeled(&buf, a, b, "seed-002.json", "seed-003.json", f.format); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "compare-002-003."+f.ext, buf.Bytes())
		if f.format == "text" {
			for i, l := range strings.Split(buf.String(), "\n") {
				if runeLen(l) > textWidth {
					t.Errorf("comparison line %d is %d columns: %q", i+1, runeLen(l), l)
				}
			}
		}
	}
}

// TestCompareNamesOneRunCells: runs with concurrency 1,4 and 1,4,8 differ
// by two cells; the comparison must say so (what differs, which cells are
// in one run only) instead of "nothing" and "0 of 6 cells changed".
func TestCompareNamesOneRunCells(t *testing.T) {
	mk := func(conc ...int) *result.Result {
		r := &result.Result{Schema: 1, Model: result.Model{Name: "M"},
			Settings: result.Settings{Contexts: []int{0, 16384}, Concurrency: conc}}
		for _, c := range r.Settings.Contexts {
			for _, n := range conc {
				r.Decode = append(r.Decode, result.Cell{Context: c, Concurrency: n, Status: result.Valid, Measured: true,
					TotalTokPerSec: 100 * float64(n), TTFTms: 40, TBTms: 10})
			}
		}
		return r
	}
	a, b := mk(1, 4), mk(1, 4, 8)
	for _, format := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, format); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{"Concurrency levels", "1, 4, 8", "0 of 4 cells in both runs changed status",
			"2 cells are only in B (0 × 8, 16K × 8)", "B only"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s comparison lacks %q:\n%s", format, want, out)
			}
		}
		if strings.Contains(out, "othing: same model") || strings.Contains(out, "of 6 cells") {
			t.Errorf("%s comparison says nothing differs", format)
		}
		// One legend, naming only what the grid shows: no status letters
		// here (no status changed), no A only.
		for _, never := range []string{"Q Requests queued", "OC Over capacity", "NR Not run", "A only", "⚠"} {
			if strings.Contains(out, never) {
				t.Errorf("%s legend names %q, which the grid does not use", format, never)
			}
		}
	}
	if only := onlyIn(comparedCells(t, a, b))["b"]; only != 2 {
		t.Errorf("JSON: %d cells only in B, want 2", only)
	}
}

// comparedCells is the JSON comparison of a and b, cell by cell.
func comparedCells(t *testing.T, a, b *result.Result) []jsonPair {
	t.Helper()
	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "json"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cells []jsonPair `json:"cells"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Cells
}

// onlyIn counts compared cells by where they are: "" both, "a", "b".
func onlyIn(cells []jsonPair) map[string]int {
	n := map[string]int{}
	for _, c := range cells {
		n[c.OnlyIn]++
	}
	return n
}

// TestCompareSweepRates: two sweeps' rates are measured, so they differ a
// little (6.66/s against 6.67/s); their rate cells pair at the nearest
// rate within 5%, never one far off, and the comparison says what it
// paired.
func TestCompareSweepRates(t *testing.T) {
	mk := func(rates ...float64) *result.Result {
		r := &result.Result{Schema: 1, Model: result.Model{Name: "M"},
			Settings: result.Settings{Contexts: []int{0}, Concurrency: []int{1, 64}, Sweep: true}}
		for _, n := range []int{1, 64} {
			r.Decode = append(r.Decode, result.Cell{Context: 0, Concurrency: n, Status: result.Valid, Measured: true, TotalTokPerSec: 50 * float64(n), TTFTms: 40, TBTms: 10})
		}
		for _, rate := range rates {
			r.Decode = append(r.Decode, result.Cell{Context: 0, Rate: rate, Status: result.Valid, Measured: true, TotalTokPerSec: 100 * rate, TTFTms: 40, TBTms: 10})
		}
		return r
	}
	a, b := mk(6.66, 13.3, 19.9), mk(6.67, 13.3, 20.1, 26.8)
	cells := comparedCells(t, a, b)
	// 2 concurrency cells and 3 rates in both; B's fourth rate is B's alone.
	if only := onlyIn(cells); only[""] != 5 || only["a"] != 0 || only["b"] != 1 {
		t.Errorf("cells in both, A only, B only: %d, %d, %d; want 5, 0, 1", only[""], only["a"], only["b"])
	}
	// B's own rate is kept where it paired with A's a little apart.
	pairs := map[float64]float64{}
	for _, c := range cells {
		pairs[c.Rate] = c.RateB
	}
	if pairs[6.66] != 6.67 || pairs[13.3] != 0 || pairs[19.9] != 20.1 || pairs[26.8] != 0 {
		t.Errorf("rates and B's own rates %v; want 6.66 with 6.67, 19.9 with 20.1, the rest B's own", pairs)
	}
	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "text"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Sweep rates (cells paired at rates within 5%)", "0: 6.66, 13.3, 19.9", "0: 6.67, 13.3, 20.1, 26.8"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the comparison lacks %q:\n%s", want, buf.String())
		}
	}
	// Sweeps of different lengths: the equal rate pairs, and no cell is
	// paired at a rate far from its own (a 16-stream sweep's one rate,
	// 18.7/s, had been divided by the 6.25/s cell of a longer one, and
	// the longer one's own 18.7/s cell dropped).
	for _, tt := range []struct {
		a, b      []float64
		both, onB int
	}{
		{[]float64{18.7}, []float64{6.25, 8.03, 16.9, 18.7}, 3, 3},
		{[]float64{6.25, 8.03, 16.9, 18.7}, []float64{18.7}, 3, 0},
		{[]float64{1, 2, 4, 8}, []float64{10, 20, 40, 80}, 2, 4},
	} {
		if only := onlyIn(comparedCells(t, mk(tt.a...), mk(tt.b...))); only[""] != tt.both || only["b"] != tt.onB {
			t.Errorf("sweeps at %v and %v: %d cells in both, %d B only; want %d and %d", tt.a, tt.b, only[""], only["b"], tt.both, tt.onB)
		}
	}
	// Not sweeps: rates pair only where equal.
	a.Settings.Sweep, b.Settings.Sweep = false, false
	if only := onlyIn(comparedCells(t, a, b)); only["a"] != 2 || only["b"] != 3 {
		t.Errorf("rate runs, not sweeps: A only %d, B only %d; want 2 and 3 (only 13.3 in both)", only["a"], only["b"])
	}
}

// TestPairRates: sweeps' rates pair in both runs' order, equal rates
// first; nearest-first had crossed 11.7↔12.1 and 12.0↔11.9 (one
// comparison in eight of sweeps 2% apart, by the outside review).
func TestPairRates(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ra, rb []float64
		want   map[int]int // b's index → a's
	}{
		{"close, in order", []float64{10.2, 10.5, 10.7, 11, 11.2, 11.5, 11.7, 12}, []float64{10.2, 10.5, 10.8, 11, 11.3, 11.6, 11.9, 12.1},
			map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7}},
		{"an equal rate anchors", []float64{18.7}, []float64{6.25, 8.03, 16.9, 18.7}, map[int]int{3: 0}},
		{"too far apart", []float64{1, 2, 4, 8}, []float64{10, 20, 40, 80}, map[int]int{}},
		{"one extra in B", []float64{6.66, 13.3, 19.9}, []float64{6.67, 13.3, 20.1, 26.8}, map[int]int{0: 0, 1: 1, 2: 2}},
		{"a shift keeps order", []float64{10, 10.3}, []float64{10.3, 10.6}, map[int]int{0: 1}},
	} {
		got := pairRates(tt.ra, tt.rb)
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		for j1, i1 := range got {
			for j2, i2 := range got {
				if (j1 < j2) != (i1 < i2) && j1 != j2 {
					t.Errorf("%s: pairs %d↔%d and %d↔%d cross", tt.name, i1, j1, i2, j2)
				}
			}
		}
	}
}

// TestCompareLegendLetters: the text grid's legend names exactly the
// status letters its change marks use.
func TestCompareLegendLetters(t *testing.T) {
	var buf bytes.Buffer
	if err := Compare(&buf, loadRun(t), fasterRun(t), "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	grid, _, _ := strings.Cut(out, "Measured or changed cells")
	_, grid, _ = strings.Cut(grid, "Sustained decode")
	grid = strings.ReplaceAll(grid, "\n", " \n") // a wrapped legend stays one text
	for letter, label := range map[string]string{"V": "Valid", "Q": "Requests queued", "F": "Failed", "OC": "Over capacity", "CM": "Cache missed", "NR": "Not run"} {
		used := strings.Contains(grid, "⚠"+letter+"→") || strings.Contains(grid, "→"+letter+" ")
		for _, l := range strings.Split(grid, "\n") {
			used = used || strings.HasSuffix(strings.TrimSpace(l), "→"+letter)
		}
		named := strings.Contains(strings.Join(strings.Fields(grid), " "), letter+" "+label)
		if used != named {
			t.Errorf("letter %s: used in the grid %v, named in the legend %v\n%s", letter, used, named, grid)
		}
	}
}

// TestCompareNoise: the grid marks a ratio whose change is within the
// cells' own noise (package change's verdict) with "~" and the legend says
// what it is; a change beyond it, or a cell without sub-windows (no
// verdict), is not marked.
func TestCompareNoise(t *testing.T) {
	cell := func(tbtMs, spread float64, sub bool) result.Cell {
		s := histo.New()
		for range 40 {
			s.RecordTTFT(40 * time.Millisecond)
		}
		c := result.Cell{Context: 0, Concurrency: 1, Status: result.Valid, Measured: true,
			TotalTokPerSec: 1000 / tbtMs, TTFTms: 40, TBTms: tbtMs, Histograms: s}
		if sub {
			c.SubWindows = &result.SubWindows{}
			for i := range 10 {
				// Sub-windows about the cell's figures, ± spread.
				f := 1 + spread*float64(i%3-1)
				c.SubWindows.TokS = append(c.SubWindows.TokS, c.TotalTokPerSec*f)
				c.SubWindows.TBTms = append(c.SubWindows.TBTms, tbtMs/f)
			}
		}
		return c
	}
	run := func(c result.Cell) *result.Result {
		return &result.Result{Schema: 1, Settings: result.Settings{Contexts: []int{0}, Concurrency: []int{1}}, Decode: []result.Cell{c}}
	}
	for _, tt := range []struct {
		name         string
		a, b         result.Cell
		noise, known bool
	}{
		{"3% change, 10% spread", cell(10, 0.10, true), cell(10.3, 0.10, true), true, true},
		{"30% change, 10% spread", cell(10, 0.10, true), cell(13, 0.10, true), false, true},
		{"3% change, 0.5% spread", cell(10, 0.005, true), cell(10.3, 0.005, true), false, true},
		{"no sub-windows", cell(10, 0.10, false), cell(10.3, 0.10, false), false, false},
	} {
		p := pairCell{A: &tt.a, B: &tt.b, SA: result.Valid, SB: result.Valid, Noise: change.Of(&tt.a, &tt.b)}
		for name, v := range map[string]change.Verdict{"tok/s": p.Noise.TokS, "TBT": p.Noise.TBT} {
			if v.Noise() != tt.noise || v.Known != tt.known {
				t.Errorf("%s: %s verdict %+v; want noise %v known %v", tt.name, name, v, tt.noise, tt.known)
			}
		}
		var buf bytes.Buffer
		if err := Compare(&buf, run(tt.a), run(tt.b), "text"); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(buf.String()), " ")
		grid := gridText(p)
		if marked := strings.HasSuffix(grid, noiseMark); marked != (tt.noise && tt.known) || !strings.Contains(out, "0 "+grid+" ") {
			t.Errorf("%s: grid cell %q, noise marked %v\n%s", tt.name, grid, marked, buf.String())
		}
		if tt.noise && !strings.Contains(out, noiseMark+" the change is within the cells' own noise") {
			t.Errorf("%s: the legend does not explain the noise mark", tt.name)
		}
		buf.Reset()
		if err := Compare(&buf, run(tt.a), run(tt.b), "json"); err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(buf.String(), `"tok_s_interval"`); has != tt.known {
			t.Errorf("%s: JSON has the tok/s interval %v, want %v", tt.name, has, tt.known)
		}
	}
}

// TestCompareRequestSettings: two runs that sent different requests
// (sampling, extra body fields, a shared prefix) are not the same run:
// the comparison names each difference, and a single report shows them.
func TestCompareRequestSettings(t *testing.T) {
	a := loadSeed(t, "002")
	for _, tc := range []struct {
		name string
		edit func(s *result.Settings)
		diff string
	}{
		{"sampling", func(s *result.Settings) { s.Sampling = map[string]any{"temperature": 0.7, "seed": 42} }, "Sampling"},
		{"extra fields", func(s *result.Settings) {
			s.RequestFields = map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}
		}, "Request fields"},
		{"shared prefix", func(s *result.Settings) { s.SharedPrefix = 256 }, "Shared prefix"},
	} {
		b := loadSeed(t, "002")
		tc.edit(&b.Settings)
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, "text"); err != nil {
			t.Fatal(err)
		}
		_, differs, _ := strings.Cut(buf.String(), "What differs")
		if strings.Contains(buf.String(), "nothing: same model") || !strings.Contains(differs, tc.diff) {
			t.Errorf("%s: the comparison does not name it:\n%.1500s", tc.name, buf.String())
		}
		buf.Reset()
		if err := Render(&buf, b, "text"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), tc.diff) {
			t.Errorf("%s: the report does not show it", tc.name)
		}
	}
}

// TestCompareJudgingSettings: SLOs given to one run only, or
// --finish-requests, change what the figures mean: the comparison names
// them, and a long value wraps whole, never cut inside a word.
func TestCompareJudgingSettings(t *testing.T) {
	a := loadSeed(t, "002")
	spec, err := slo.Parse("ttft=500ms,tbt=50ms")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(r *result.Result)
		diff []string
	}{
		{"slo on one side", func(r *result.Result) { r.SLO = &result.SLORun{Spec: spec.Result()} }, []string{"SLOs", "TTFT ≤ 500 ms"}},
		{"finish requests", func(r *result.Result) { r.Settings.FinishRequests = true }, []string{"Finish requests"}},
		{"a long sampling value", func(r *result.Result) {
			r.Settings.Sampling = map[string]any{"temperature": 0.7, "top_p": 0.95, "top_k": 20, "presence_penalty": 1.5, "seed": 42}
		}, []string{"top_p 0.95", "presence_penalty 1.5"}},
	} {
		b := loadSeed(t, "002")
		tc.edit(b)
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, "text"); err != nil {
			t.Fatal(err)
		}
		_, differs, _ := strings.Cut(buf.String(), "What differs")
		differs, _, _ = strings.Cut(differs, "\n\n")
		flat := strings.Join(strings.Fields(differs), " ")
		for _, d := range tc.diff {
			if !strings.Contains(flat, d) {
				t.Errorf("%s: What differs lacks %q:\n%s", tc.name, d, differs)
			}
		}
		if strings.Contains(differs, "…") {
			t.Errorf("%s: a value is cut:\n%s", tc.name, differs)
		}
	}
}

// TestCompareCellsInNeither: a concurrency run against a rate run shares
// no column; a grid cell neither run has is "—", never "Not run" (a status
// of neither), and the CSV and JSON list only cells a run has.
func TestCompareCellsInNeither(t *testing.T) {
	a, b := loadSeed(t, "002"), rateRun(100)
	for _, format := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, format); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if _, body, ok := strings.Cut(out, "</style>"); ok {
			out = body // the page's style names every status's class
		}
		for _, wrong := range []string{"Not run", "NR", "not_run"} {
			if strings.Contains(out, wrong) {
				t.Errorf("%s comparison shows %q for cells in neither run", format, wrong)
			}
		}
		if !strings.Contains(out, "or request rates") {
			t.Errorf("%s comparison does not say its columns are levels or rates", format)
		}
		if !strings.Contains(buf.String(), "in neither run") {
			t.Errorf("%s comparison's legend does not say what — is", format)
		}
	}
	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "csv"); err != nil {
		t.Fatal(err)
	}
	decode := strings.Count(buf.String(), "\ndecode,")
	if want := len(a.Decode) + len(b.Decode); decode != want {
		t.Errorf("csv has %d decode rows, want %d (the cells of A and of B)", decode, want)
	}
}
