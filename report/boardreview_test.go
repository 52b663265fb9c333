package report

import (
	"encoding/csv"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// Findings of the outside review of the board (issue 32, branch review-32).

// TestBoardDiffersNamesColumns: runs whose grids have different
// concurrency levels (1,2,4 against 2,4, as a merged sharded run and a
// plain one had) said "nothing but what ran: the same settings" — the
// columns' values were no setting the board compared.
func TestBoardDiffersNamesColumns(t *testing.T) {
	a := constructed("vllm", pt{n: 1, per: 100, total: 100}, pt{n: 2, per: 90, total: 180}, pt{n: 4, per: 80, total: 320})
	b := constructed("vllm", pt{n: 2, per: 90, total: 180}, pt{n: 4, per: 80, total: 320})
	c := constructed("vllm", pt{n: 1, per: 50, total: 50}, pt{n: 2, per: 45, total: 90}, pt{n: 4, per: 40, total: 160})
	bd, err := newBoard([]BoardRun{{File: "a.json", Result: a}, {File: "b.json", Result: b}, {File: "c.json", Result: c}}, BoardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(bd.Differs, "Run · Concurrency levels") {
		t.Errorf("differs %v: want the concurrency levels named (a 1, 2, 4; b 2, 4)", bd.Differs)
	}
	text := renderBoard(t, []BoardRun{{File: "a.json", Result: a}, {File: "b.json", Result: b}, {File: "c.json", Result: c}}, Text, BoardOptions{})
	if strings.Contains(text, "nothing but what ran") {
		t.Errorf("text says the settings are the same though the concurrency levels differ:\n%s", text)
	}
}

// TestBoardSortFailedMeasuredNothing: --sort failed (fewest first) put
// first a run that measured no cell at all (it broke off: every cell Not
// run), above runs whose every cell is Valid.
func TestBoardSortFailedMeasuredNothing(t *testing.T) {
	good := constructed("vllm", pt{n: 1, per: 100, total: 100}, pt{n: 2, per: 90, total: 180})
	broke := constructed("vllm", pt{n: 1, st: result.NotRun}, pt{n: 2, st: result.NotRun})
	b, err := newBoard([]BoardRun{{File: "broke.json", Result: broke}, {File: "good.json", Result: good}}, BoardOptions{Sort: "failed"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Runs[0].Label != "good.json" {
		t.Errorf("--sort failed leads with %s; a run that measured nothing has no failure count to lead with", b.Runs[0].Label)
	}
}

// TestBoardLabelsSamePathSpeltTwice: "runs/a.json" and "./runs/a.json"
// are one file given twice; they were labelled as two different runs
// instead of by the number METHOD §12 gives a path given twice.
func TestBoardLabelsSamePathSpeltTwice(t *testing.T) {
	got := boardLabels([]BoardRun{{File: "runs/a.json"}, {File: "./runs/a.json"}, {File: "b.json"}})
	want := []string{"runs/a.json", "runs/a.json (2)", "b.json"}
	if !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
}

// legendNames are the run names an SVG's legend shows, in order.
func legendNames(svg string) []string {
	var l []string
	for _, m := range regexp.MustCompile(`stroke-width="3"(?: stroke-dasharray="[^"]*")?/><text x="[0-9.]+" y="[0-9.]+">([^<]*)(?:<title>[^<]*</title>)?</text>`).FindAllStringSubmatch(svg, -1) {
		l = append(l, m[1])
	}
	return l
}

// TestBoardLegendTellsRunsApart: runs labelled by their paths (their base
// names are alike) that share the first 21 characters were clipped to the
// same legend entry, so the chart could not say which line is which run.
func TestBoardLegendTellsRunsApart(t *testing.T) {
	var runs []BoardRun
	for i, v := range []string{"0.6", "0.7", "0.8"} {
		runs = append(runs, BoardRun{File: "results/llama-3-8b/vllm-" + v + "/run.json",
			Result: constructed("vllm", pt{n: 1, per: float64(100 - i), total: float64(100 - i)}, pt{n: 4, per: float64(80 - i), total: float64(320 - i)})})
	}
	html := renderBoard(t, runs, HTML, BoardOptions{})
	names := legendNames(html)
	if len(names) != 3 {
		t.Fatalf("legend names %q, want 3", names)
	}
	if u := slices.Compact(slices.Sorted(slices.Values(names))); len(u) != 3 {
		t.Errorf("legend names %q: two runs have the same entry", names)
	}
}

// TestBoardLegendFits: the legend grows down one row per run from the
// chart's top; past about 19 ranked runs it ran off the fixed 440-pixel
// chart and the last runs had no entry to see.
func TestBoardLegendFits(t *testing.T) {
	var runs []BoardRun
	for i := range 24 {
		runs = append(runs, BoardRun{File: fmt.Sprintf("r%02d.json", i),
			Result: constructed("vllm", pt{n: 1, per: float64(100 + i), total: float64(100 + i)}, pt{n: 4, per: float64(80 + i), total: float64(320 + i)})})
	}
	html := renderBoard(t, runs, HTML, BoardOptions{})
	svg := html[strings.Index(html, "<svg class=\"pareto\""):]
	svg = svg[:strings.Index(svg, "</svg>")]
	h, err := strconv.ParseFloat(regexp.MustCompile(`height="([0-9.]+)"`).FindStringSubmatch(svg)[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`<text x="[0-9.]+" y="([0-9.]+)">([^<]*)(?:<title>[^<]*</title>)?</text>`).FindAllStringSubmatch(svg, -1) {
		y, _ := strconv.ParseFloat(m[1], 64)
		if y > h {
			t.Errorf("legend text %q at y=%g, below the chart's height %g: cut off", m[2], y, h)
		}
	}
}

// TestBoardRateLabels: on a board of request-rate runs the points are
// labelled "2/s", "4/s", but the chart's key said "labels: requests at
// once".
func TestBoardRateLabels(t *testing.T) {
	rateRun := func(engine string, scale float64) *result.Result {
		r := constructed(engine)
		r.Settings.Concurrency = nil
		r.Settings.Rates = []float64{2, 4}
		for i, rate := range []float64{2, 4} {
			r.Decode = append(r.Decode, result.Cell{Context: 0, Rate: rate, Status: result.Valid, Measured: true, OutputTokens: 100,
				PerRequestTokPerSec: scale * float64(90-10*i), TotalTokPerSec: scale * float64(180+160*i), TTFTms: 50, TBTms: 11})
		}
		return r
	}
	runs := []BoardRun{{File: "a.json", Result: rateRun("vllm", 1)}, {File: "b.json", Result: rateRun("sglang", 0.9)}, {File: "c.json", Result: rateRun("tgi", 0.8)}}
	if !runs[0].Result.RateRun() {
		t.Fatal("constructed run is no rate run")
	}
	html := renderBoard(t, runs, HTML, BoardOptions{})
	if !strings.Contains(html, ">4/s<") {
		t.Fatalf("no point labelled 4/s:\n%s", html)
	}
	if strings.Contains(html, "labels: requests at once<") {
		t.Errorf("the key says the labels are requests at once, but they are request rates")
	}
}

// TestBoardCSVZeroCounts: a run's cell counts of zero were written empty
// ("6,,,," for 6 Valid, no others), though the board's CSV keeps an empty
// column for one the row's kind has not: a filter failed_cells == 0 found
// no run.
func TestBoardCSVZeroCounts(t *testing.T) {
	rows, err := csv.NewReader(strings.NewReader(renderBoard(t, threeRuns(), CSV, BoardOptions{}))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, r := range rows[1:] {
		if r[0] != "run" {
			continue
		}
		for _, k := range []string{"valid_cells", "over_capacity_cells", "requests_queued_cells", "failed_cells", "other_cells"} {
			if r[col[k]] == "" {
				t.Errorf("run %s: %s empty, want a count (0)", r[1], k)
			}
		}
	}
}

func TestLegendLabels(t *testing.T) {
	long := strings.Repeat("a", 30)
	for _, tt := range []struct{ in, want []string }{
		{[]string{"a.json", "b.json"}, []string{"a.json", "b.json"}},
		{[]string{"results/llama-3-8b/vllm-0.6/run.json", "results/llama-3-8b/vllm-0.7/run.json"}, []string{"…-8b/vllm-0.6/run.json", "…-8b/vllm-0.7/run.json"}},
		{[]string{long + "-1-" + long, long + "-2-" + long}, []string{"1 " + strings.Repeat("a", 19) + "…", "2 " + strings.Repeat("a", 19) + "…"}},
	} {
		got := legendLabels(tt.in, 22)
		if !slices.Equal(got, tt.want) {
			t.Errorf("legendLabels(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
