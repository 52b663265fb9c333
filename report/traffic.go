package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/traffic"
)

// trafficWriters write a traffic summary in each format.
var trafficWriters = writers[trafficSubject]{
	Text:     func(w io.Writer, x trafficSubject) error { return newTrafficView(x.s, x.title).text(w) },
	Markdown: func(w io.Writer, x trafficSubject) error { return newTrafficView(x.s, x.title).markdown(w) },
	HTML:     func(w io.Writer, x trafficSubject) error { return newTrafficView(x.s, x.title).html(w) },
	CSV:      func(w io.Writer, x trafficSubject) error { return trafficCSV(w, x.s) },
	JSON: func(w io.Writer, x trafficSubject) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(x.s)
	},
}

// trafficSubject is a traffic summary and what it summarised.
type trafficSubject struct {
	s     traffic.Summary
	title string
}

// RenderTraffic writes a traffic summary — a proxy capture's requests,
// summarised by package traffic — in format f: requests by model and
// outcome, each model's tokens per second, and TTFT, time between tokens
// and end-to-end percentiles with their sample counts. title names what
// was summarised (the capture's file name).
func RenderTraffic(w io.Writer, s traffic.Summary, f Format, title string) error {
	return trafficWriters.write(w, f, trafficSubject{s, title})
}

// trafficView is a traffic summary as display strings.
type trafficView struct {
	Title, Sub  string
	OutcomeHead []string
	Outcomes    [][]string
	ModelHead   []string
	Models      [][]string
	PctHead     []string
	Pcts        [][]string
	TTFTNote    string
	Percentiles []float64
}

const trafficTTFT = "TTFT is timed from the request reaching the proxy to the engine's first token event; end to end to the last byte, of the requests that completed OK only (the proxy's /stats and /metrics time every request that ended, failed and cancelled ones too, so their end to end differs where any did)."

func newTrafficView(s traffic.Summary, title string) *trafficView {
	v := &trafficView{Title: "Traffic · " + title, Percentiles: s.Percentiles, TTFTNote: trafficTTFT}
	when := ""
	if !s.First.IsZero() {
		when = fmt.Sprintf(" (%s – %s UTC)", s.First.UTC().Format("2006-01-02 15:04:05"), s.Last.UTC().Format("15:04:05"))
	}
	v.Sub = fmt.Sprintf("%s · %s over %s%s", english.Count(len(s.Models), "model", "models"),
		english.Count(s.Requests, "request", "requests"), fmtSeconds(s.SpanSeconds), when)

	v.OutcomeHead = []string{"Model", "Outcome", "Whose fault", "HTTP status", "Requests"}
	for _, o := range s.Outcomes {
		blame := string(o.Blame)
		if blame == "" {
			blame = dash
		}
		st := dash
		if o.Status != 0 {
			st = strconv.Itoa(o.Status)
		}
		v.Outcomes = append(v.Outcomes, []string{orDash(o.Model), string(o.Outcome), blame, st, fmtInt(o.Count)})
	}

	v.ModelHead = []string{"Model", "Requests", "OK", "Failed", "Cancelled", "Prompt tokens", "Output tokens", "Output tok/s", "Requests/s"}
	modelRow := func(name string, f traffic.Figures) []string {
		return []string{name, fmtInt(f.Requests), fmtInt(f.OK), fmtInt(f.Failed), fmtInt(f.Cancelled),
			fmtInt(f.PromptTokens), fmtInt(f.OutputTokens), fmtRate(f.OutputTokPerS), fmtFixed(f.RequestsPerS, 2)}
	}
	for _, m := range s.Models {
		v.Models = append(v.Models, modelRow(orDash(m.Name), m.Figures))
	}
	if len(s.Models) > 1 {
		v.Models = append(v.Models, modelRow("All", s.Figures))
	}

	v.PctHead = []string{"Model", "Measure", "Samples"}
	for _, p := range s.Percentiles {
		v.PctHead = append(v.PctHead, result.Label(p))
	}
	pctRows := func(name string, f traffic.Figures) {
		first := true
		for _, m := range []struct {
			label string
			d     *result.Dist
			kind  string
		}{{"TTFT", f.TTFTms, "ms"}, {"Time between tokens", f.TBTms, "tbt"}, {"End to end", f.E2Ems, "ms"}, {"Per request tok/s", f.PerRequest, "rate"}} {
			row := []string{"", m.label, "0"}
			if first {
				row[0] = name
				first = false
			}
			if m.d != nil {
				row[2] = fmtInt(int(m.d.N))
			}
			for _, p := range s.Percentiles {
				val, ok := m.d.Value(p)
				cell := dash
				if ok {
					switch m.kind {
					case "tbt":
						cell = fmtTBT(val)
					case "rate":
						cell = fmtRate(val)
					default:
						cell = fmtLatencyMs(val)
					}
					if m.d.Low(p) {
						cell += lowMark
					}
				}
				row = append(row, cell)
			}
			v.Pcts = append(v.Pcts, row)
		}
	}
	for _, m := range s.Models {
		pctRows(orDash(m.Name), m.Figures)
	}
	if len(s.Models) > 1 {
		pctRows("All", s.Figures)
	}
	return v
}

func rightCols(head []string, left ...int) []bool {
	r := make([]bool, len(head))
	for i := range r {
		r[i] = true
	}
	for _, l := range left {
		r[l] = false
	}
	return r
}

func (v *trafficView) text(w io.Writer) error {
	e := &errWriter{w: w}
	e.print(v.Title + "\n" + v.Sub + "\n")
	e.print("\nRequests by model and outcome\n")
	table(e, "  ", v.OutcomeHead, v.Outcomes, rightCols(v.OutcomeHead, 0, 1, 2))
	e.print("\nThroughput by model · over the capture's span, first request to last end\n")
	table(e, "  ", v.ModelHead, v.Models, rightCols(v.ModelHead, 0))
	e.print("\nLatency percentiles · from the records' histograms, with the samples each is read from\n")
	table(e, "  ", v.PctHead, v.Pcts, rightCols(v.PctHead, 0, 1))
	for _, l := range wrapWords(lowNote+" "+v.TTFTNote, textWidth, "") {
		e.print(l + "\n")
	}
	return e.err
}

func (v *trafficView) markdown(w io.Writer) error {
	e := &errWriter{w: w}
	e.printf("# %s\n\n%s\n", mdEscape(v.Title), mdEscape(v.Sub))
	tbl := func(title string, head []string, rows [][]string, right []bool) {
		e.printf("\n## %s\n\n", title)
		mdTable(e, head, rows, right)
	}
	tbl("Requests by model and outcome", v.OutcomeHead, v.Outcomes, rightCols(v.OutcomeHead, 0, 1, 2))
	tbl("Throughput by model", v.ModelHead, v.Models, rightCols(v.ModelHead, 0))
	tbl("Latency percentiles", v.PctHead, v.Pcts, rightCols(v.PctHead, 0, 1))
	e.printf("\n%s %s\n", lowNote, v.TTFTNote)
	return e.err
}

func (v *trafficView) html(w io.Writer) error {
	e := &htmlWriter{errWriter{w: w}}
	e.head(v.Title + " · tokentap")
	e.printf("<header><h1>%s</h1><p class=\"by\">%s</p></header>\n", h(v.Title), h(v.Sub))
	tbl := func(title string, head []string, rows [][]string) {
		e.printf("<h2>%s</h2>\n", h(title))
		e.table("all", head, rows)
	}
	tbl("Requests by model and outcome", v.OutcomeHead, v.Outcomes)
	tbl("Throughput by model", v.ModelHead, v.Models)
	tbl("Latency percentiles", v.PctHead, v.Pcts)
	e.printf("<p class=\"notes\">%s %s</p>\n", h(lowNote), h(v.TTFTNote))
	e.foot(nil)
	return e.err
}

// trafficCSV writes one row per model (and "all" for every model
// together): counts, tokens, rates, and each distribution's sample count
// and percentiles.
func trafficCSV(w io.Writer, s traffic.Summary) error {
	cw := csv.NewWriter(w)
	head := []string{"model", "requests", "ok", "failed", "cancelled", "prompt_tokens", "output_tokens", "output_tok_s", "requests_per_s"}
	names := []string{"ttft", "tbt", "e2e", "per_request"}
	for _, m := range names {
		head = append(head, m+"_n")
		unit := "_ms"
		if m == "per_request" {
			unit = "_tok_s"
		}
		for _, p := range s.Percentiles {
			head = append(head, m+"_"+result.Label(p)+unit)
		}
	}
	head = append(head, "low_count")
	if err := cw.Write(head); err != nil {
		return err
	}
	row := func(name string, f traffic.Figures) error {
		r := []string{name, strconv.Itoa(f.Requests), strconv.Itoa(f.OK), strconv.Itoa(f.Failed), strconv.Itoa(f.Cancelled),
			strconv.Itoa(f.PromptTokens), strconv.Itoa(f.OutputTokens), num(f.OutputTokPerS), num(f.RequestsPerS)}
		var low []string
		for i, d := range []*result.Dist{f.TTFTms, f.TBTms, f.E2Ems, f.PerRequest} {
			if d == nil {
				r = append(r, "0")
				for range s.Percentiles {
					r = append(r, "")
				}
				continue
			}
			r = append(r, strconv.FormatInt(d.N, 10))
			for _, p := range s.Percentiles {
				val, _ := d.Value(p)
				r = append(r, csvFloat(val))
				if d.Low(p) {
					low = append(low, names[i]+"_"+result.Label(p))
				}
			}
		}
		return cw.Write(append(r, strings.Join(low, " ")))
	}
	for _, m := range s.Models {
		if err := row(m.Name, m.Figures); err != nil {
			return err
		}
	}
	if err := row("all", s.Figures); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}
