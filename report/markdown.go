package report

import (
	"io"
	"strconv"
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

// gridCellMD is a decode grid cell: "156.2<br>44 ms TTFT", with "Requests
// queued" between the two for queued cells, or the status alone.
func gridCellMD(g gridCell) string {
	switch g.Status {
	case result.Valid:
		return g.TokS + "<br>" + g.TTFT + " TTFT"
	case result.RequestsQueued, result.CacheMissed, result.LateWindow:
		m, _ := mark(g.Status)
		return g.TokS + "<br>" + m + "<br>" + g.TTFT + " TTFT"
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
		mdRow(e, []string{"Context", "Prompt tok/s", "TTFT"})
		mdAlign(e, []bool{false, true, true})
		for _, p := range v.Prefill {
			if p.TokS == "" {
				mdRow(e, []string{p.Context, p.Status.Label(), dash})
				continue
			}
			mdRow(e, []string{p.Context, p.TokS, p.TTFT})
		}
	}
	if len(v.Grid) > 0 {
		e.print("\n## Sustained decode\n\ntotal tok/s · rows are context length, columns are simultaneous requests\n\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, n := range v.Conc {
			head = append(head, itoa(n))
			right = append(right, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for _, row := range v.Grid {
			cells := []string{row.Label}
			for _, g := range row.Cells {
				cells = append(cells, gridCellMD(g))
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
	if len(v.All) > 0 {
		e.printf("\n## All measurements\n\n%s\n\n", allNote)
		mdRow(e, v.Columns)
		right := make([]bool, len(v.Columns))
		for i := range right {
			right[i] = i != 0 && i != 3 // Phase and Status read left to right; figures line up right
		}
		mdAlign(e, right)
		for _, row := range v.All {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = mdEscape(c)
			}
			mdRow(e, cells)
		}
		if len(v.Footnotes) > 0 {
			e.printf("\n%s\n", strings.Join(v.Footnotes, " "))
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

func itoa(n int) string { return strconv.Itoa(n) }
