package report

import (
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tokentap/tokentap/result"
)

// textWidth is the terminal width the text report fits.
const textWidth = 100

func runeLen(s string) int { return utf8.RuneCountInString(s) }

func pad(s string, w int, right bool) string {
	n := w - runeLen(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

// wrapWords wraps s at spaces to width, prefixing continuation lines.
func wrapWords(s string, width int, cont string) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case runeLen(line)+1+runeLen(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = cont + word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// wrapParts wraps a " · "-separated line between its parts where it can,
// keeping its indentation and indenting continuation lines two more.
func wrapParts(s string, width int) []string {
	trimmed := strings.TrimLeft(s, " ")
	lead := s[:len(s)-len(trimmed)]
	cont := lead + "  "
	var lines []string
	line := ""
	for _, part := range strings.Split(trimmed, " · ") {
		switch {
		case line == "":
			line = part
		case runeLen(lead)+runeLen(line)+3+runeLen(part) <= width:
			line += " · " + part
		default:
			// The break replaces the separator: the next line's indent says
			// it goes on (a "·" left at a line's end reads as stray).
			lines = append(lines, line)
			line = part
		}
	}
	lines = append(lines, line)
	var out []string
	for i, l := range lines {
		prefix := cont
		if i == 0 {
			prefix = lead
		}
		for j, w := range wrapWords(l, width-runeLen(cont), "") {
			if j > 0 {
				prefix = cont
			}
			out = append(out, prefix+w)
		}
	}
	return out
}

// wrapCommand wraps a launch command so it stays copy-pasteable: shell
// lines continue with " \", comment lines continue as comments.
func wrapCommand(cmd string, width int) []string {
	var out []string
	for _, line := range strings.Split(cmd, "\n") {
		if runeLen(line) <= width {
			out = append(out, line)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, wrapWords(line, width, "# ")...)
			continue
		}
		parts := wrapWords(line, width-2, "    ")
		for i, p := range parts {
			if i < len(parts)-1 {
				p += " \\"
			}
			out = append(out, p)
		}
	}
	return out
}

// table lays out rows under head with per-column widths; right marks
// right-aligned columns. The gap between columns is two spaces when the
// table fits textWidth that way, else one.
func table(e *errWriter, indent string, head []string, rows [][]string, right []bool) {
	widths := make([]int, len(head))
	for i, h := range head {
		widths[i] = runeLen(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], runeLen(c))
		}
	}
	total := runeLen(indent)
	for _, w := range widths {
		total += w
	}
	gap := "  "
	if total+2*(len(widths)-1) > textWidth {
		gap = " "
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range cells {
			if i > 0 {
				b.WriteString(gap)
			}
			last := i == len(cells)-1
			if last && !right[i] {
				b.WriteString(c)
			} else {
				b.WriteString(pad(c, widths[i], right[i]))
			}
		}
		e.print(strings.TrimRight(b.String(), " ") + "\n")
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
}

// textStatus is a grid status short enough for a terminal column.
func textStatus(s result.Status) string {
	if s == result.OverCapacity {
		return "Over cap."
	}
	return s.Label()
}

func writeText(w io.Writer, v *view) error {
	e := &errWriter{w: w}
	e.print(v.Title + "\n")
	for _, l := range wrapParts(v.EngineLine, textWidth) {
		e.print(l + "\n")
	}
	e.print(v.ByLine + "\n")
	keyW := 0
	for _, s := range v.Sections {
		for _, r := range s.Rows {
			keyW = max(keyW, runeLen(r.Key))
		}
	}
	for _, s := range v.Sections {
		if len(s.Rows) == 0 {
			continue
		}
		e.print("\n" + s.Title + "\n")
		for _, r := range s.Rows {
			lines := wrapWords(r.Value, textWidth-keyW-4, "")
			for i, l := range lines {
				k := ""
				if i == 0 {
					k = r.Key
				}
				e.print("  " + pad(k, keyW, false) + "  " + l + "\n")
			}
		}
	}
	if v.Launch != "" {
		e.print("\nLaunch command\n")
		for _, l := range wrapCommand(v.Launch, textWidth-2) {
			e.print("  " + l + "\n")
		}
	}
	if len(v.Notes) > 0 {
		e.print("\nNotes\n")
		for _, n := range v.Notes {
			for _, l := range wrapWords("- "+n, textWidth-2, "  ") {
				e.print("  " + l + "\n")
			}
		}
	}
	if len(v.Prefill) > 0 {
		e.print("\nPrefill · prompt tok/s by context length\n")
		var rows [][]string
		head, right := []string{"", "tok/s", ""}, []bool{false, true, true}
		if v.Repeats {
			head, right = append(head, "spread", "n"), append(right, true, true)
		}
		for _, p := range v.Prefill {
			row := []string{p.Context + " context", p.Status.Label(), ""}
			if p.TokS != "" {
				row = []string{p.Context + " context", p.TokS, p.TTFT + " TTFT"}
			}
			if v.Repeats {
				row = append(row, p.Spread, p.N)
			}
			rows = append(rows, row)
		}
		table(e, "  ", head, rows, right)
		for _, l := range wrapParts(prefillNoteOf(v), textWidth) {
			e.print("  " + l + "\n")
		}
	}
	if len(v.Grid) > 0 {
		writeTextGrid(e, v)
	}
	writeTextBeyond(e, v)
	writeTextSweeps(e, v)
	if len(v.All) > 0 {
		e.print("\nAll measurements · " + allNote(v.Rate) + "\n")
		head := []string{"Phase", "Context", "N", "Status", "Tok/s", "Per req", "TTFT", "TBT", "Active", "Done", "Output", "For"}
		right := []bool{false, true, true, false, true, true, true, true, true, true, true, true}
		// The SLO and bandwidth-limit columns have their own sections
		// above: 100 columns hold the cache column, not those too.
		keep := len(allColumns)
		if v.Rate {
			head[2] = v.colName()
			head, right = append(head, "Achieved", "Peak"), append(right, true, true)
			keep += len(rateColumns)
		}
		cache := slices.Contains(v.Columns, cacheColumn)
		if cache {
			head, right = append(head, "Cache"), append(right, true)
			keep++
		}
		rows := make([][]string, len(v.All))
		for i, r := range v.All {
			rows[i] = append([]string(nil), r[:keep]...)
			if rows[i][0] == "Sustained decode" {
				rows[i][0] = "Decode"
			}
		}
		table(e, "", head, rows, right)
		legend := "N: requests at once · Per req: per request tok/s · TTFT: cold on Prefill rows, after a warm prefix on Decode rows · TBT: time between tokens · " +
			"Active: average active requests · Done: requests completed in the window · Output: output tokens · For: measured for"
		if v.Cold {
			legend = strings.Replace(legend, "TTFT: cold on Prefill rows, after a warm prefix on Decode rows", "TTFT: cold (prompts sent as given, not warmed)", 1)
		}
		if v.Rate {
			legend = "Rate: requests per second asked for · Per req: per request tok/s · TTFT: cold (prompts never sent before) · TBT: time between tokens · " +
				"Active: average active requests · Done: requests completed in the window · Output: output tokens · For: measured for · Achieved: requests sent per second · Peak: most requests in flight at once"
			if v.Mixed {
				legend = strings.Replace(strings.Replace(legend, "Rate: requests per second asked for", "N or rate: requests at once (a plain number) or per second asked for (/s)", 1),
					"TTFT: cold (prompts never sent before)", "TTFT: after a warm prefix at N, cold (prompts never sent before) at a rate", 1)
			}
		}
		if cache {
			legend += " · Cache: prefix cache hits"
		}
		if slices.Contains(v.Columns, tbtPerTokenHead) {
			// The peers' definitions are in the note below (tbtdefs.go).
			legend = strings.Replace(legend, "TBT: time between tokens", "TBT: time between tokens, per token", 1)
		}
		for _, l := range wrapWords(legend, textWidth, "") {
			e.print(l + "\n")
		}
		for _, l := range wrapWords(strings.Join(v.Footnotes, " "), textWidth, "") {
			e.print(l + "\n")
		}
	}
	if len(v.PctRows) > 0 {
		writeTextPercentiles(e, v)
	}
	if len(v.Probes) > 0 {
		e.print("\nWhat the engine said\n")
		var rows [][]string
		for _, p := range v.Probes {
			rows = append(rows, []string{p.Name, p.Value, p.Source})
		}
		table(e, "  ", []string{"Fact", "Value", "Source"}, rows, []bool{false, false, false})
	}
	return e.err
}

// writeTextPercentiles prints the Latency percentiles table.
func writeTextPercentiles(e *errWriter, v *view) {
	e.print("\nLatency percentiles\n")
	for _, l := range wrapWords(pctIntro(v), textWidth, "") {
		e.print(l + "\n")
	}
	head := []string{"Context", v.colName(), "Measure", "n"}
	right := []bool{false, true, false, true}
	for _, p := range v.Percentiles {
		head = append(head, result.Label(p))
		right = append(right, true)
	}
	rows := make([][]string, len(v.PctRows))
	for i, r := range v.PctRows {
		rows[i] = append([]string{r.Context, r.Col, r.Measure, r.N}, r.Values...)
	}
	table(e, "", head, rows, right)
	for _, l := range wrapWords(lowNote, textWidth, "") {
		e.print(l + "\n")
	}
	for _, x := range v.Explain {
		for _, l := range wrapWords(x, textWidth, "") {
			e.print(l + "\n")
		}
	}
}

// writeTextGrid prints the decode grid: per context a line of tok/s (or
// the status), a line of TTFT labelled for what it is, and a "queued" line
// where a cell queued.
func writeTextGrid(e *errWriter, v *view) {
	head0 := "Sustained decode · total tok/s, TTFT after a warm prefix below · rows: context, columns: " + v.columnsAre()
	ttftRow := "TTFT, warm" // "TTFT, warm prefix", short enough for 8 columns in 100
	switch {
	case v.Mixed && !v.Cold:
		head0 = "Sustained decode · total tok/s, TTFT below (after a warm prefix at N, cold at a rate) · rows: context, columns: " + v.columnsAre()
		ttftRow = "TTFT"
	case v.Rate || v.Cold:
		head0 = "Sustained decode · total tok/s, cold TTFT below · rows: context, columns: " + v.columnsAre()
		ttftRow = "TTFT, cold"
	}
	if v.Dataset {
		head0 = strings.Replace(head0, "rows: context", "row: the dataset's prompts", 1)
	}
	e.print("\n")
	for _, l := range wrapWords(head0, textWidth, "  ") {
		e.print(l + "\n")
	}
	labelW := max(runeLen("Context"), runeLen(ttftRow))
	colW := 0
	for _, c := range v.Cols {
		colW = max(colW, runeLen(colHead(c)))
	}
	for _, row := range v.Grid {
		labelW = max(labelW, runeLen(row.Label))
		for _, g := range row.Cells {
			if g.shows() {
				_, m := mark(g.Status)
				colW = max(colW, runeLen(g.TokS), runeLen(g.TTFT), runeLen(m), runeLen(shortLimit(v.LimitMarks[cellKey{row.Context, g.Col}])))
			} else {
				colW = max(colW, runeLen(textStatus(g.Status)))
			}
		}
	}
	gap := "  "
	if labelW+len(v.Cols)*(colW+2) > textWidth {
		gap = " "
	}
	line := func(label string, cells []string) {
		var b strings.Builder
		b.WriteString(pad(label, labelW, false))
		for _, c := range cells {
			b.WriteString(gap + pad(c, colW, true))
		}
		e.print(strings.TrimRight(b.String(), " ") + "\n")
	}
	head := make([]string, len(v.Cols))
	for i, c := range v.Cols {
		head[i] = colHead(c)
	}
	line("Context", head)
	for _, row := range v.Grid {
		first := make([]string, len(row.Cells))
		second := make([]string, len(row.Cells))
		third := make([]string, len(row.Cells))
		fourth := make([]string, len(row.Cells))
		queued, limited := false, false
		for i, g := range row.Cells {
			if g.shows() {
				first[i], second[i] = g.TokS, g.TTFT
			} else {
				first[i] = textStatus(g.Status)
			}
			if _, m := mark(g.Status); m != "" && g.shows() {
				third[i] = m
				queued = true
			}
			if m := v.LimitMarks[cellKey{row.Context, g.Col}]; m != "" {
				fourth[i] = shortLimit(m)
				limited = true
			}
		}
		line(row.Label, first)
		if slices.ContainsFunc(second, func(s string) bool { return s != "" }) {
			line(ttftRow, second)
		} else {
			line("", second)
		}
		if queued {
			line("", third)
		}
		if limited {
			line("", fourth)
		}
	}
	notes := append([]string(nil), v.Footnotes...)
	for i, n := range notes {
		if strings.HasPrefix(n, "Over capacity:") {
			notes[i] = "Over cap. = " + n
		}
		if strings.HasPrefix(n, "Requests queued:") {
			notes[i] = "queued = " + n
		}
		if strings.HasPrefix(n, "Cache missed:") {
			notes[i] = "cache missed = " + n
		}
		if strings.HasPrefix(n, "Late window:") {
			notes[i] = "late = " + n
		}
	}
	for _, l := range wrapWords(strings.Join(notes, " "), textWidth, "") {
		e.print(l + "\n")
	}
	for _, l := range wrapWords(v.TTFTNote, textWidth, "") {
		e.print(l + "\n")
	}
	if len(v.LimitMarks) > 0 {
		e.print("lim = the cell's total tok/s as a share of the GPU's bandwidth limit (below).\n")
	}
	if len(v.Failures) > 0 {
		e.print("What went wrong:\n")
		for _, f := range v.Failures {
			for _, l := range wrapWords("- "+f, textWidth-2, "  ") {
				e.print("  " + l + "\n")
			}
		}
	}
}

// shortLimit is a grid cell's limit mark as the text grid prints it:
// "62% lim".
func shortLimit(m string) string { return strings.Replace(m, " of limit", " lim", 1) }

// writeTextBeyond prints the SLO, TTFT split and bandwidth-limit sections
// where the run has them.
func writeTextBeyond(e *errWriter, v *view) {
	b := v.Beyond
	if b == nil {
		return
	}
	para := func(s string) {
		for _, l := range wrapWords(s, textWidth, "") {
			e.print(l + "\n")
		}
	}
	if b.SLODesc != "" {
		e.print("\n")
		for _, l := range wrapParts("SLOs · "+b.SLODesc+" · share of judged requests that met every SLO · good requests/s · requests judged/undecided", textWidth) {
			e.print(l + "\n")
		}
		head := []string{"Context"}
		right := []bool{false}
		for _, k := range v.Cols {
			head, right = append(head, k.Label()), append(right, true)
		}
		var rows [][]string
		for _, r := range b.SLOGrid {
			rows = append(rows, append([]string{r.Label}, r.Cells...))
		}
		table(e, "", head, rows, right)
		for _, n := range b.SLONotes {
			para(n)
		}
	}
	if len(b.SplitRows) > 0 {
		e.print("\nWhere TTFT goes · the engine's own figures beside tokentap's\n")
		head := withValidation([]string{"Context", "N", "TTFT", "Queue", "Prefill", "Engine TTFT", "Outside engine"}, b.SplitValidation)
		right := []bool{false}
		for range head[1:] {
			right = append(right, true)
		}
		table(e, "", head, b.SplitRows, right)
		for _, n := range b.SplitNotes {
			para(n)
		}
		e.print("Sources:\n")
		for _, s := range b.SplitSources {
			for _, l := range wrapWords("- "+s, textWidth-2, "  ") {
				e.print("  " + l + "\n")
			}
		}
	}
	if len(b.LimitInputs) > 0 {
		e.print("\nDecode vs the GPU's bandwidth limit\n")
		keyW := 0
		for _, kv := range b.LimitInputs {
			keyW = max(keyW, runeLen(kv.Key))
		}
		for _, kv := range b.LimitInputs {
			for i, l := range wrapWords(kv.Value, textWidth-keyW-4, "") {
				k := ""
				if i == 0 {
					k = kv.Key
				}
				e.print("  " + pad(k, keyW, false) + "  " + l + "\n")
			}
		}
		if len(b.LimitRows) > 0 {
			table(e, "", []string{"Context", "N", "Tok/s", "Limit tok/s", "% of limit", "Active", "Mean seq"}, b.LimitRows,
				[]bool{false, true, true, true, true, true, true})
		}
		for _, n := range b.LimitNotes {
			para(n)
		}
	}
}
