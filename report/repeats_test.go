package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"html"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/result"
)

// withRepeats gives loadRun's run prefill rows of 3 repeats each at these
// tok/s per repeat (0: a repeat that failed), 8,192 tokens a prompt.
func withRepeats(t *testing.T, rows map[int][]float64) *result.Result {
	t.Helper()
	r := loadRun(t)
	r.Settings.PrefillRepeats = 3
	r.Prefill = nil
	r.Settings.PrefillAt = nil
	for _, c := range []int{8192, 16384, 32768} {
		tps, ok := rows[c]
		if !ok {
			continue
		}
		p := result.Prefill{Context: c, Repeats: 3}
		for _, v := range tps {
			e := result.PrefillRepeat{PromptTokens: c}
			if v > 0 {
				e.TokPerSec, e.TTFTms = v, float64(c)/v*1000
			} else {
				e.Error = "http_error (HTTP 500): boom"
			}
			p.Each = append(p.Each, e)
		}
		cell.SummarizePrefill(&p)
		r.Prefill = append(r.Prefill, p)
		r.Settings.PrefillAt = append(r.Settings.PrefillAt, c)
	}
	return r
}

// A run's prefill rows show their median, spread and n of repeats in every
// format; a row with a failed repeat says so; a failed row is counted.
func TestPrefillRepeatsEveryFormat(t *testing.T) {
	r := withRepeats(t, map[int][]float64{8192: {9918, 9801, 10020}, 16384: {9100, 0, 9300}, 32768: {0, 0, 0}})
	wants := map[Format][]string{
		"text": {"spread", "9,801–10,020", "3 of 3", "2 of 3", "0 of 3", "9,200", "median of those measured", "1 repeat of 3 gave no figure"},
		"md":   {"Spread (min–max)", "9,801–10,020", "3 of 3", "2 of 3", "0 of 3", "median of those measured", "1 repeat of 3 gave no figure"},
		"html": {"spread", "9,801–10,020", "3 of 3", "2 of 3", "0 of 3", "median of those measured"},
		"json": {`"repeats": 3`, `"measured": 2`, `"tok_s_min": 9801`, `"tok_s_max": 10020`, `"each"`, `"prefill_repeats": 3`},
	}
	for f, want := range wants {
		var buf bytes.Buffer
		if err := Render(&buf, r, f); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(html.UnescapeString(buf.String())), " ") // wrapped lines joined
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s report lacks %q", f, w)
			}
		}
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range csvRepeatColumns {
		if _, ok := col[h]; !ok {
			t.Fatalf("CSV head lacks %s: %v", h, rows[0])
		}
	}
	got := map[string][]string{}
	for _, row := range rows[1:] {
		if len(row) != len(rows[0]) {
			t.Fatalf("row of %d fields under a head of %d: %v", len(row), len(rows[0]), row)
		}
		if row[0] == "prefill" {
			got[row[1]] = []string{row[col["total_tok_s"]], row[col["prefill_repeats"]], row[col["prefill_measured"]], row[col["prefill_tok_s_min"]], row[col["prefill_tok_s_max"]]}
		}
	}
	for ctx, want := range map[string][]string{"8192": {"9918", "3", "3", "9801", "10020"}, "16384": {"9200", "3", "2", "9100", "9300"}, "32768": {"", "3", "0", "", ""}} {
		if strings.Join(got[ctx], ",") != strings.Join(want, ",") {
			t.Errorf("CSV prefill %s: %v, want %v", ctx, got[ctx], want)
		}
	}
}

// A run from before repeats (the seed pages) shows its prefill as before:
// no spread column, no repeats note.
func TestPrefillWithoutRepeatsUnchanged(t *testing.T) {
	r := loadRun(t)
	for _, f := range []Format{"text", "md", "html", "csv"} {
		var buf bytes.Buffer
		if err := Render(&buf, r, f); err != nil {
			t.Fatal(err)
		}
		for _, no := range []string{"spread", "Spread", "prefill_repeats", "median of those measured"} {
			if strings.Contains(buf.String(), no) {
				t.Errorf("%s report of a run without repeats shows %q", f, no)
			}
		}
	}
}

// A comparison judges a prefill change against the rows' repeats: 6%
// slower with repeats within 1% is a change; a rerun within 1% is noise (~);
// in text, Markdown, HTML, CSV and JSON.
func TestComparePrefillRepeats(t *testing.T) {
	a := withRepeats(t, map[int][]float64{8192: {10000, 10080, 9930}, 16384: {9000, 9050, 8960}})
	b := withRepeats(t, map[int][]float64{8192: {9400, 9460, 9350}, 16384: {9040, 8990, 9020}})
	for _, f := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, f); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(html.UnescapeString(buf.String())), " ") // wrapped lines joined
		for _, w := range []string{"×0.94", "×1.00~", "10,000 (9,930–10,080, 3 of 3)", "Prefill: 1 of 2 rows' prompt tok/s changed beyond their repeats' noise", "within the rows' repeats' noise"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s comparison lacks %q", f, w)
			}
		}
		if strings.Contains(out, "×0.94~") {
			t.Errorf("%s comparison marks the 6%% prefill change as noise", f)
		}
	}
	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "json"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Prefill []struct {
			Context      int         `json:"context"`
			MeasuredA    int         `json:"measured_a"`
			RepeatsB     int         `json:"repeats_b"`
			TokSNoise    *bool       `json:"tok_s_noise"`
			TokSInterval *[2]float64 `json:"tok_s_interval"`
		} `json:"prefill"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Prefill) != 2 {
		t.Fatalf("JSON comparison prefill %+v, want 2 rows", doc.Prefill)
	}
	for _, p := range doc.Prefill {
		wantNoise := p.Context == 16384
		if p.MeasuredA != 3 || p.RepeatsB != 3 || p.TokSNoise == nil || *p.TokSNoise != wantNoise || p.TokSInterval == nil {
			t.Errorf("JSON prefill %d: %+v; want 3 repeats, noise %v, an interval", p.Context, p, wantNoise)
		}
	}
	buf.Reset()
	if err := Compare(&buf, a, b, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, row := range rows[1:] {
		if row[0] == "prefill" {
			seen++
			want := map[string]string{"8192": "false", "16384": "true"}[row[1]]
			if row[17] != want {
				t.Errorf("CSV prefill %s: tok_s_noise %q, want %q", row[1], row[17], want)
			}
		}
	}
	if seen != 2 {
		t.Errorf("CSV comparison has %d prefill rows, want 2", seen)
	}
}
