package report

import (
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// at names a point's cell: "16K × 4", "0 × 2/s".
func (p *paretoPoint) at() string {
	if p == nil {
		return dash
	}
	return ctxLabel(p.Context) + " × " + colHead(p.Col)
}

// title heads the board.
func (b *board) title() string {
	return "Leaderboard of " + english.Count(len(b.Runs), "run", "runs")
}

// sub says how the board is sorted and what it ranks.
func (b *board) sub() string {
	s := "Sorted by " + b.Sort.What
	if b.Sort.AtContext {
		if c, ok := b.sortContext(map[string][]int{"prefill": b.Prefill, "capacity": b.Capacity}[b.Sort.Name]); ok {
			s += ", at " + ctxLabel(c)
		}
	}
	s += " (--sort to change). Best decode is the Valid decode cell with the highest total tok/s; TTFT and TBT are that cell's medians. Cells: Valid/Over capacity/Requests queued/Failed."
	if !b.SLO.IsZero() {
		s += " Within SLO: the best decode among the cells that meet " + b.SLO.String() + " (" + b.SLO.Describe() + ")."
	}
	return s
}

// scoreHead and scoreRow are the leaderboard's figures.
func (b *board) scoreHead() []string {
	h := []string{"#", "Run", "Best tok/s", "At", "TTFT", "TBT"}
	if !b.SLO.IsZero() {
		h = append(h, "Within SLO", "At")
	}
	return append(h, "Cells")
}

func (b *board) scoreRow(r *boardRun) []string {
	rank := strconv.Itoa(r.Rank)
	if r.Rank == 0 {
		rank = "apart"
	}
	var tok, ttft, tbt string = dash, dash, dash
	if r.Best != nil {
		tok, ttft, tbt = fmtHeadline(r.Best.Total), fmtMs(r.Best.TTFTms), fmtTBT(r.Best.TBTms)
	}
	row := []string{rank, r.Label, tok, r.Best.at(), ttft, tbt}
	if !b.SLO.IsZero() {
		s := dash
		if r.BestSLO != nil {
			s = fmtHeadline(r.BestSLO.Total)
		}
		row = append(row, s, r.BestSLO.at())
	}
	c := r.Counts.String()
	if r.Counts.Other > 0 {
		c += fmt.Sprintf(" +%d other", r.Counts.Other)
	}
	return append(row, c)
}

// whatHead and whatRow are what each run ran.
var whatHead = []string{"Run", "Engine", "Model", "Quantization", "Hardware"}

func whatRow(r *boardRun) []string {
	return []string{r.Label, orDash(r.Engine), r.Model, orDash(r.Quant), orDash(r.Hardware)}
}

// prefillRow is a run's prompt tok/s at each of the board's prefill
// contexts: the status where it shows no figure.
func (b *board) prefillRow(r *boardRun) []string {
	row := []string{r.Label}
	for _, c := range b.Prefill {
		v := dash
		if p := findPrefill(r.R, c); p != nil {
			v = fmtHeadline(p.TokPerSec)
			if !p.Status.ShowsFigures() {
				v = p.Status.Label()
			}
		}
		row = append(row, v)
	}
	return row
}

func (b *board) capacityRow(r *boardRun) []string {
	row := []string{r.Label, orDash(r.sloText)}
	for _, c := range b.Capacity {
		row = append(row, orDash(r.capacityByCtx[c]))
	}
	return row
}

func ctxHeads(first []string, cs []int) []string {
	h := slices.Clone(first)
	for _, c := range cs {
		h = append(h, ctxLabel(c))
	}
	return h
}

// apartLines say why each run apart is not ranked.
func (b *board) apartLines() []string {
	var l []string
	for _, r := range b.Runs {
		if r.Rank == 0 {
			l = append(l, r.Label+": "+strings.Join(r.Apart, "; "))
		}
	}
	return l
}

// frontHead and frontRows list a context's frontier: each run's own
// frontier points, a star on those on the frontier of all runs.
var frontHead = []string{"Run", "At", "Per request tok/s", "Total tok/s", "TTFT", "TBT", "All runs"}

func (b *board) frontRows(f ctxFrontier) [][]string {
	var rows [][]string
	for _, r := range b.ranked() {
		var own []paretoPoint
		for _, p := range f.Points {
			if p.Run == r.Index && p.OwnFrontier {
				own = append(own, p)
			}
		}
		slices.SortFunc(own, func(x, y paretoPoint) int {
			if x.PerRequest != y.PerRequest {
				return cmpDesc(x.PerRequest, y.PerRequest)
			}
			return cmpDesc(y.Total, x.Total)
		})
		for _, p := range own {
			star := ""
			if p.OnFrontier {
				star = "★"
			}
			rows = append(rows, []string{r.Label, p.at(), fmtRate(p.PerRequest), fmtRate(p.Total), fmtMs(p.TTFTms), fmtTBT(p.TBTms), star})
		}
	}
	return rows
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// frontSummary counts a context's points: how many runs, how many cells
// each run's own frontier left dominated, and which runs are on the
// frontier of all.
func (b *board) frontSummary(f ctxFrontier) string {
	runs := map[int]bool{}
	dominated := map[int]int{}
	var lead []string
	for _, p := range f.Points {
		runs[p.Run] = true
		if !p.OwnFrontier {
			dominated[p.Run]++
		}
	}
	for _, r := range b.ranked() {
		for _, p := range f.Points {
			if p.Run == r.Index && p.OnFrontier {
				lead = append(lead, r.Label)
				break
			}
		}
	}
	s := fmt.Sprintf("%s of %s. On the frontier of all runs: %s.", english.Count(len(f.Points), "Valid cell", "Valid cells"),
		english.Count(len(runs), "run", "runs"), english.List(lead))
	var d []string
	for _, r := range b.ranked() {
		if n := dominated[r.Index]; n > 0 {
			d = append(d, fmt.Sprintf("%s %d", r.Label, n))
		}
	}
	if len(d) > 0 {
		s += " Cells a run's own frontier dominates (not listed): " + strings.Join(d, ", ") + "."
	}
	return s
}

// frontTitle heads a context's frontier.
func (b *board) frontTitle(f ctxFrontier) string {
	s := "Pareto frontier at context " + ctxLabel(f.Context) + " · per-request tok/s against total tok/s"
	if !b.SLO.IsZero() {
		s += " · cells meeting " + b.SLO.String()
	}
	return s
}

// frontNote explains the frontier once.
func (b *board) frontNote() string {
	s := "Each Valid decode cell is a point: per-request tok/s (how fast each request decodes) against total tok/s (all output of the engine). A cell is on a frontier when no other cell has at least as much of both and more of one; each run's own frontier is listed, ★ marks cells on the frontier of all runs. For a per-request speed you need, the run whose frontier lies higher there serves more in all."
	if !b.SLO.IsZero() {
		s += " Only cells that meet the SLO are points: judged on each request where the run measured the same objectives, else read off the cell's histograms at the target share (METHOD §12)."
	}
	return s
}

// leftOut says which cells of which runs are no points, and which files
// are no runs.
func (b *board) leftOut() []string {
	var l []string
	for _, r := range b.Runs {
		if len(r.LeftOut) > 0 {
			l = append(l, r.Label+": "+strings.Join(r.LeftOut, "; "))
		}
	}
	for _, s := range b.Skipped {
		l = append(l, s.File+": not read as a run: "+s.Why)
	}
	return l
}

// compareHint names the command that lines up the two leading runs cell by
// cell (METHOD §9), where there are two.
func (b *board) compareHint() (words, cmd string) {
	rk := b.ranked()
	if len(rk) < 2 {
		return "", ""
	}
	return "The two leading runs side by side, cell by cell with ratios and noise:",
		"tokentap report " + shellWord(rk[0].File) + " " + shellWord(rk[1].File)
}

// wideTable is the leaderboard with what ran in one table (Markdown,
// HTML): rank, run, what ran, then the figures.
func (b *board) wideTable() (head []string, rows [][]string) {
	sh := b.scoreHead()
	head = append(append(slices.Clone(sh[:2]), whatHead[1:]...), sh[2:]...)
	for _, r := range b.Runs {
		s := b.scoreRow(r)
		rows = append(rows, append(append(slices.Clone(s[:2]), whatRow(r)[1:]...), s[2:]...))
	}
	return head, rows
}

// shellWord quotes a file name for a command line where it needs it.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c == '-' || c == '_' || c == '.' || c == '/' || c == '@' || c == '+' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// differLines say, per setting that differs, each run's value.
func (b *board) differLines() []string {
	var l []string
	for _, k := range b.Differs {
		var parts []string
		for _, r := range b.Runs {
			parts = append(parts, r.Label+" "+orDash(r.Settings[k]))
		}
		l = append(l, k+": "+strings.Join(parts, " · "))
	}
	return l
}

func boardText(w io.Writer, b *board) error {
	e := &errWriter{w: w}
	e.print(b.title() + "\n")
	for _, l := range wrapWords(b.sub(), textWidth, "") {
		e.print(l + "\n")
	}
	e.print("\n")
	var rows, what [][]string
	for _, r := range b.Runs {
		rows = append(rows, b.scoreRow(r))
		row := whatRow(r)
		for i := 1; i < len(row); i++ {
			row[i] = clip(row[i], 26)
		}
		what = append(what, row)
	}
	head := b.scoreHead()
	right := make([]bool, len(head))
	for i := range right {
		right[i] = i >= 2
	}
	table(e, "", head, rows, right)
	e.print("\nWhat ran\n")
	table(e, "  ", whatHead, what, make([]bool, len(whatHead)))
	if l := b.apartLines(); len(l) > 0 {
		e.print("\nNot ranked with the others\n")
		for _, s := range l {
			for _, wl := range wrapWords(s, textWidth-2, "    ") {
				e.print("  " + wl + "\n")
			}
		}
	}
	e.print("\nWhat differs between the runs\n")
	if len(b.Differs) == 0 {
		e.print("  nothing but what ran: the same settings\n")
	}
	for _, s := range b.differLines() {
		for _, wl := range wrapWords(s, textWidth-2, "    ") {
			e.print("  " + wl + "\n")
		}
	}
	if len(b.Prefill) > 0 {
		e.print("\nPrefill · prompt tok/s by context\n")
		var rows [][]string
		for _, r := range b.Runs {
			rows = append(rows, b.prefillRow(r))
		}
		table(e, "  ", ctxHeads([]string{"Run"}, b.Prefill), rows, rightCols(ctxHeads([]string{"Run"}, b.Prefill), 0))
	}
	if len(b.Capacity) > 0 {
		e.print("\nServing capacity under each run's SLO · most requests at once (or rate) by context\n")
		var rows [][]string
		for _, r := range b.Runs {
			rows = append(rows, b.capacityRow(r))
		}
		h := ctxHeads([]string{"Run", "SLO"}, b.Capacity)
		table(e, "  ", h, rows, rightCols(h, 0, 1))
	}
	for _, f := range b.Fronts {
		e.print("\n" + b.frontTitle(f) + "\n")
		table(e, "  ", frontHead, b.frontRows(f), []bool{false, true, true, true, true, true, false})
		for _, l := range wrapWords(b.frontSummary(f), textWidth, "") {
			e.print(l + "\n")
		}
	}
	if len(b.Fronts) == 0 {
		e.print("\nPareto frontier: no Valid cell of a ranked run to draw one from.\n")
	} else {
		e.print("\n")
		for _, l := range wrapWords(b.frontNote(), textWidth, "") {
			e.print(l + "\n")
		}
	}
	if l := b.leftOut(); len(l) > 0 {
		e.print("\nLeft out of the frontiers\n")
		for _, s := range l {
			for _, wl := range wrapWords(s, textWidth-2, "    ") {
				e.print("  " + wl + "\n")
			}
		}
	}
	if words, cmd := b.compareHint(); cmd != "" {
		e.print("\n" + words + " " + cmd + "\n")
	}
	return e.err
}

func boardMarkdown(w io.Writer, b *board) error {
	e := &errWriter{w: w}
	e.print("# " + mdEscape(b.title()) + "\n\n" + mdEscape(b.sub()) + "\n\n")
	head, rows := b.wideTable()
	right := make([]bool, len(head))
	for i := range right {
		right[i] = i >= 6
	}
	mdTable(e, head, rows, right)
	if l := b.apartLines(); len(l) > 0 {
		e.print("\n## Not ranked with the others\n\n")
		for _, s := range l {
			e.print("- " + mdEscape(s) + "\n")
		}
	}
	e.print("\n## What differs between the runs\n\n")
	if len(b.Differs) == 0 {
		e.print("Nothing but what ran: the same settings.\n")
	} else {
		h := append([]string{"Run"}, b.Differs...)
		var rows [][]string
		for _, r := range b.Runs {
			row := []string{r.Label}
			for _, k := range b.Differs {
				row = append(row, orDash(r.Settings[k]))
			}
			rows = append(rows, row)
		}
		mdTable(e, h, rows, make([]bool, len(h)))
	}
	if len(b.Prefill) > 0 {
		e.print("\n## Prefill\n\nprompt tok/s by context\n\n")
		var rows [][]string
		for _, r := range b.Runs {
			rows = append(rows, b.prefillRow(r))
		}
		h := ctxHeads([]string{"Run"}, b.Prefill)
		mdTable(e, h, rows, rightCols(h, 0))
	}
	if len(b.Capacity) > 0 {
		e.print("\n## Serving capacity under each run's SLO\n\nmost requests at once (or request rate) by context\n\n")
		var rows [][]string
		for _, r := range b.Runs {
			rows = append(rows, b.capacityRow(r))
		}
		h := ctxHeads([]string{"Run", "SLO"}, b.Capacity)
		mdTable(e, h, rows, rightCols(h, 0, 1))
	}
	for _, f := range b.Fronts {
		e.print("\n## " + mdEscape(b.frontTitle(f)) + "\n\n")
		mdTable(e, frontHead, b.frontRows(f), []bool{false, true, true, true, true, true, false})
		e.print("\n" + mdEscape(b.frontSummary(f)) + "\n")
	}
	if len(b.Fronts) > 0 {
		e.print("\n" + mdEscape(b.frontNote()) + "\n")
	}
	if l := b.leftOut(); len(l) > 0 {
		e.print("\n## Left out of the frontiers\n\n")
		for _, s := range l {
			e.print("- " + mdEscape(s) + "\n")
		}
	}
	if words, cmd := b.compareHint(); cmd != "" {
		e.print("\n" + mdEscape(words) + " `" + cmd + "`\n")
	}
	return e.err
}

// BoardSchemaVersion is the version of the board's JSON document.
const BoardSchemaVersion = 1

// The board's JSON document (board.schema.json).
type (
	boardDoc struct {
		Board     int               `json:"board"`
		Sort      string            `json:"sort"`
		SLO       *result.SLOSpec   `json:"slo,omitempty"`
		Differs   []string          `json:"differs"`
		Runs      []boardDocRun     `json:"runs"`
		Frontiers []boardDocContext `json:"frontiers"`
		Skipped   []boardDocSkipped `json:"skipped,omitempty"`
	}
	boardDocRun struct {
		Label         string            `json:"label"`
		File          string            `json:"file"`
		Rank          int               `json:"rank"`
		Engine        string            `json:"engine"`
		Version       string            `json:"version"`
		Model         string            `json:"model"`
		Quantization  string            `json:"quantization"`
		Hardware      string            `json:"hardware"`
		Settings      map[string]string `json:"settings"`
		Best          *boardDocCell     `json:"best"`
		BestWithinSLO *boardDocCell     `json:"best_within_slo,omitempty"`
		SLO           *boardDocSLO      `json:"slo,omitempty"`
		Prefill       []boardDocPrefill `json:"prefill"`
		Cells         boardDocCounts    `json:"cells"`
		Apart         []string          `json:"apart,omitempty"`
		LeftOut       []string          `json:"left_out,omitempty"`
	}
	boardDocCell struct {
		Context     int     `json:"context"`
		Concurrency int     `json:"concurrency"`
		Rate        float64 `json:"rate,omitempty"`
		TotalTokS   float64 `json:"total_tok_s"`
		PerReqTokS  float64 `json:"per_request_tok_s"`
		TTFTms      float64 `json:"ttft_ms"`
		TBTms       float64 `json:"tbt_ms"`
	}
	boardDocPoint struct {
		Run string `json:"run"`
		boardDocCell
		OwnFrontier bool `json:"own_frontier"`
		Frontier    bool `json:"frontier"`
	}
	boardDocContext struct {
		Context int             `json:"context"`
		Points  []boardDocPoint `json:"points"`
	}
	boardDocSLO struct {
		Text     string               `json:"text"`
		Capacity []result.SLOCapacity `json:"capacity"`
	}
	boardDocPrefill struct {
		Context   int           `json:"context"`
		Status    result.Status `json:"status"`
		TokPerSec float64       `json:"tok_s,omitempty"`
		TTFTms    float64       `json:"ttft_ms,omitempty"`
	}
	boardDocCounts struct {
		Valid        int `json:"valid"`
		OverCapacity int `json:"over_capacity"`
		Queued       int `json:"requests_queued"`
		Failed       int `json:"failed"`
		Other        int `json:"other"`
	}
	boardDocSkipped struct {
		File string `json:"file"`
		Why  string `json:"why"`
	}
)

func docCell(p *paretoPoint) *boardDocCell {
	if p == nil {
		return nil
	}
	return &boardDocCell{Context: p.Context, Concurrency: p.Col.N, Rate: p.Col.Rate, TotalTokS: p.Total,
		PerReqTokS: p.PerRequest, TTFTms: p.TTFTms, TBTms: p.TBTms}
}

func (b *board) doc() boardDoc {
	d := boardDoc{Board: BoardSchemaVersion, Sort: b.Sort.Name, Differs: append([]string{}, b.Differs...),
		Runs: []boardDocRun{}, Frontiers: []boardDocContext{}}
	if b.Sort.AtContext && b.SortCtx >= 0 {
		d.Sort += "@" + ctxLabel(b.SortCtx)
	}
	if !b.SLO.IsZero() {
		s := b.SLO.Result()
		d.SLO = &s
	}
	for _, r := range b.Runs {
		dr := boardDocRun{Label: r.Label, File: r.File, Rank: r.Rank, Engine: r.R.Engine.Name, Version: r.R.Engine.Version,
			Model: r.Model, Quantization: r.Quant, Hardware: r.Hardware, Settings: map[string]string{},
			Best: docCell(r.Best), BestWithinSLO: docCell(r.BestSLO), Prefill: []boardDocPrefill{}, Apart: r.Apart, LeftOut: r.LeftOut,
			Cells: boardDocCounts{r.Counts.Valid, r.Counts.OverCapacity, r.Counts.Queued, r.Counts.Failed, r.Counts.Other}}
		for _, k := range b.Differs {
			dr.Settings[k] = r.Settings[k]
		}
		if s := r.R.SLO; s != nil {
			dr.SLO = &boardDocSLO{Text: s.Spec.Text, Capacity: append([]result.SLOCapacity{}, s.Capacity...)}
		}
		for _, p := range r.R.Prefill {
			dp := boardDocPrefill{Context: p.Context, Status: p.Status}
			if p.Status.ShowsFigures() {
				dp.TokPerSec, dp.TTFTms = p.TokPerSec, p.TTFTms
			}
			dr.Prefill = append(dr.Prefill, dp)
		}
		d.Runs = append(d.Runs, dr)
	}
	for _, f := range b.Fronts {
		c := boardDocContext{Context: f.Context, Points: []boardDocPoint{}}
		for _, p := range f.Points {
			c.Points = append(c.Points, boardDocPoint{Run: b.byIndex(p.Run).Label, boardDocCell: *docCell(&p),
				OwnFrontier: p.OwnFrontier, Frontier: p.OnFrontier})
		}
		d.Frontiers = append(d.Frontiers, c)
	}
	for _, s := range b.Skipped {
		d.Skipped = append(d.Skipped, boardDocSkipped(s))
	}
	return d
}

func boardJSON(w io.Writer, b *board) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(b.doc())
}

// boardCSV writes one row per run (kind "run") and one per decode cell of
// every run (kind "cell"), each with the run's label; a column the row's
// kind has not is empty.
func boardCSV(w io.Writer, b *board) error {
	cw := csv.NewWriter(w)
	head := []string{"kind", "run", "file", "rank", "engine", "version", "model", "quantization", "hardware",
		"valid_cells", "over_capacity_cells", "requests_queued_cells", "failed_cells", "other_cells",
		"best_context", "best_column", "best_total_tok_s", "best_per_request_tok_s", "best_ttft_ms", "best_tbt_ms",
		"best_within_slo_total_tok_s", "slo"}
	for _, c := range b.Prefill {
		head = append(head, "prefill_tok_s_"+strconv.Itoa(c))
	}
	for _, c := range b.Capacity {
		head = append(head, "slo_capacity_"+strconv.Itoa(c))
	}
	head = append(head, "apart", "context", "concurrency", "rate", "status", "total_tok_s", "per_request_tok_s",
		"ttft_ms", "tbt_ms", "own_frontier", "frontier")
	if err := cw.Write(head); err != nil {
		return err
	}
	nRun := len(head) - 10
	points := map[string]paretoPoint{}
	key := func(run, ctx int, col result.Column) string { return fmt.Sprint(run, ctx, col.N, col.Rate) }
	for _, f := range b.Fronts {
		for _, p := range f.Points {
			points[key(p.Run, p.Context, p.Col)] = p
		}
	}
	for _, r := range b.Runs {
		row := []string{"run", r.Label, r.File, strconv.Itoa(r.Rank), r.R.Engine.Name, r.R.Engine.Version, r.Model, r.Quant, r.Hardware,
			// Counts are written even when 0: an empty column is one the
			// row's kind has not.
			strconv.Itoa(r.Counts.Valid), strconv.Itoa(r.Counts.OverCapacity), strconv.Itoa(r.Counts.Queued), strconv.Itoa(r.Counts.Failed), strconv.Itoa(r.Counts.Other)}
		if p := r.Best; p != nil {
			row = append(row, strconv.Itoa(p.Context), colHead(p.Col), num(p.Total), num(p.PerRequest), num(p.TTFTms), num(p.TBTms))
		} else {
			row = append(row, "", "", "", "", "", "")
		}
		s := ""
		if r.BestSLO != nil {
			s = num(r.BestSLO.Total)
		}
		row = append(row, s, r.sloText)
		for _, c := range b.Prefill {
			v := ""
			if p := findPrefill(r.R, c); p != nil && p.Status.ShowsFigures() {
				v = num(p.TokPerSec)
			}
			row = append(row, v)
		}
		for _, c := range b.Capacity {
			v := ""
			if r.R.SLO != nil {
				for _, x := range r.R.SLO.Capacity {
					if x.Context == c {
						v = capacityText(x, r.R.RateRun())
					}
				}
			}
			row = append(row, v)
		}
		row = append(row, strings.Join(r.Apart, "; "))
		for len(row) < len(head) {
			row = append(row, "")
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	for _, r := range b.Runs {
		for i := range r.R.Decode {
			c := &r.R.Decode[i]
			row := make([]string, nRun)
			row[0], row[1], row[2] = "cell", r.Label, r.File
			rate := ""
			if c.Rate > 0 {
				rate = num(c.Rate)
			}
			row = append(row, strconv.Itoa(c.Context), strconv.Itoa(c.Concurrency), rate, string(c.Status))
			if c.ShowsFigures() {
				row = append(row, num(c.TotalTokPerSec), num(c.PerRequestTokPerSec), num(c.TTFTms), num(c.TBTms))
			} else {
				row = append(row, "", "", "", "")
			}
			own, all := "", ""
			if p, ok := points[key(r.Index, c.Context, c.Column())]; ok {
				own, all = strconv.FormatBool(p.OwnFrontier), strconv.FormatBool(p.OnFrontier)
			}
			row = append(row, own, all)
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// BoardJSONSchema is the JSON Schema (draft 2020-12) of the board's JSON
// document, report/board.schema.json; tests hold every board to it.
//
//go:embed board.schema.json
var BoardJSONSchema []byte
