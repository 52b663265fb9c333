package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// pt is a decode cell of a constructed run: concurrency, per-request and
// total tok/s, status (Valid where empty).
type pt struct {
	n          int
	per, total float64
	st         result.Status
}

// constructed makes a run of one context (0) whose cells are cs.
func constructed(engine string, cs ...pt) *result.Result {
	r := &result.Result{Schema: 1, Engine: result.Engine{Name: engine, Version: "1.0"}, Model: result.Model{Name: "M"},
		Hardware: result.Hardware{GPU: "G"},
		Settings: result.Settings{API: "chat", WindowSeconds: 10, MaxOutput: 64, Contexts: []int{0}, DecodeTest: "Fixed duration"}}
	for _, c := range cs {
		st := c.st
		if st == "" {
			st = result.Valid
		}
		r.Settings.Concurrency = append(r.Settings.Concurrency, c.n)
		cell := result.Cell{Context: 0, Concurrency: c.n, Status: st, Measured: true, OutputTokens: 100}
		if st.ShowsFigures() {
			cell.PerRequestTokPerSec, cell.TotalTokPerSec, cell.TTFTms, cell.TBTms = c.per, c.total, 50, 1000/c.per
		}
		r.Decode = append(r.Decode, cell)
	}
	return r
}

// threeRuns have a frontier known by hand (TestMarkFrontiers' points):
// a.json's three cells and b.json's 8 × on the frontier of all; b.json
// leads on best decode (600), a.json next (480), c.json last (95).
func threeRuns() []BoardRun {
	return []BoardRun{
		{File: "runs/a.json", Result: constructed("vllm", pt{n: 1, per: 100, total: 100}, pt{n: 4, per: 90, total: 360}, pt{n: 8, per: 60, total: 480})},
		{File: "runs/b.json", Result: constructed("sglang", pt{n: 1, per: 80, total: 80}, pt{n: 4, per: 70, total: 280}, pt{n: 8, per: 50, total: 600})},
		{File: "runs/c.json", Result: constructed("llama.cpp", pt{n: 1, per: 95, total: 95}, pt{n: 4, per: 94, total: 90, st: result.RequestsQueued},
			pt{n: 8, st: result.OverCapacity})},
	}
}

func renderBoard(t *testing.T, runs []BoardRun, f Format, o BoardOptions) string {
	t.Helper()
	var buf bytes.Buffer
	if err := RenderBoard(&buf, runs, f, o); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestBoardRanksAndFrontier(t *testing.T) {
	b, err := newBoard(threeRuns(), BoardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range b.Runs {
		order = append(order, r.Label)
	}
	if want := []string{"b.json", "a.json", "c.json"}; !slices.Equal(order, want) {
		t.Errorf("leaderboard %v, want %v", order, want)
	}
	if len(b.Fronts) != 1 {
		t.Fatalf("%d frontiers, want 1 (context 0)", len(b.Fronts))
	}
	var on []string
	for _, p := range b.Fronts[0].Points {
		if p.OnFrontier {
			on = append(on, b.byIndex(p.Run).Label+"×"+colHead(p.Col))
		}
	}
	if want := []string{"a.json×1", "a.json×4", "a.json×8", "b.json×8"}; !slices.Equal(on, want) {
		t.Errorf("frontier of all runs %v, want %v", on, want)
	}
	// c.json's Requests queued cell is no point: 2 of its 3 cells are
	// not Valid, and they are counted.
	c := b.Runs[2]
	if c.Counts != (cellCounts{Valid: 1, Queued: 1, OverCapacity: 1}) {
		t.Errorf("c.json counts %+v", c.Counts)
	}
	text := renderBoard(t, threeRuns(), Text, BoardOptions{})
	for _, want := range []string{"Leaderboard of 3 runs", "On the frontier of all runs: b.json and a.json.", "1/1/1/0",
		"tokentap report runs/b.json runs/a.json"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

// TestBoardEdges: a single run, an empty run, a run whose cells all
// failed, a run that cannot be compared, and a shard are all listed, none
// silently dropped, and the board still renders in every format.
func TestBoardEdges(t *testing.T) {
	allFailed := constructed("vllm", pt{n: 1, st: result.Failed}, pt{n: 2, st: result.Failed})
	empty := constructed("vllm")
	completions := constructed("tgi", pt{n: 1, per: 500, total: 500})
	completions.Settings.API = "completions"
	shard := constructed("vllm", pt{n: 1, per: 10, total: 10})
	shard.Sharding = &result.Sharding{Run: "s1", Count: 2, Shards: []result.ShardInfo{{Index: 1}}}
	lonely := constructed("vllm", pt{n: 1, per: 10, total: 10})
	lonely.Settings.Contexts = []int{16384}
	lonely.Decode[0].Context = 16384
	for _, tt := range []struct {
		name  string
		runs  []BoardRun
		order []string
		text  []string
	}{
		{"one run", threeRuns()[:1], []string{"a.json"}, []string{"Leaderboard of 1 run", "On the frontier of all runs: a.json."}},
		{"an empty run and an all-failed run last", []BoardRun{{File: "e.json", Result: empty}, {File: "f.json", Result: allFailed}, threeRuns()[0]},
			[]string{"a.json", "e.json", "f.json"}, []string{"0/0/0/2", "0/0/0/0"}},
		{"another API apart", append(threeRuns(), BoardRun{File: "d.json", Result: completions}), []string{"b.json", "a.json", "c.json", "d.json"},
			[]string{"apart  d.json", "d.json: API completions where the ranked runs have chat"}},
		{"a shard alone", append(threeRuns()[:1], BoardRun{File: "s.json", Result: shard}), []string{"a.json", "s.json"},
			[]string{"shard 2 of 2 of run s1, not a whole run: merge the shards"}},
		{"no context in common", append(threeRuns()[:2], BoardRun{File: "l.json", Result: lonely}), []string{"b.json", "a.json", "l.json"},
			[]string{"l.json: no decode context in common with the other runs (it ran 16K)"}},
		{"no Valid cell at all", []BoardRun{{File: "f.json", Result: allFailed}}, []string{"f.json"},
			[]string{"Pareto frontier: no Valid cell of a ranked run to draw one from."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := newBoard(tt.runs, BoardOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, r := range b.Runs {
				order = append(order, r.Label)
			}
			if !slices.Equal(order, tt.order) {
				t.Errorf("order %v, want %v", order, tt.order)
			}
			text := renderBoard(t, tt.runs, Text, BoardOptions{})
			for _, want := range tt.text {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			for _, f := range Formats {
				out := renderBoard(t, tt.runs, f, BoardOptions{})
				for _, r := range tt.runs {
					if !strings.Contains(out, b.Runs[slices.IndexFunc(b.Runs, func(x *boardRun) bool { return x.File == r.File })].Label) {
						t.Errorf("%s does not name %s", f, r.File)
					}
				}
				if f == JSON {
					if err := schematest.ValidateAgainst(BoardJSONSchema, []byte(out)); err != nil {
						t.Errorf("board JSON against board.schema.json: %v\n%s", err, out)
					}
				}
			}
		})
	}
}

// TestBoardShardMerged: a shard whose merged run is on the board counts in
// it, once.
func TestBoardShardMerged(t *testing.T) {
	merged := constructed("vllm", pt{n: 2, per: 50, total: 100})
	merged.Sharding = &result.Sharding{Run: "s1", Count: 2, Shards: []result.ShardInfo{{Index: 0}, {Index: 1}}}
	shard := constructed("vllm", pt{n: 1, per: 50, total: 50})
	shard.Sharding = &result.Sharding{Run: "s1", Count: 2, Shards: []result.ShardInfo{{Index: 0}}}
	b, err := newBoard([]BoardRun{{File: "shard0.json", Result: shard}, {File: "merged.json", Result: merged}}, BoardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.ranked()) != 1 || b.ranked()[0].Label != "merged.json" || !strings.Contains(strings.Join(b.Runs[1].Apart, ""), "of the run merged.json holds merged") {
		t.Errorf("ranked %v; apart %v", b.ranked()[0].Label, b.Runs[1].Apart)
	}
}

func TestBoardLabels(t *testing.T) {
	got := boardLabels([]BoardRun{{File: "x/run.json"}, {File: "y/run.json"}, {File: "a.json"}, {File: "a.json"}, {File: ""}})
	want := []string{"x/run.json", "y/run.json", "a.json", "a.json (2)", "run 5"}
	if !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
}

func TestBoardSort(t *testing.T) {
	runs := threeRuns()
	runs[0].Result.Prefill = []result.Prefill{{Context: 8192, Status: result.Valid, TokPerSec: 3000, TTFTms: 2730}}
	runs[1].Result.Prefill = []result.Prefill{{Context: 8192, Status: result.Valid, TokPerSec: 1000, TTFTms: 8192}}
	for _, tt := range []struct {
		sort string
		want []string
		err  string
	}{
		{"", []string{"b.json", "a.json", "c.json"}, ""},
		{"per-request", []string{"c.json", "a.json", "b.json"}, ""}, // at each run's best decode: 95, 60, 50
		{"run", []string{"a.json", "b.json", "c.json"}, ""},
		{"engine", []string{"c.json", "b.json", "a.json"}, ""},
		{"prefill", []string{"a.json", "b.json", "c.json"}, ""},
		{"prefill@8K", []string{"a.json", "b.json", "c.json"}, ""},
		{"prefill@16K", []string{"a.json", "b.json", "c.json"}, ""}, // nobody has it: the order given stays
		{"valid", []string{"a.json", "b.json", "c.json"}, ""},       // a and b tie: the order given
		{"decode@0", nil, "takes no @context"},
		{"prefill@lots", nil, "not a token count"},
		{"speed", nil, "no leaderboard column"},
		{"slo-decode", nil, "give --slo too"},
	} {
		b, err := newBoard(runs, BoardOptions{Sort: tt.sort})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("--sort %s: error %v, want %q", tt.sort, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, r := range b.Runs {
			order = append(order, r.Label)
		}
		if !slices.Equal(order, tt.want) {
			t.Errorf("--sort %q: %v, want %v", tt.sort, order, tt.want)
		}
	}
}

// TestBoardSLO: with --slo only the cells that meet it are points, the
// ones that miss are counted, and the leaderboard shows the best decode
// within it.
func TestBoardSLO(t *testing.T) {
	spec, err := slo.Parse("ttft=100ms,target=50%")
	if err != nil {
		t.Fatal(err)
	}
	runs := threeRuns()
	// a.json measured these objectives: its 8 × misses them.
	a := runs[0].Result
	a.SLO = &result.SLORun{Spec: spec.Result(), Capacity: []result.SLOCapacity{{Context: 0, Concurrency: 4}}}
	for i, v := range []float64{1, 1, 0.2} {
		a.Decode[i].SLO = &result.SLO{Judged: 10, Good: int(v * 10), Attainment: &v}
	}
	b, err := newBoard(runs, BoardOptions{SLO: spec})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range b.Fronts[0].Points {
		if p.Run == 0 && p.Col.N == 8 {
			t.Error("a.json's 8 × misses the SLO and is a point")
		}
		if p.Run != 0 {
			t.Errorf("a point of %s, whose cells kept no histograms to judge", b.byIndex(p.Run).Label)
		}
	}
	text := renderBoard(t, runs, Text, BoardOptions{SLO: spec})
	for _, want := range []string{"Within SLO", "a.json: 1 Valid cell misses the SLO", "b.json: 3 Valid cells kept no histograms", "Serving capacity under each run's SLO"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	js := renderBoard(t, runs, JSON, BoardOptions{SLO: spec})
	if err := schematest.ValidateAgainst(BoardJSONSchema, []byte(js)); err != nil {
		t.Errorf("board JSON: %v", err)
	}
}

// TestBoardCSV: one row per run and one per decode cell of every run, each
// with the run's label.
func TestBoardCSV(t *testing.T) {
	rows, err := csv.NewReader(strings.NewReader(renderBoard(t, threeRuns(), CSV, BoardOptions{}))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range rows[1:] {
		kinds[r[0]]++
		if r[1] == "" {
			t.Errorf("row without the run's label: %v", r)
		}
		if len(r) != len(rows[0]) {
			t.Errorf("row of %d columns, head %d", len(r), len(rows[0]))
		}
	}
	if kinds["run"] != 3 || kinds["cell"] != 9 {
		t.Errorf("rows by kind %v, want 3 runs and 9 cells", kinds)
	}
}

// TestBoardJSONDocument: the document holds the runs in leaderboard order
// and every point once, against its schema.
func TestBoardJSONDocument(t *testing.T) {
	js := renderBoard(t, threeRuns(), JSON, BoardOptions{})
	if err := schematest.ValidateAgainst(BoardJSONSchema, []byte(js)); err != nil {
		t.Fatal(err)
	}
	var d boardDoc
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		t.Fatal(err)
	}
	if d.Runs[0].Label != "b.json" || d.Runs[0].Rank != 1 || d.Runs[0].Best.TotalTokS != 600 || len(d.Frontiers[0].Points) != 7 {
		t.Errorf("document %+v", d)
	}
	// A document with a field the schema does not know fails it.
	bad := strings.Replace(js, `"board": 1`, `"board": 1, "extra": true`, 1)
	if schematest.ValidateAgainst(BoardJSONSchema, []byte(bad)) == nil {
		t.Error("the schema accepts an unknown field")
	}
}

// TestBoardHTML: one self-contained page, an SVG chart per context whose
// label names a Pareto frontier and every ranked run, a line per run
// through its own frontier and the dominated points faint.
func TestBoardHTML(t *testing.T) {
	page := renderBoard(t, threeRuns(), HTML, BoardOptions{})
	if regexp.MustCompile(`(?i)<script|<link|<img|https?://[^"]*"[^>]*(src|href)`).MatchString(page) {
		t.Error("the page loads something")
	}
	label := regexp.MustCompile(`<svg[^>]*aria-label="([^"]*)"`).FindStringSubmatch(page)
	if label == nil || !strings.Contains(label[1], "Pareto frontier") || !strings.Contains(label[1], "b.json, a.json and c.json") {
		t.Errorf("chart label %q", label)
	}
	if n := strings.Count(page, "<polyline"); n != 3 { // a and b's own frontiers, and the frontier of all
		t.Errorf("%d lines, want 3 (c.json has a single point)", n)
	}
	if n := strings.Count(page, `fill-opacity="0.22"`); n != 0 {
		t.Errorf("%d faint points, want none: no run's own frontier dominates one of its cells", n)
	}
	runs := threeRuns()
	runs[2].Result.Decode[1].Status = result.Valid // c.json's 4 ×: 94, 90, under its 1 ×
	if n := strings.Count(renderBoard(t, runs, HTML, BoardOptions{}), `fill-opacity="0.22"`); n != 1 {
		t.Errorf("%d faint points, want 1", n)
	}
}

// TestBoardScreenshot opens the board in headless Chromium, as the run's
// page is (TestHTMLScreenshot): each run's colour and the grey band of the
// frontier of all runs must cover a line's worth of pixels.
func TestBoardScreenshot(t *testing.T) {
	img, shot, _ := screenshot(t, renderBoard(t, threeRuns(), HTML, BoardOptions{}), 1200)
	for i := range 3 {
		col, _ := runColour(i)
		if n := countColour(img, col); n < 150 {
			t.Errorf("run %d's colour %s covers %d pixels: its line did not render", i, col, n)
		}
	}
	if n := countColour(img, frontierGrey); n < 500 {
		t.Errorf("the frontier band %s covers %d pixels", frontierGrey, n)
	}
	if n := countColour(img, "#ff00ff"); n != 0 {
		t.Errorf("%d magenta pixels on a page without magenta: the colour counter is broken", n)
	}
	t.Logf("screenshot: %s", shot)
}
