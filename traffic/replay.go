package traffic

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// Replay is what a capture replay (tokentap replay) reports: the
// replayed requests' figures (a Summary: the TTFT, time between tokens
// and throughput a matrix cell has, over the span from the first request
// sent to the last one's end), and, where the capture is given, the
// captured requests' figures beside them, so the replay can be checked
// against the traffic it replays and two engines compared on the same
// traffic. The command fills in the target, the speed and how late the
// sends ran; its JSON is the replay's --out document.
type Replay struct {
	Target string  `json:"target,omitempty"`
	Engine string  `json:"engine,omitempty"`
	Speed  float64 `json:"speed,omitempty"`

	// The replayed requests.
	Summary

	// Captured are the capture's own figures; nil when not given.
	Captured *Summary `json:"captured,omitempty"`

	// LateMaxMs and LateMedianMs say how far behind the capture's schedule
	// requests were sent.
	LateMaxMs    float64 `json:"late_max_ms"`
	LateMedianMs float64 `json:"late_median_ms"`

	// SLOSpec and SLO are the objectives (--slo) and how the replayed
	// requests met them, goodput over the span (METHOD.md §6).
	SLOSpec *result.SLOSpec `json:"slo_spec,omitempty"`
	SLO     *result.SLO     `json:"slo,omitempty"`
}

// AddSLO judges the replayed records against the objectives: every one
// that ended (OK or failed) is judged; one cancelled (the replay stopped,
// as the capture's client did) is judged on what happened by its cancel
// where that decides its result, and left undecided otherwise. Goodput is
// over the summary's span.
func (s *Replay) AddSLO(recs []record.Record, spec slo.Spec) {
	var t slo.Tally
	for i := range recs {
		t.Add(spec, &recs[i])
	}
	r := spec.Result()
	s.SLOSpec, s.SLO = &r, t.Figures(s.SpanSeconds)
}

// SummarizeReplay summarises a replay at percentiles ps (nil: the
// default), with the capture's figures beside the replayed ones where
// captured is not nil.
func SummarizeReplay(replayed, captured []record.Record, ps []float64) Replay {
	s := Replay{Summary: Summarize(replayed, ps)}
	if captured != nil {
		c := Summarize(captured, ps)
		s.Captured = &c
	}
	return s
}

// row is one line of the side-by-side table.
type row struct {
	name           string
	captured, repl string
	ratio          string
}

func fmtNum(v float64, dec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// ratioOf is "×1.02", "—" without two positive values.
func ratioOf(captured, replayed float64) string {
	if captured <= 0 || replayed <= 0 {
		return "—"
	}
	return "×" + strconv.FormatFloat(replayed/captured, 'f', 2, 64)
}

// dist returns p of d formatted (with the low-count mark) and its value;
// "—" and 0 when d lacks it.
func dist(d *result.Dist, p float64, dec int) (string, float64) {
	v, ok := d.Value(p)
	if !ok {
		return "—", 0
	}
	s := fmtNum(v, dec)
	if d.Low(p) {
		s += "*"
	}
	return s, v
}

// WriteText prints the summary for a terminal: captured and replayed side
// by side with the ratio replayed/captured where the capture is given.
func (s Replay) WriteText(w io.Writer) {
	if s.Target != "" {
		fmt.Fprintf(w, "Replay against %s (%s) at %gx speed\n\n", s.Target, s.Engine, s.Speed)
	}
	c := s.Captured
	var rows []row
	add := func(name string, cv, rv float64, cs, rs string, ratio bool) {
		r := row{name: name, captured: cs, repl: rs}
		if ratio {
			r.ratio = ratioOf(cv, rv)
		}
		rows = append(rows, r)
	}
	figs := func(get func(f *Figures) float64, name string, dec int) {
		var cv float64
		cs := ""
		if c != nil {
			cv = get(&c.Figures)
			cs = fmtNum(cv, dec)
		}
		rv := get(&s.Figures)
		add(name, cv, rv, cs, fmtNum(rv, dec), true)
	}
	counts := func(f *Figures) string {
		return fmt.Sprintf("%d (%d ok, %d failed, %d cancelled)", f.Requests, f.OK, f.Failed, f.Cancelled)
	}
	cs := ""
	if c != nil {
		cs = counts(&c.Figures)
	}
	add("Requests", 0, 0, cs, counts(&s.Figures), false)
	var cspan float64
	if c != nil {
		cspan = c.SpanSeconds
	}
	add("Span (s)", cspan, s.SpanSeconds, fmtIf(c != nil, cspan, 1), fmtNum(s.SpanSeconds, 1), true)
	figs(func(f *Figures) float64 { return float64(f.OutputTokens) }, "Output tokens", 0)
	figs(func(f *Figures) float64 { return f.OutputTokPerS }, "Output tok/s", 1)
	figs(func(f *Figures) float64 { return f.RequestsPerS }, "Requests/s", 2)
	figs(func(f *Figures) float64 { return f.AvgActive }, "Decoding at once (avg)", 2)
	for _, m := range []struct {
		name string
		get  func(f *Figures) *result.Dist
		dec  int
	}{
		{"TTFT (ms)", func(f *Figures) *result.Dist { return f.TTFTms }, 1},
		{"Time between tokens (ms)", func(f *Figures) *result.Dist { return f.TBTms }, 2},
		{"End to end (ms)", func(f *Figures) *result.Dist { return f.E2Ems }, 1},
		{"Per request tok/s", func(f *Figures) *result.Dist { return f.PerRequest }, 1},
	} {
		var cd *result.Dist
		if c != nil {
			cd = m.get(&c.Figures)
		}
		rd := m.get(&s.Figures)
		cn := ""
		if c != nil {
			cn = samples(cd)
		}
		add(m.name+" samples", 0, 0, cn, samples(rd), false)
		for _, p := range s.Percentiles {
			cstr, cv := dist(cd, p, m.dec)
			rstr, rv := dist(rd, p, m.dec)
			if c == nil {
				cstr = ""
			}
			add("  "+result.Label(p), cv, rv, cstr, rstr, true)
		}
	}
	nameW, cw, rw := 0, len("captured"), len("replayed")
	for _, r := range rows {
		nameW = max(nameW, len(r.name))
		cw = max(cw, len(r.captured))
		rw = max(rw, len(r.repl))
	}
	if c != nil {
		fmt.Fprintf(w, "%-*s  %*s  %*s  %s\n", nameW, "", cw, "captured", rw, "replayed", "replayed/captured")
	} else {
		fmt.Fprintf(w, "%-*s  %*s\n", nameW, "", rw, "replayed")
	}
	for _, r := range rows {
		if c != nil {
			fmt.Fprintf(w, "%-*s  %*s  %*s  %s\n", nameW, r.name, cw, r.captured, rw, r.repl, r.ratio)
		} else {
			fmt.Fprintf(w, "%-*s  %*s\n", nameW, r.name, rw, r.repl)
		}
	}
	if len(s.Errors) > 0 || (c != nil && len(c.Errors) > 0) {
		var parts []string
		for _, o := range s.Outcomes {
			if o.Outcome.Failed() {
				parts = append(parts, fmt.Sprintf("%s %s%s ×%d", o.Model, o.Outcome, statusSuffix(o.Status), o.Count))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "\nReplayed failures: %s\n", strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(w, "\n* fewer samples than the percentile needs: the value is the largest seen, not a tail estimate.\n")
	if s.SLO != nil && s.SLOSpec != nil {
		fmt.Fprintf(w, "\nSLO           %s\n", slo.FromResult(*s.SLOSpec).Describe())
		att := "—"
		if s.SLO.Attainment != nil {
			att = fmt.Sprintf("%.1f%%", 100**s.SLO.Attainment)
		}
		fmt.Fprintf(w, "Met every SLO %s of %d requests judged (%d good, %d failed; %d cut and undecided, not judged)\n", att, s.SLO.Judged, s.SLO.Good, s.SLO.Failed, s.SLO.Undecided)
		fmt.Fprintf(w, "Goodput       %.2f good requests/s, %.1f good output tok/s\n", s.SLO.GoodputReqPerSec, s.SLO.GoodputTokPerSec)
		if s.SLO.MostMissed != "" {
			fmt.Fprintf(w, "Most missed   %s (by %d of %d judged)\n", slo.Label(s.SLO.MostMissed), s.SLO.Missed[s.SLO.MostMissed], s.SLO.Judged)
		}
	}
	fmt.Fprintf(w, "Sends ran behind the capture's schedule by %.1f ms (median), %.1f ms at most.\n", s.LateMedianMs, s.LateMaxMs)
}

func fmtIf(ok bool, v float64, dec int) string {
	if !ok {
		return ""
	}
	return fmtNum(v, dec)
}

// samples is a distribution's sample count, "0" without one.
func samples(d *result.Dist) string {
	if d == nil {
		return "0"
	}
	return strconv.FormatInt(d.N, 10)
}

// statusSuffix is " 500" after an outcome, nothing without a status.
func statusSuffix(code int) string {
	if code == 0 {
		return ""
	}
	return " " + strconv.Itoa(code)
}
