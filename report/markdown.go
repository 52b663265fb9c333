package report

import (
	"io"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// mdEscape makes s safe inside a Markdown table cell.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func mdRow(e *errWriter, cells []string) {
	e.print("|")
	for _, c := range cells {
		e.print(" " + c + " |")
	}
	e.print("\n")
}

// mdTable writes a table: head, the alignment row (right: figures line
// up right), then rows with every cell escaped.
func mdTable(e *errWriter, head []string, rows [][]string, right []bool) {
	mdRow(e, head)
	mdAlign(e, right)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = mdEscape(c)
		}
		mdRow(e, cells)
	}
}

func mdAlign(e *errWriter, right []bool) {
	e.print("|")
	for _, r := range right {
		if r {
			e.print("---:|")
		} else {
			e.print("---|")
		}
	}
	e.print("\n")
}

// gridCellMD is a decode grid cell: "156.2<br>44 ms TTFT, warm prefix",
// with "Requests queued" between the two for queued cells, or the status
// alone.
func gridCellMD(g gridCell) string {
	if !g.shows() {
		return g.Status.Label()
	}
	switch g.Status {
	case result.Valid:
		return g.TokS + "<br>" + g.TTFT + " " + ttftLabel(g.ttftKind())
	case result.RequestsQueued, result.CacheMissed, result.LateWindow:
		m, _ := mark(g.Status)
		return g.TokS + "<br>" + m + "<br>" + g.TTFT + " " + ttftLabel(g.ttftKind())
	}
	return g.Status.Label()
}

func fence(s string) string {
	f := "```"
	for strings.Contains(s, f) {
		f += "`"
	}
	return f
}

func writeMarkdown(w io.Writer, v *view) error {
	e := &errWriter{w: w}
	e.printf("# %s\n\n", v.Title)
	if v.EngineLine != "" {
		e.printf("%s\n\n", v.EngineLine)
	}
	e.printf("%s\n", v.ByLine)
	for _, s := range v.Sections {
		if len(s.Rows) == 0 {
			continue
		}
		e.printf("\n## %s\n\n", s.Title)
		for _, r := range s.Rows {
			e.printf("- **%s**: %s\n", r.Key, r.Value)
		}
	}
	if v.Launch != "" {
		f := fence(v.Launch)
		e.printf("\n## Launch command\n\n%ssh\n%s\n%s\n", f, v.Launch, f)
	}
	if len(v.Notes) > 0 {
		e.print("\n## Notes\n\n")
		for _, n := range v.Notes {
			e.printf("- %s\n", n)
		}
	}
	if len(v.Prefill) > 0 {
		e.print("\n## Prefill\n\nprompt tok/s by context length\n\n")
		head, right := []string{"Context", "Prompt tok/s", "TTFT"}, []bool{false, true, true}
		if v.Repeats {
			head, right = append(head, "Spread (min–max)", "n"), append(right, true, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for _, p := range v.Prefill {
			row := []string{p.Context, p.Status.Label(), dash}
			if p.TokS != "" {
				row = []string{p.Context, p.TokS, p.TTFT}
			}
			if v.Repeats {
				row = append(row, orDash(p.Spread), p.N)
			}
			mdRow(e, row)
		}
		e.print("\n" + prefillNoteOf(v) + "\n")
	}
	if len(v.Grid) > 0 {
		e.print("\n## Sustained decode\n\ntotal tok/s · " + v.rowsAre() + ", columns are " + v.columnsAre() + "\n\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, c := range v.Cols {
			head = append(head, colHead(c))
			right = append(right, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for _, row := range v.Grid {
			cells := []string{row.Label}
			for _, g := range row.Cells {
				c := gridCellMD(g)
				if m := v.LimitMarks[cellKey{row.Context, g.Col}]; m != "" {
					c += "<br>" + m
				}
				cells = append(cells, c)
			}
			mdRow(e, cells)
		}
		if len(v.Footnotes) > 0 {
			e.printf("\n%s\n", strings.Join(v.Footnotes, " "))
		}
		e.printf("\n%s\n", v.TTFTNote)
		if len(v.Failures) > 0 {
			e.print("\nWhat went wrong:\n\n")
			for _, f := range v.Failures {
				e.printf("- %s\n", f)
			}
		}
	}
	writeMarkdownBeyond(e, v)
	writeMarkdownSweeps(e, v)
	if len(v.All) > 0 {
		e.printf("\n## All measurements\n\n%s\n\n", allNote(v.Rate))
		mdTable(e, v.Columns, v.All, rightCols(v.Columns, 0, 3)) // Phase and Status read left to right
		if len(v.Footnotes) > 0 {
			e.printf("\n%s\n", strings.Join(v.Footnotes, " "))
		}
	}
	if len(v.PctRows) > 0 {
		e.printf("\n## Latency percentiles\n\n%s\n\n", pctIntro(v))
		head := []string{"Context", v.colName(), "Measure", "Samples"}
		right := []bool{false, true, false, true}
		for _, p := range v.Percentiles {
			head = append(head, result.Label(p))
			right = append(right, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for _, r := range v.PctRows {
			mdRow(e, append([]string{r.Context, r.Col, r.Measure, r.N}, r.Values...))
		}
		e.printf("\n%s\n", lowNote)
		for _, x := range v.Explain {
			e.printf("\n%s\n", x)
		}
	}
	if len(v.Probes) > 0 {
		e.print("\n## What the engine said\n\n")
		mdRow(e, []string{"Fact", "Value", "Source"})
		mdAlign(e, []bool{false, false, false})
		for _, p := range v.Probes {
			mdRow(e, []string{mdEscape(p.Name), mdEscape(p.Value), mdEscape(p.Source)})
		}
	}
	return e.err
}

// writeMarkdownBeyond writes the SLO, TTFT split and bandwidth-limit
// sections where the run has them.
func writeMarkdownBeyond(e *errWriter, v *view) {
	b := v.Beyond
	if b == nil {
		return
	}
	table := func(head []string, rows [][]string) { mdTable(e, head, rows, rightCols(head, 0)) }
	if b.SLODesc != "" {
		e.printf("\n## SLOs\n\n%s · share of judged requests that met every SLO · good requests/s · requests judged/undecided\n\n", mdEscape(b.SLODesc))
		head := []string{"Context"}
		for _, k := range v.Cols {
			head = append(head, k.Label())
		}
		var rows [][]string
		for _, r := range b.SLOGrid {
			rows = append(rows, append([]string{r.Label}, r.Cells...))
		}
		table(head, rows)
		e.print("\n")
		for _, n := range b.SLONotes {
			e.printf("- %s\n", n)
		}
	}
	if len(b.SplitRows) > 0 {
		e.print("\n## Where TTFT goes\n\nthe engine's own figures beside tokentap's\n\n")
		table(b.SplitHead, b.SplitRows)
		e.print("\n")
		for _, n := range b.SplitNotes {
			e.printf("- %s\n", n)
		}
		e.print("\nSources:\n\n")
		for _, s := range b.SplitSources {
			e.printf("- %s\n", s)
		}
	}
	if len(b.LimitInputs) > 0 {
		e.print("\n## Decode vs the GPU's bandwidth limit\n\n")
		for _, kv := range b.LimitInputs {
			e.printf("- **%s**: %s\n", kv.Key, kv.Value)
		}
		if len(b.LimitRows) > 0 {
			e.print("\n")
			table(b.LimitHead, b.LimitRows)
		}
		for _, n := range b.LimitNotes {
			e.printf("\n%s\n", n)
		}
	}
}
