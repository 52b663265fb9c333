package report

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
)

func f64(v float64) *float64 { return &v }

// syntheticBeyond is the synthetic run with METHOD §6–§8's figures: SLO
// attainment falling with concurrency and context, a TTFT split from a
// vLLM-like engine (one cell with only a per-response prefill, as
// llama.cpp's, one with nothing), and decode against an RTX 3060's
// bandwidth for an 8B model at 4.9 GB.
func syntheticBeyond() *result.Result {
	r := syntheticRun()
	r.SLO = &result.SLORun{Spec: result.SLOSpec{Text: "ttft=500ms,tbt=50ms", TTFTms: 500, TBTms: 50, Target: 0.9}}
	r.Bandwidth = &result.Bandwidth{GBPerSec: 360, GBPerSecSource: "tokentap's table: RTX 3060 12 GB, NVIDIA GeForce RTX 30 Series specifications (nvidia.com) (GPU detected)",
		WeightBytes: 4_900_000_000, WeightSource: "GET /v1/models data[0].meta.size", Layers: 32, KVHeads: 8, HeadDim: 128,
		ShapeSource: "GGUF metadata of /models/llama-3-8b.Q4_K_M.gguf (GET /props model_path)", KVDType: "f16", KVBytesPerElem: 2,
		KVDTypeSource: "the launch command sets no --cache-type-k/-v: llama.cpp's default, f16", KVBytesPerToken: 131072}
	judged, good := 0, 0
	for i := range r.Decode {
		c := &r.Decode[i]
		if !c.Status.ShowsFigures() {
			continue
		}
		n := 10 * c.Concurrency
		g := n - c.Concurrency*c.Concurrency/2 - c.Context/16384
		s := &result.SLO{Judged: n, Good: g, Attainment: f64(float64(g) / float64(n)), GoodputReqPerSec: float64(g) / 10,
			GoodputTokPerSec: float64(g) * 80 / 10, Undecided: c.Concurrency, JudgedCut: c.Concurrency / 2, Missed: map[string]int{result.SLOTBT: n - g}}
		if g < n {
			s.MostMissed = result.SLOTBT
		}
		judged, good = judged+n, good+g
		c.SLO = s
		q, p := 0.4*float64(c.Concurrency), 20+float64(c.Context)/1024
		switch {
		case c.Context == 16384 && c.Concurrency == 1:
			c.TTFTSplit = &result.TTFTSplit{ClientMs: c.TTFTms, ClientRequests: 3,
				Prefill:       &result.TTFTPart{Ms: p, Requests: 3, Source: "timings.prompt_ms of each response (llama.cpp), over the window's requests that ended with usage"},
				UnaccountedMs: f64(c.TTFTms - p)}
		case c.Context == 32768 && c.Concurrency == 1:
			// the engine said nothing of this cell
		case c.Context == 0 && c.Concurrency == 8:
			// TGI's figures, over the requests that finished
			c.TTFTSplit = (&result.TTFTSplit{ClientMs: c.TTFTms, ClientRequests: 6, Over: result.OverFinished,
				Queue:      &result.TTFTPart{Ms: q, Requests: 6, Source: "GET /metrics tgi_request_queue_duration _sum/_count growth over the window, of the requests that succeeded (TGI records it only then)"},
				Validation: &result.TTFTPart{Ms: 0.8, Requests: 6, Source: "GET /metrics tgi_request_validation_duration _sum/_count growth over the window, of the requests that succeeded (TGI records it only then)"},
				Note:       "Over the 6 requests that finished: the engine keeps its validation time and queue time only of those, and 2 more of the window were cut (--finish-requests lets them finish)."}).Finish()
		default:
			e := c.TTFTms - 1.5
			c.TTFTSplit = &result.TTFTSplit{ClientMs: c.TTFTms, ClientRequests: c.Concurrency,
				Queue:      &result.TTFTPart{Ms: q, Requests: c.Concurrency, Source: "GET /metrics vllm:request_queue_time_seconds _sum/_count growth over the window"},
				Prefill:    &result.TTFTPart{Ms: p, Requests: c.Concurrency, Source: "GET /metrics vllm:request_prefill_time_seconds _sum/_count growth over the window"},
				EngineTTFT: &result.TTFTPart{Ms: e, Requests: c.Concurrency, Source: "GET /metrics vllm:time_to_first_token_seconds _sum/_count growth over the window"},
				OutsideMs:  f64(1.5)}
		}
		seq := float64(c.Context) + 2048
		lim := 360e9 * c.AvgActive / (4.9e9 + c.AvgActive*seq*131072)
		c.DecodeLimit = &result.DecodeLimit{BandwidthLimitTokPerSec: lim, ShareOfBandwidthLimit: c.TotalTokPerSec / lim, Batch: c.AvgActive, SeqTokens: seq}
	}
	r.SLO.OverallCells, r.SLO.FailedCellCount = 9, 1
	r.SLO.FailedCells = &result.SLO{Judged: 12, Good: 2, Attainment: f64(2.0 / 12), Undecided: 3}
	r.SLO.Overall = result.SLO{Judged: judged, Good: good, Undecided: 40, JudgedCut: 12, Attainment: f64(float64(good) / float64(judged)), GoodputReqPerSec: float64(good) / 110,
		GoodputTokPerSec: float64(good) * 8 / 11, Missed: map[string]int{result.SLOTBT: judged - good}, MostMissed: result.SLOTBT}
	r.SLO.Capacity = []result.SLOCapacity{{Context: 0, Concurrency: 4}, {Context: 16384, Concurrency: 2}, {Context: 32768, Concurrency: 0}, {Context: 65536, Concurrency: 0}}
	return r
}

// beyondDoc is syntheticBeyond through its JSON form, as a report reads it.
func beyondDoc(t *testing.T) *result.Result {
	t.Helper()
	var buf bytes.Buffer
	if err := syntheticBeyond().Write(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := result.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBeyondGolden(t *testing.T) {
	r := beyondDoc(t)
	for _, f := range []struct {
		format Format
		ext    string
	}{{"text", "txt"}, {"md", "md"}, {"csv", "csv"}} {
		var buf bytes.Buffer
		if err := Render(&buf, r, f.format); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "run-beyond."+f.ext, buf.Bytes())
	}
}

// TestBeyondInEveryFormat: the SLOs are named, each cell's attainment,
// TTFT parts and share of the limit are shown, "—" where the engine said
// nothing of a cell's TTFT, and the text still fits a terminal.
// TestBeyondSchema holds a document with every figure of METHOD §6–§8 to
// result/schema.json, as the seeds' columns are.
func TestBeyondSchema(t *testing.T) {
	if err := schematest.Result(syntheticBeyond()); err != nil {
		t.Fatal(err)
	}
}

func TestBeyondInEveryFormat(t *testing.T) {
	r := beyondDoc(t)
	render := func(format Format) string {
		var buf bytes.Buffer
		if err := Render(&buf, r, format); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	c := r.Cell(16384, 2)
	for _, format := range []Format{"text", "md", "html"} {
		page := strings.Join(strings.Fields(render(format)), " ") // lines wrapped at spaces
		for _, want := range []string{
			"TTFT ≤ 500 ms, time between tokens ≤ 50 ms",
			attainment(c.SLO),
			fmtShare(c.DecodeLimit.ShareOfBandwidthLimit),
			"Most missed: time between tokens",
			"16K: 2 · 32K: none",
			"vllm:request_queue_time_seconds",
			"timings.prompt_ms of each response",
			"The engine reports no TTFT of its own",
			"4.90 GB",
			"131,072 bytes",
		} {
			if !strings.Contains(page, want) && !strings.Contains(page, h(want)) {
				t.Errorf("%s report lacks %q", format, want)
			}
		}
	}
	text := render("text")
	for i, l := range strings.Split(text, "\n") {
		if runeLen(l) > textWidth {
			t.Errorf("text line %d is %d columns: %q", i+1, runeLen(l), l)
		}
	}
	// The cell the engine said nothing of: its TTFT, then "—" for every part.
	if !regexp.MustCompile(`(?m)^32K\s+1\s+[\d.]+ ms\s+—\s+—\s+—\s+—\s+—$`).MatchString(text) {
		t.Error("the TTFT split row of a cell without figures is not all —")
	}
	csv := render("csv")
	head := strings.SplitN(csv, "\n", 2)[0]
	for _, col := range []string{"slo_attainment", "goodput_req_s", "engine_queue_ms", "engine_validation_ms", "ttft_split_over", "slo_undecided", "outside_engine_ms", "share_of_bandwidth_limit"} {
		if !strings.Contains(head, col) {
			t.Errorf("CSV head lacks %s", col)
		}
	}
	// A run without them renders as before: no section, no column.
	plain := syntheticRun()
	var buf bytes.Buffer
	_ = Render(&buf, plain, "text")
	if s := buf.String(); strings.Contains(s, "SLO") || strings.Contains(s, "bandwidth limit") || strings.Contains(s, "Where TTFT goes") {
		t.Error("a run without SLOs, split or limit shows their sections")
	}
}

// TestBeyondHTML: the goodput chart has a line per context and the target,
// the stacked bars a row per split cell, the grid each cell's share of the
// limit; still nothing is loaded from anywhere.
func TestBeyondHTML(t *testing.T) {
	r := beyondDoc(t)
	page := renderHTML(t, r)
	contexts, _ := axes(r)
	if got := strings.Count(page, "<polyline"); got < 2 || got > len(contexts) {
		t.Errorf("%d attainment lines, want one per context with two or more points", got)
	}
	if !strings.Contains(page, `stroke-dasharray="5 4"`) || !strings.Contains(page, "target 90%") {
		t.Error("no target line")
	}
	splits, limits := 0, 0
	for _, c := range r.Decode {
		if c.TTFTSplit != nil && c.Status.ShowsFigures() {
			splits++
		}
		if c.DecodeLimit != nil && c.Status.ShowsFigures() {
			limits++
		}
	}
	if got := strings.Count(page, `aria-label="TTFT parts of`); got != splits {
		t.Errorf("%d stacked bars, want %d", got, splits)
	}
	if got := strings.Count(page, `<span class="bw">`); got != limits {
		t.Errorf("%d grid cells say their share of the limit, want %d", got, limits)
	}
	for _, want := range []string{"<th>" + sloColumn + "</th>", "<th>" + limitColumn + "</th>", "SLO goodput", "Where TTFT goes", "Decode vs the GPU's bandwidth limit"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)<script|<link|<img|\s(src|href)\s*=`).MatchString(page) {
		t.Error("the page loads something")
	}
}

// TestBeyondScreenshot opens the page in headless chromium, as
// TestHTMLScreenshot does, and checks the new charts rendered: the
// attainment lines, the target, and the queue and engine parts of the
// stacked bars each cover pixels.
func TestBeyondScreenshot(t *testing.T) {
	img, shot, _ := screenshot(t, renderHTML(t, beyondDoc(t)), 3600)
	for _, c := range []struct {
		what, colour string
		least        int
	}{
		{"the 0 context's attainment line", lineColours[0], 400},
		{"the 16K context's attainment line", lineColours[1], 400},
		{"the target line", colTarget, 150},
		{"queue parts", colQueue, 200},
		{"the rest of the engine's TTFT", colEngine, 200},
		{"outside the engine", colOutside, 200},
	} {
		if n := countColour(img, c.colour); n < c.least {
			t.Errorf("%s (%s) covers %d pixels, want at least %d", c.what, c.colour, n, c.least)
		}
	}
	if keep := os.Getenv("TOKENTAP_KEEP_SCREENSHOT"); keep != "" {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(strings.TrimSuffix(keep, ".png")+"-beyond.png", b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestSLOCapacityAllMet: where the most requests at once meeting the SLOs
// is the highest level measured, the report says the limit is that or
// higher, not that it is the limit; below it, nothing is added.
func TestSLOCapacityAllMet(t *testing.T) {
	for _, top := range []bool{false, true} {
		r := syntheticBeyond()
		most := 0
		for _, c := range r.Decode {
			if c.Context == 0 && c.Measured && c.Rate == 0 {
				most = max(most, c.Concurrency)
			}
		}
		if top {
			r.SLO.Capacity[0].Concurrency = most
		} else {
			r.SLO.Capacity[0].Concurrency = most / 2
		}
		var buf bytes.Buffer
		if err := Render(&buf, r, "text"); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(buf.String()), " ")
		says := strings.Contains(out, fmt.Sprintf("0: %d (the highest measured)", most)) &&
			strings.Contains(out, "every level measured met the objectives: the engine's limit is that or higher")
		if says != top || (!top && strings.Contains(out, "(the highest measured)")) {
			t.Errorf("capacity at the highest measured %v: the report says so %v", top, says)
		}
	}
}
