package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
)

// fewSamples is a run of one cell whose TTFT has 2 samples, TBT 400 and
// end to end 2: the figures a short N=1 cell has.
func fewSamples() *result.Result {
	s := histo.New()
	s.RecordTTFT(30 * time.Millisecond)
	s.RecordTTFT(40 * time.Millisecond)
	for i := range 400 {
		s.RecordTBT(time.Duration(6000+i)*time.Microsecond, 1)
	}
	s.RecordE2E(2 * time.Second)
	s.RecordE2E(3 * time.Second)
	return &result.Result{Schema: 1, Model: result.Model{Name: "M"},
		Settings: result.Settings{Contexts: []int{0}, Concurrency: []int{1}, MaxOutput: 512},
		Decode: []result.Cell{{Context: 0, Concurrency: 1, Status: result.Valid, Measured: true, TotalTokPerSec: 150,
			PerRequestTokPerSec: 160, TTFTms: 30, TBTms: 6.2, AvgActive: 1, Completed: 2, OutputTokens: 300,
			MeasuredForSeconds: 2, Histograms: s}}}
}

// TestPercentilesInEveryFormat: text and Markdown show TTFT, time between
// tokens and end to end at the percentiles asked for, with sample counts,
// a mark where the samples are too few; CSV has them as columns; the JSON
// carries them as numbers jq can read, beside the histograms.
func TestPercentilesInEveryFormat(t *testing.T) {
	r := fewSamples()
	o := Options{Percentiles: []float64{50, 95, 99.9}}
	render := func(format Format) string {
		var buf bytes.Buffer
		if err := RenderWith(&buf, r, format, o); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	for _, format := range []Format{"text", "md"} {
		out := render(format)
		for _, want := range []string{"Latency percentiles", "p50", "p95", "p99.9", "TTFT, warm prefix", "Time between tokens",
			"End to end", "400", "6.2 ms", "40 ms" + lowMark, "fewer samples than the percentile needs"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", format, want)
			}
		}
		if strings.Contains(out, "6.2 ms"+lowMark) || strings.Contains(out, "| p90 |") || strings.Contains(out, " p90 ") {
			t.Errorf("%s: a percentile with enough samples is marked, or one not asked for is shown", format)
		}
	}

	rows, err := csv.NewReader(strings.NewReader(render("csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	dec := rows[1]
	for name, want := range map[string]string{"ttft_n": "2", "tbt_n": "400", "e2e_n": "2", "ttft_p50_ms": "30.015",
		"tbt_p95_ms": "6.379", "low_count": "ttft_p95 ttft_p99.9 tbt_p99.9 e2e_p95 e2e_p99.9", "ttft_kind": "warm_prefix"} {
		i, ok := col[name]
		if !ok || dec[i] != want {
			t.Errorf("CSV %s = %q (present %v), want %q", name, dec[min(i, len(dec)-1)], ok, want)
		}
	}

	var doc struct {
		Decode []struct {
			Percentiles map[string]map[string]any `json:"percentiles"`
		} `json:"decode"`
	}
	js := render("json")
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	ttft := doc.Decode[0].Percentiles["ttft_ms"]
	if ttft["n"] != float64(2) || ttft["p50"] == nil || ttft["p99.9"] == nil {
		t.Errorf("JSON percentiles %v: want n and p50 … p99.9 as numbers", doc.Decode[0].Percentiles)
	}
	if _, isNum := ttft["p95"].(float64); !isNum {
		t.Errorf("JSON p95 %v is not a number", ttft["p95"])
	}
	if err := schematest.Validate([]byte(js)); err != nil {
		t.Errorf("the JSON report does not match schema.json: %v", err)
	}
	if r.Decode[0].Percentiles != nil {
		t.Error("rendering changed the document")
	}
}

// TestExplainedFigures: figures that look wrong are explained where they
// show: per request tok/s above total tok/s (N = 1), and no request
// completing because max output outlasts the window.
func TestExplainedFigures(t *testing.T) {
	r := fewSamples()
	var buf bytes.Buffer
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "per request tok/s can exceed total tok/s") {
		t.Error("per request above total is not explained")
	}
	if strings.Contains(buf.String(), "No request completed") {
		t.Error("requests completed, yet the report says none did")
	}
	r.Decode[0].Completed = 0
	r.Decode[0].Histograms.E2E.Reset()
	r.Decode[0].PerRequestTokPerSec = 100
	r.Settings.MaxOutput = 8192
	buf.Reset()
	if err := Render(&buf, r, "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "No request completed inside its window (Completed requests 0): 8,192 output tokens") {
		t.Error("Completed 0 is not explained")
	}
	if strings.Contains(buf.String(), "can exceed total") {
		t.Error("explains per request above total where it is not")
	}
}

// TestStoppedSaidOnce: an interrupted run says so once, whether the note
// came from an old document or the flag; a run an engine error stopped
// does not claim it was interrupted.
func TestStoppedSaidOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		r         result.Result
		want, not string
	}{
		{"interrupted", result.Result{Schema: 1, Interrupted: true}, "The run was interrupted", ""},
		{"old document", result.Result{Schema: 1, Interrupted: true, Notes: []string{"The run was interrupted: cells not reached are marked Not run."}}, "The run was interrupted", ""},
		{"engine error", result.Result{Schema: 1, StoppedEarly: "engine gone"}, "The run stopped early (engine gone)", "interrupted"},
	} {
		var buf bytes.Buffer
		if err := Render(&buf, &tt.r, "text"); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if n := strings.Count(out, "The run "); n != 1 || !strings.Contains(out, tt.want) || (tt.not != "" && strings.Contains(out, tt.not)) {
			t.Errorf("%s: %d notes about stopping:\n%s", tt.name, n, out)
		}
	}
}
