package report

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/result"
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
	TokS    string // "9,918"
	TTFT    string // "828 ms"
}

// gridCell is one cell of the decode grid.
type gridCell struct {
	Context, N int
	Status     result.Status
	TokS       string  // headline tok/s, empty when the status hides figures
	TTFT       string  // "44 ms", empty when hidden
	Value      float64 // total tok/s, for the heat map
	Cell       *result.Cell
}

// shows reports whether the grid prints figures for the cell (Valid,
// Requests queued and Cache missed do; Over capacity, Failed and Not run do
// not).
func (g gridCell) shows() bool { return g.Status.ShowsFigures() }

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

// allColumns heads the All measurements table, as on the seeds.
var allColumns = []string{"Phase", "Context", "Requests at once", "Status", "Total tok/s", "Per request tok/s",
	"TTFT", "Time between tokens", "Average active requests", "Completed requests", "Output tokens", "Measured for"}

// cacheColumn is the All measurements column added when the engine said
// how much of the prompts its prefix cache served (seed documents have no
// such figures, so their pages render as they are).
const cacheColumn = "Prefix cache hits"

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
	Conc       []int
	Grid       []gridRow
	Footnotes  []string // for statuses present in the grid and rows
	Failures   []string // why each failed prefill row or cell failed, where the document says
	Columns    []string // the All measurements heads: allColumns, plus cacheColumn where a cell has cache figures
	All        [][]string
	TTFTNote   string
	Probes     []result.Fact
}

func newView(r *result.Result) *view {
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
		run = append(run, kv{"Max output", fmtInt(s.MaxOutput) + " tokens"})
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
	v.Sections = append(v.Sections, section{"Run", nonEmpty(run...)})

	v.Notes = append(v.Notes, r.Notes...)
	if r.Interrupted {
		v.Notes = append(v.Notes, "The run was interrupted: cells marked Not run were never measured.")
	}

	hasCache := false
	for _, c := range r.Decode {
		hasCache = hasCache || c.Cache != nil || c.Status == result.CacheMissed
	}
	v.Columns = allColumns
	v.TTFTNote = ttftNote
	if hasCache {
		v.Columns = append(slices.Clone(allColumns), cacheColumn)
		v.TTFTNote = ttftNote + " " + cacheNote
	}
	present := map[result.Status]bool{}
	for _, p := range r.Prefill {
		it := prefillItem{Context: ctxLabel(p.Context), Status: p.Status}
		if p.Status.ShowsFigures() {
			it.TokS, it.TTFT = fmtHeadline(p.TokPerSec), fmtMs(p.TTFTms)
		}
		v.Prefill = append(v.Prefill, it)
		v.All = append(v.All, prefillColumns(p, hasCache))
		present[p.Status] = true
		if p.Status == result.Failed && p.Error != "" {
			v.Failures = append(v.Failures, fmt.Sprintf("Prefill at %s: %s", ctxLabel(p.Context), p.Error))
		}
	}

	contexts, conc := axes(r)
	v.Conc = conc
	for _, c := range contexts {
		row := gridRow{Context: c, Label: ctxLabel(c)}
		for _, n := range conc {
			g := gridCell{Context: c, N: n, Status: result.NotRun}
			if cell := r.Cell(c, n); cell != nil {
				g.Cell, g.Status = cell, cell.Status
				if g.shows() {
					g.TokS, g.TTFT, g.Value = fmtHeadline(cell.TotalTokPerSec), fmtMs(cell.TTFTms), cell.TotalTokPerSec
				}
				v.All = append(v.All, cellColumns(cell, hasCache))
				if (cell.Status == result.Failed || cell.Status == result.CacheMissed) && cell.Reason != "" {
					v.Failures = append(v.Failures, fmt.Sprintf("%s context, %d at once: %s", ctxLabel(c), n, cell.Reason))
				}
			}
			present[g.Status] = true
			row.Cells = append(row.Cells, g)
		}
		v.Grid = append(v.Grid, row)
	}
	for _, st := range footnoteOrder {
		if present[st] {
			v.Footnotes = append(v.Footnotes, statusNote(st))
		}
	}
	return v
}

// axes returns the grid's contexts and concurrency levels: the run's
// settings plus any cell the document holds beyond them, ascending.
func axes(r *result.Result) (contexts, conc []int) {
	contexts = slices.Clone(r.Settings.Contexts)
	conc = slices.Clone(r.Settings.Concurrency)
	for _, c := range r.Decode {
		if !slices.Contains(contexts, c.Context) {
			contexts = append(contexts, c.Context)
		}
		if !slices.Contains(conc, c.Concurrency) {
			conc = append(conc, c.Concurrency)
		}
	}
	slices.Sort(contexts)
	slices.Sort(conc)
	return slices.Compact(contexts), slices.Compact(conc)
}

func prefillColumns(p result.Prefill, cache bool) []string {
	cols := []string{"Prefill", ctxLabel(p.Context), "1", p.Status.Label(), fmtRate(p.TokPerSec), dash,
		fmtMs(p.TTFTms), dash, dash, strconv.Itoa(p.Requests), dash, dash}
	if cache {
		cols = append(cols, dash)
	}
	return cols
}

// cellColumns are a decode cell's All measurements columns. Figures print
// when the document has them; the request counts print for every cell
// that ran (an Over capacity cell that was never sent shows none).
func cellColumns(c *result.Cell, withCache bool) []string {
	ran := c.Measured || (c.Status != result.OverCapacity && c.Status != result.NotRun)
	completed, output := dash, dash
	if ran {
		completed, output = fmtInt(c.Completed), fmtInt(c.OutputTokens)
	}
	// A Failed cell shows no figures (METHOD §3), its time measured included:
	// a cell stopped at its first failure was measured for a few
	// milliseconds, which is no window (seed 000's Failed row shows "—").
	measuredFor := fmtSeconds(c.MeasuredForSeconds)
	if c.Status == result.Failed {
		measuredFor = dash
	}
	cols := []string{"Sustained decode", ctxLabel(c.Context), strconv.Itoa(c.Concurrency), c.Status.Label(),
		fmtRate(c.TotalTokPerSec), fmtRate(c.PerRequestTokPerSec), fmtMs(c.TTFTms), fmtTBT(c.TBTms),
		fmtActive(c.AvgActive), completed, output, measuredFor}
	if withCache {
		cache := dash
		if c.Cache != nil && c.Status.ShowsFigures() {
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
	if on == "" {
		return model
	}
	return model + " on " + on
}

func ctxList(cs []int) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, ctxLabel(c))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// engineLine is "vllm · 0.32.0 · FP8 · 6 contexts (0–248K) × 8 concurrency
// levels (1–128) · prefill at 8K, 16K, 32K".
func engineLine(r *result.Result) string {
	var parts []string
	for _, s := range []string{r.Engine.Name, r.Engine.Version, r.Engine.Quantization} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	contexts, conc := axes(r)
	if len(contexts) > 0 && len(conc) > 0 {
		cr := ctxLabel(contexts[0])
		if len(contexts) > 1 {
			cr += "–" + ctxLabel(contexts[len(contexts)-1])
		}
		nr := strconv.Itoa(conc[0])
		if len(conc) > 1 {
			nr += "–" + strconv.Itoa(conc[len(conc)-1])
		}
		parts = append(parts, fmt.Sprintf("%s (%s) × %s (%s)",
			plural(len(contexts), "context", "contexts"), cr,
			plural(len(conc), "concurrency level", "concurrency levels"), nr))
	}
	if len(r.Settings.PrefillAt) > 0 {
		parts = append(parts, "prefill at "+ctxList(r.Settings.PrefillAt))
	}
	return strings.Join(parts, " · ")
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
