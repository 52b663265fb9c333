package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// kv is one labelled value of a metadata section.
type kv struct{ Key, Value string }

// section is a titled list of labelled values (Hardware, Engine, Run).
type section struct {
	Title string
	Rows  []kv
}

// prefillItem is one line of the Prefill list.
type prefillItem struct {
	Context string // "8K"
	Status  result.Status
	TokS    string // "9,918": the repeats' median
	TTFT    string // "828 ms"
	Spread  string // "9,801–10,020": the measured repeats' lowest and highest tok/s; "" for one
	N       string // "3 of 3": repeats measured of those asked
}

// gridCell is one cell of the decode grid.
type gridCell struct {
	Context int
	Row     string // the row in a sentence: "16K context", "the dataset"
	Col     result.Column
	Status  result.Status
	TokS    string  // headline tok/s, empty when the status hides figures
	TTFT    string  // "44 ms", empty when hidden
	Value   float64 // total tok/s, for the heat map
	Cell    *result.Cell
}

// ttftKind is what the cell's TTFT holds (result.TTFTWarm …).
func (g gridCell) ttftKind() string {
	if g.Cell == nil {
		return result.TTFTWarm
	}
	return g.Cell.TTFTOf()
}

// ttftLabel names a decode cell's TTFT for what it is: warm prompts make
// it no cold TTFT, and it must not be read as one (vllm bench serve and
// GuideLLM include prefill).
func ttftLabel(kind string) string {
	switch kind {
	case result.TTFTCacheMissed:
		return "TTFT, cache missed"
	case result.TTFTCold:
		return "TTFT, cold"
	}
	return "TTFT, warm prefix"
}

// colHead heads a grid column: "4" or "2/s".
func colHead(c result.Column) string { return c.Label() }

// atOnce says where a cell sits, for titles: "4 at once", "2 requests/s".
func atOnce(c result.Column) string {
	if c.Rate > 0 {
		return strconv.FormatFloat(c.Rate, 'f', -1, 64) + " requests/s"
	}
	return strconv.Itoa(c.N) + " at once"
}

// shows reports whether the grid prints figures for the cell (Valid,
// Requests queued and Cache missed do; Over capacity, Failed and Not run do
// not).
func (g gridCell) shows() bool {
	if g.Cell != nil {
		return g.Cell.ShowsFigures()
	}
	return g.Status.ShowsFigures()
}

// mark is what a grid cell that shows figures says besides them: its
// status where that qualifies the figures, long and short ("Requests
// queued", "queued"); empty for Valid.
func mark(s result.Status) (long, short string) {
	switch s {
	case result.RequestsQueued:
		return "Requests queued", "queued"
	case result.CacheMissed:
		return "Cache missed", "cache missed"
	case result.LateWindow:
		return "Late window", "late"
	}
	return "", ""
}

// gridRow is one context row of the decode grid.
type gridRow struct {
	Context int
	Label   string
	Cells   []gridCell
}

// allColumns heads the All measurements table, as on the seeds, but for
// the TTFT column's name: decode rows' TTFT is after a warm prefix.
var allColumns = []string{"Phase", "Context", "Requests at once", "Status", "Total tok/s", "Per request tok/s",
	allTTFT, "Time between tokens", "Average active requests", "Completed requests", "Output tokens", "Measured for"}

// allTTFT heads the All measurements TTFT column: prefill rows hold a cold
// TTFT, decode rows one after a warm prefix (a Cache missed row's status
// says it was not).
const allTTFT = "TTFT (decode: warm prefix)"

// allCold says whether every measured decode cell's TTFT is cold, and
// one is measured.
func allCold(cells []result.Cell) bool {
	n := 0
	for i := range cells {
		if !cells[i].ShowsFigures() {
			continue
		}
		if cells[i].TTFTOf() != result.TTFTCold {
			return false
		}
		n++
	}
	return n > 0
}

// rateColumns are the All measurements columns an arrival-rate run adds:
// the rate reached and the concurrency it made.
var rateColumns = []string{"Achieved rate", "Peak in flight"}

// cacheColumn is the All measurements column added when the engine said
// how much of the prompts its prefix cache served (seed documents have no
// such figures, so their pages render as they are).
const cacheColumn = "Prefix cache hits"

// cacheNotJudged is the cache column of a decode cell below
// cell.CacheCheckFrom, where the cache is not judged; the CSV and JSON
// keep the share measured.
const cacheNotJudged = "not judged"

// view is everything a report shows, as display strings, in seed order.
// Every format but JSON renders from it, so they cannot disagree.
type view struct {
	Title      string
	EngineLine string
	ByLine     string
	Sections   []section // Hardware, Engine, Run
	Launch     string
	Notes      []string
	Prefill    []prefillItem
	// Repeats: a prefill row asked for more than one cold request, so the
	// Prefill list shows each row's spread and count (METHOD §3).
	Repeats bool
	Cols    []result.Column
	Rate    bool // the columns are request rates
	Mixed   bool // a sweep's: concurrency levels (its one-at-a-time and throughput cells) and request rates
	// Cold: every measured decode cell's TTFT is cold (a dataset's prompts,
	// sent as given: nothing warmed them), so no label may say warm.
	Cold      bool
	Dataset   bool   // the prompts are a dataset's (--dataset): one row, no context of tokentap's
	Arrivals  string // how rate cells' requests arrived (arrivals)
	Grid      []gridRow
	Footnotes []string // for statuses present in the grid and rows
	Failures  []string // why each failed prefill row or cell failed, where the document says
	Columns   []string // the All measurements heads: allColumns, plus cacheColumn where a cell has cache figures
	All       [][]string
	TTFTNote  string
	Probes    []result.Fact
	// Beyond is what METHOD §6–§8 add (SLOs, TTFT split, bandwidth
	// limit), LimitMarks each grid cell's share of the limit; figures.go.
	Beyond     *beyondView
	LimitMarks map[cellKey]string

	// Percentiles are the percentiles shown (in percent) and PctRows the
	// Latency percentiles table, per cell that has histograms.
	Percentiles []float64
	PctRows     []pctRow
	// Explain are notes under the percentiles that say why figures that
	// look wrong are right (per request above total, none completed).
	Explain []string
	// Sweeps are a sweep's rows: curves, knees, SLO rate (sweep.go).
	Sweeps []sweepView
}

// pctRow is one measure of one cell in the Latency percentiles table.
type pctRow struct {
	Context, Col, Measure string
	First                 bool     // the cell's first row
	N                     string   // samples
	Values                []string // per percentile, "*" marking too few samples
}

func newView(r *result.Result) *view { return newViewWith(r, Options{}) }

func newViewWith(r *result.Result, o Options) *view {
	v := &view{
		Title:      title(r),
		EngineLine: engineLine(r),
		ByLine:     byLine(r),
		Launch:     strings.TrimRight(r.Engine.LaunchCommand, "\n"),
		Probes:     r.Probes,
	}
	h := r.Hardware
	v.Sections = append(v.Sections, section{"Hardware", nonEmpty(
		kv{"Type", h.Type}, kv{"GPU", h.GPU}, kv{"VRAM", h.VRAM}, kv{"CPU", h.CPU},
		kv{"RAM", h.RAM}, kv{"OS", h.OS}, kv{"Driver", h.Driver}, kv{"Source", hardwareSource(h.Source)})})
	e := r.Engine
	v.Sections = append(v.Sections, section{"Engine", nonEmpty(
		kv{"Engine", e.Name}, kv{"Version", e.Version}, kv{"Quantization", e.Quantization},
		kv{"Backend", e.Backend}, kv{"Build", e.Build}, kv{"URL", e.URL})})
	s := r.Settings
	run := []kv{{"Served model", r.Model.Served}, {"Revision", r.Model.Revision},
		{"Decode test", s.DecodeTest}, {"Prefill mode", s.PrefillMode}}
	if s.WindowSeconds > 0 {
		run = append(run, kv{"Time per measurement", fmtWindow(s.WindowSeconds)})
	}
	if s.MaxOutput > 0 {
		if s.Dataset != nil {
			// A line's own max_tokens (or output_tokens) is sent as given; a
			// ShareGPT entry's is its reply's length, so none is left.
			if s.Dataset.Format != "sharegpt" {
				run = append(run, kv{"Max output", fmtInt(s.MaxOutput) + " tokens, for lines without their own max_tokens"})
			}
		} else {
			run = append(run, kv{"Max output", fmtInt(s.MaxOutput) + " tokens"})
		}
	}
	run = append(run, kv{"API", s.API}, kv{"Scenario", s.Scenario})
	if s.KVCapacity > 0 {
		run = append(run, kv{"KV cache capacity", fmtInt(s.KVCapacity) + " tokens"})
	}
	if s.MaxModelLen > 0 {
		run = append(run, kv{"Max model length", fmtInt(s.MaxModelLen) + " tokens"})
	}
	if len(s.Dropped) > 0 {
		run = append(run, kv{"Contexts dropped", ctxList(s.Dropped) + " (context + max output > max model length)"})
	}
	if !r.Started.IsZero() {
		run = append(run, kv{"Started", r.Started.UTC().Format("2006-01-02 15:04:05 UTC")})
		if !r.Ended.IsZero() && r.Ended.After(r.Started) {
			run = append(run, kv{"Duration", r.Ended.Sub(r.Started).Round(1e9).String()})
		}
	}
	if len(s.Extra) > 0 {
		run = append(run, kv{"Extra", strings.Join(s.Extra, ", ")})
	}
	// What shaped every request beyond its length: a comparison names a
	// difference in any of them.
	if s.SharedPrefix > 0 {
		run = append(run, kv{"Shared prefix", fmtInt(s.SharedPrefix) + " tokens of every prompt of a row (rows of contexts up to it share nothing)"})
	}
	if len(s.Sampling) > 0 {
		run = append(run, kv{"Sampling", fieldList(s.Sampling, " ")})
	}
	if len(s.RequestFields) > 0 {
		run = append(run, kv{"Request fields", fieldList(s.RequestFields, ": ")})
	}
	// How requests were judged and shown: two runs that differ here differ
	// in their figures' meaning.
	if r.SLO != nil {
		run = append(run, kv{"SLOs", slo.FromResult(r.SLO.Spec).Describe()})
	}
	if s.FinishRequests {
		run = append(run, kv{"Finish requests", "each window's requests ran to their end (--finish-requests)"})
	}
	if len(s.Percentiles) > 0 {
		var ps []string
		for _, p := range s.Percentiles {
			ps = append(ps, "p"+strconv.FormatFloat(p, 'f', -1, 64))
		}
		run = append(run, kv{"Percentiles", strings.Join(ps, ", ")})
	}
	run = append(run, workloadRows(s)...)
	v.Sections = append(v.Sections, section{"Run", nonEmpty(run...)})

	v.Notes = append(v.Notes, r.Notes...)
	switch {
	case r.Interrupted && !saysStopped(r.Notes):
		v.Notes = append(v.Notes, "The run was interrupted: cells marked Not run were never measured.")
	case r.StoppedEarly != "":
		v.Notes = append(v.Notes, "The run stopped early ("+r.StoppedEarly+"): cells marked Not run were never measured.")
	}

	hasCache := false
	for _, c := range r.Decode {
		hasCache = hasCache || c.Cache != nil || c.Status == result.CacheMissed
	}
	v.Rate, v.Mixed = r.RateRun(), mixedColumns(r)
	v.Arrivals = arrivals(r.Settings)
	v.Columns = slices.Clone(allColumns)
	v.TTFTNote = ttftNote
	if v.Rate {
		v.Columns[2], v.Columns[6] = "Request rate", "TTFT"
		v.Columns = append(v.Columns, rateColumns...)
		v.TTFTNote = rateTTFTNote
	} else if v.Cold = allCold(r.Decode); v.Cold {
		v.Columns[6] = "TTFT (cold)"
		v.TTFTNote = coldTTFTNote
	}
	if hasCache {
		v.Columns = append(v.Columns, cacheColumn)
		if v.Rate {
			v.TTFTNote += " " + rateCacheNote
		} else {
			v.TTFTNote += " " + cacheNote
		}
	}
	withSLO, withLimit, withDefs := hasSLO(r), hasLimit(r), hasTBTDefs(r)
	if withSLO {
		v.Columns = append(slices.Clone(v.Columns), sloColumn)
	}
	if withLimit {
		v.Columns = append(slices.Clone(v.Columns), limitColumn)
	}
	extra := 0 // the SLO, limit and peers' columns, dashes on prefill rows
	if withSLO {
		extra++
	}
	if withLimit {
		extra++
	}
	if withDefs {
		v.Columns = append(slices.Clone(v.Columns), itlChunkHead, tpotRequestHead)
		v.Columns[7] = tbtPerTokenHead
		v.TTFTNote += " " + tbtDefsNote
		extra += 2
	}
	v.Beyond = newBeyondView(r)
	v.LimitMarks = map[cellKey]string{}
	present := map[result.Status]bool{}
	v.Repeats = hasRepeats(r)
	for _, p := range r.Prefill {
		it := prefillItem{Context: ctxLabel(p.Context), Status: p.Status,
			N: fmt.Sprintf("%d of %d", p.RepeatsMeasured(), p.RepeatsAsked())}
		if p.Status.ShowsFigures() {
			it.TokS, it.TTFT = fmtHeadline(p.TokPerSec), fmtMs(p.TTFTms)
			if p.RepeatsMeasured() > 1 {
				it.Spread = fmtHeadline(prefillMin(p)) + "–" + fmtHeadline(prefillMax(p))
			}
		}
		v.Prefill = append(v.Prefill, it)
		row := prefillColumns(p, v.Rate, hasCache)
		for range extra {
			row = append(row, dash)
		}
		v.All = append(v.All, row)
		present[p.Status] = true
		switch {
		case p.Status == result.Failed && p.Error != "":
			v.Failures = append(v.Failures, fmt.Sprintf("Prefill at %s: %s", ctxLabel(p.Context), p.Error))
		case p.Error != "":
			// Repeats that gave no figure, beside those that did.
			v.Failures = append(v.Failures, fmt.Sprintf("Prefill at %s: %s; its figure is the median of the other %d", ctxLabel(p.Context), p.Error, p.RepeatsMeasured()))
		}
	}

	contexts, cols := axes(r)
	v.Cols = cols
	v.Dataset = r.Settings.Dataset != nil
	for _, c := range contexts {
		row := gridRow{Context: c, Label: ctxLabel(c)}
		if v.Dataset {
			// A dataset's prompts are its own lengths: its one row has no
			// context of tokentap's.
			row.Label = "dataset"
		}
		for _, col := range cols {
			g := gridCell{Context: c, Row: ctxLabel(c) + " context", Col: col, Status: result.NotRun}
			if v.Dataset {
				g.Row = "the dataset"
			}
			if cell := r.CellAt(c, col); cell != nil {
				g.Cell, g.Status = cell, cell.Status
				if g.shows() {
					g.TokS, g.TTFT, g.Value = fmtHeadline(cell.TotalTokPerSec), fmtTTFT(cell.TTFTms, cell.TTFTAtLeast), cell.TotalTokPerSec
				}
				row := append(cellColumns(cell, v.Rate, hasCache), beyondColumns(cell, withSLO, withLimit)...)
				if v.Dataset {
					row[1] = "dataset" // the Context column: a dataset's prompts have their own lengths
				}
				if withDefs {
					row = append(row, tbtDefsColumns(cell)...)
				}
				v.All = append(v.All, row)
				if m := limitMark(cell); m != "" {
					v.LimitMarks[cellKey{c, col}] = m
				}
				if (cell.Status == result.Failed || cell.Status == result.CacheMissed || !cell.ShowsFigures() && cell.Status.ShowsFigures()) && cell.Reason != "" {
					v.Failures = append(v.Failures, fmt.Sprintf("%s context, %s: %s", ctxLabel(c), atOnce(col), cell.Reason))
				}
			}
			present[g.Status] = true
			row.Cells = append(row.Cells, g)
		}
		v.Grid = append(v.Grid, row)
	}
	for _, st := range footnoteOrder {
		if present[st] {
			v.Footnotes = append(v.Footnotes, statusNote(st, v.Rate))
		}
	}
	v.percentiles(r, o)
	v.Sweeps = sweepViews(r)
	return v
}

// percentiles lays out the Latency percentiles table: for every cell that
// shows figures and kept histograms, TTFT, time between tokens and
// end-to-end at the chosen percentiles, with sample counts, and a mark
// where the samples are too few for a percentile (result.LowCount).
func (v *view) percentiles(r *result.Result, o Options) {
	v.Percentiles = o.Percentiles
	if len(v.Percentiles) == 0 {
		v.Percentiles = r.Settings.Percentiles
	}
	if len(v.Percentiles) == 0 {
		v.Percentiles = result.DefaultPercentiles
	}
	perReqAbove, anyShown, anyDone, anyCensored := false, false, false, false
	maxOut := r.Settings.MaxOutput
	for _, row := range v.Grid {
		for _, g := range row.Cells {
			if g.Cell == nil || !g.shows() {
				continue
			}
			c := g.Cell
			anyShown = true
			anyDone = anyDone || c.Completed > 0 || (c.Histograms != nil && c.Histograms.E2E.TotalCount() > 0)
			perReqAbove = perReqAbove || c.PerRequestTokPerSec > c.TotalTokPerSec
			if c.Histograms == nil {
				continue
			}
			p := result.PercentilesOf(c.Histograms, v.Percentiles)
			first := true
			for _, m := range []struct {
				name string
				d    *result.Dist
				tbt  bool
			}{{ttftLabel(c.TTFTOf()), pctDist(p, "ttft"), false}, {"Time between tokens", pctDist(p, "tbt"), true}, {"End to end", pctDist(p, "e2e"), false}} {
				pr := pctRow{Measure: m.name, First: first, N: "0"}
				if first {
					pr.Context, pr.Col = row.Label, colHead(g.Col)
				}
				first = false
				for _, q := range v.Percentiles {
					val, ok := m.d.Value(q)
					switch {
					case !ok:
						pr.Values = append(pr.Values, dash)
					case m.tbt:
						pr.Values = append(pr.Values, fmtTBT(val))
					default:
						pr.Values = append(pr.Values, fmtLatencyMs(val))
					}
					if ok && m.d.Low(q) {
						pr.Values[len(pr.Values)-1] += lowMark
					}
					if ok && m.d.Censored(q) {
						pr.Values[len(pr.Values)-1] = atLeastMark + pr.Values[len(pr.Values)-1]
					}
				}
				if m.d != nil {
					pr.N = fmtInt(int(m.d.N))
					if m.d.Sent > m.d.N {
						pr.N += " of " + fmtInt(int(m.d.Sent))
						anyCensored = true
					}
				}
				v.PctRows = append(v.PctRows, pr)
			}
		}
	}
	if perReqAbove {
		v.Explain = append(v.Explain, perRequestNote)
	}
	if anyCensored {
		v.Explain = append(v.Explain, atLeastNote)
	}
	if anyShown && !anyDone && len(v.PctRows) > 0 {
		note := "No request completed inside its window"
		if maxOut > 0 {
			note += fmt.Sprintf(" (Completed requests 0): %s output tokens take longer than the window at these speeds", fmtInt(maxOut))
		}
		v.Explain = append(v.Explain, note+". Requests still running when a window closes are cancelled, not failed: their tokens count in Output tokens and tok/s, and End to end has no samples. Give a smaller --max-output to time whole requests.")
	}
}

// pctDist picks one distribution of p.
func pctDist(p *result.Percentiles, which string) *result.Dist {
	if p == nil {
		return nil
	}
	switch which {
	case "ttft":
		return p.TTFTms
	case "tbt":
		return p.TBTms
	}
	return p.E2Ems
}

// lowMark follows a percentile read from too few samples.
const lowMark = "*"

// perRequestNote explains per request tok/s above total tok/s.
const perRequestNote = "Per request tok/s counts each request's decoding only, from its first token to its last; Total tok/s divides all output by the whole window, including each request's wait for its first token and, in a closed loop, the moment between one request's end and the next one's first token. So at 1 request at once (or wherever requests wait) per request tok/s can exceed total tok/s."

// saysStopped reports whether a note already says the run was interrupted
// or stopped (documents written before the result said so in fields).
func saysStopped(notes []string) bool {
	for _, n := range notes {
		if strings.HasPrefix(n, "The run was interrupted") || strings.HasPrefix(n, "The run stopped early") {
			return true
		}
	}
	return false
}

// axes returns the grid's contexts and columns (concurrency levels, or
// request rates): the run's settings plus any cell the document holds
// beyond them, ascending.
func axes(r *result.Result) (contexts []int, cols []result.Column) {
	contexts = slices.Clone(r.Settings.Contexts)
	// A sweep measures the first and last concurrency and rates of each
	// row's own: its columns are its cells', not every level set.
	if !r.Settings.Sweep {
		for _, n := range r.Settings.Concurrency {
			cols = append(cols, result.Column{N: n})
		}
		for _, rate := range r.Settings.Rates {
			cols = append(cols, result.Column{Rate: rate})
		}
	}
	for _, c := range r.Decode {
		if !slices.Contains(contexts, c.Context) {
			contexts = append(contexts, c.Context)
		}
		if !slices.Contains(cols, c.Column()) {
			cols = append(cols, c.Column())
		}
	}
	slices.Sort(contexts)
	slices.SortFunc(cols, func(a, b result.Column) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	return slices.Compact(contexts), slices.Compact(cols)
}

func prefillColumns(p result.Prefill, rate, cache bool) []string {
	cols := []string{"Prefill", ctxLabel(p.Context), "1", p.Status.Label(), fmtRate(p.TokPerSec), dash,
		fmtMs(p.TTFTms), dash, dash, strconv.Itoa(p.Requests), dash, dash}
	if rate {
		cols[2] = dash
		cols = append(cols, dash, dash)
	}
	if cache {
		cols = append(cols, dash)
	}
	return cols
}

// cellColumns are a decode cell's All measurements columns. Figures print
// when the cell's status shows them (METHOD §3: Over capacity and Failed
// cells show none, as the grid does, whatever a Failed cell measured
// before it failed); the request counts print for every cell that ran (an
// Over capacity cell that was never sent shows none).
func cellColumns(c *result.Cell, rate, withCache bool) []string {
	ran := c.Measured || (c.Status != result.OverCapacity && c.Status != result.NotRun)
	completed, output := dash, dash
	if ran {
		completed, output = fmtInt(c.Completed), fmtInt(c.OutputTokens)
	}
	var f result.Cell // the figures shown: none unless the status shows them
	if c.ShowsFigures() {
		f = *c
	}
	// A Failed cell shows no window either: a cell stopped at its first
	// failure was measured for milliseconds (seed 000's Failed row shows
	// "—"). A cell the engine refused ran its window (seed 002's 248K × 1
	// shows its average active requests and 30.0 s).
	active, window := c.AvgActive, c.MeasuredForSeconds
	if c.Status == result.Failed {
		active, window = 0, 0
	}
	cols := []string{"Sustained decode", ctxLabel(c.Context), colHead(c.Column()), c.Status.Label(),
		fmtRate(f.TotalTokPerSec), fmtRate(f.PerRequestTokPerSec), fmtTTFT(f.TTFTms, f.TTFTAtLeast), fmtTBT(f.TBTms),
		fmtActive(active), completed, output, fmtSeconds(window)}
	if rate {
		peak := dash
		if f.PeakInFlight > 0 {
			peak = fmtInt(f.PeakInFlight)
		}
		achieved := dash
		if f.AchievedRate > 0 {
			achieved = fmtFixed(f.AchievedRate, 2) + "/s"
		}
		cols = append(cols, achieved, peak)
	}
	if withCache {
		cache := dash
		switch {
		case c.Cache == nil || !c.ShowsFigures():
		case c.Context < cell.CacheCheckFrom && !rate:
			// METHOD §3: below 1K a prompt is a few cache blocks and
			// engines cache whole blocks only, so the cache is not judged
			// there: a share read off a few tokens (0% or 91% of an
			// 11-token prompt) would pass for a verdict.
			cache = cacheNotJudged
		default:
			cache = fmtPct(c.Cache.HitRate)
		}
		cols = append(cols, cache)
	}
	return cols
}

// hardwareSource says where the Hardware figures came from.
func hardwareSource(s string) string {
	switch s {
	case "detected":
		return "detected where tokentap ran"
	case "given":
		return "given by flags or environment"
	case "detected+given":
		return "detected where tokentap ran, with given values"
	}
	return s
}

func nonEmpty(in ...kv) []kv {
	var out []kv
	for _, x := range in {
		if strings.TrimSpace(x.Value) != "" {
			out = append(out, x)
		}
	}
	return out
}

// plainSize is a single memory size such as "12 GB", the only VRAM the
// title appends to the GPU name.
var plainSize = regexp.MustCompile(`^\d+(\.\d+)? ?[GT]B$`)

// title is "<model> on <GPU>" as the seeds write it ("RTX 3060 12GB").
func title(r *result.Result) string {
	model := r.Model.Name
	if model == "" {
		model = r.Model.Served
	}
	if model == "" {
		model = "Unknown model"
	}
	on := hardwareName(r)
	if on == "" {
		return model
	}
	return model + " on " + on
}

// hardwareName is what the run ran on as a title names it: the GPU with
// its VRAM ("RTX 3060 12GB"), else the CPU without its core count.
func hardwareName(r *result.Result) string {
	h := r.Hardware
	on := h.GPU
	if on != "" && plainSize.MatchString(h.VRAM) && !strings.Contains(on, "×") {
		on += " " + strings.ReplaceAll(h.VRAM, " ", "")
	}
	if on == "" {
		on = h.CPU
		if i := strings.LastIndex(on, " ("); i > 0 {
			on = on[:i]
		}
	}
	return on
}

func ctxList(cs []int) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, ctxLabel(c))
	}
	return strings.Join(parts, ", ")
}

// byLine is "by @who · tool vX · Measured".
func byLine(r *result.Result) string {
	var parts []string
	if r.Settings.By != "" {
		parts = append(parts, "by "+r.Settings.By)
	}
	name := r.Tool.Name
	if name == "" {
		name = "tokentap"
	}
	ver := r.Tool.Version
	if ver != "" && ver[0] >= '0' && ver[0] <= '9' {
		ver = "v" + ver
	}
	parts = append(parts, strings.TrimSpace(name+" "+ver))
	if r.Engine.Name == "tokentap-fake" {
		parts = append(parts, "Measured against the built-in fake engine")
	} else {
		parts = append(parts, "Measured")
	}
	return strings.Join(parts, " · ")
}

// cellKey names a grid cell: its context and its column.
type cellKey struct {
	Context int
	Col     result.Column
}

// fieldList writes request fields in name order: "seed 42, temperature
// 0.7", or with sep ": " and JSON values, `chat_template_kwargs:
// {"enable_thinking":false}`.
func fieldList(m map[string]any, sep string) string {
	var l []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b, err := json.Marshal(m[k])
		v := string(b)
		if err != nil {
			v = fmt.Sprint(m[k])
		}
		l = append(l, k+sep+v)
	}
	return strings.Join(l, ", ")
}

// hasRepeats reports whether a prefill row of r asked for more than one
// cold request: a run from before repeats, or with --prefill-repeats 1,
// shows its rows as before.
func hasRepeats(r *result.Result) bool {
	for _, p := range r.Prefill {
		if p.RepeatsAsked() > 1 {
			return true
		}
	}
	return false
}

// prefillMin and prefillMax are a row's measured repeats' lowest and
// highest tok/s; for a row of one (or from before repeats), its figure.
func prefillMin(p result.Prefill) float64 {
	if p.TokPerSecMin > 0 {
		return p.TokPerSecMin
	}
	return p.TokPerSec
}

func prefillMax(p result.Prefill) float64 {
	if p.TokPerSecMax > 0 {
		return p.TokPerSecMax
	}
	return p.TokPerSec
}

// rowsAre says what the decode grid's rows are: context lengths, or a
// dataset's prompts (one row, of the file's own lengths).
func (v *view) rowsAre() string {
	if v.Dataset {
		return "the row is the dataset's prompts"
	}
	return "rows are context length"
}
