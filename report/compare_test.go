package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// fasterRun is the synthetic run made 10% faster (higher tok/s, lower
// latency) with two cells changing status: 32K×2 stops queueing and 64K×1
// no longer fails.
func fasterRun(t *testing.T) *result.Result {
	t.Helper()
	b := loadRun(t)
	b.Engine.Version = "0.2.0"
	for i := range b.Decode {
		c := &b.Decode[i]
		if c.Measured {
			c.TotalTokPerSec *= 1.1
			c.TTFTms /= 1.1
			c.TBTms /= 1.1
		}
		if c.Status == result.RequestsQueued {
			c.Status = result.Valid
		}
	}
	f := b.Cell(65536, 1)
	f.Status, f.Measured, f.TotalTokPerSec, f.TTFTms, f.TBTms = result.Valid, true, 30, 400, 33
	for i := range b.Prefill {
		b.Prefill[i].TokPerSec *= 1.1
	}
	return b
}

func TestCompare(t *testing.T) {
	a, b := loadRun(t), fasterRun(t)
	for _, format := range []string{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := CompareLabeled(&buf, a, b, "before.json", "after.json", format); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{"×1.10", "⚠", "before.json", "after.json", "0.1.0", "0.2.0", "2 of 16 cells changed status"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s comparison lacks %q", format, want)
			}
		}
		if format != "html" && strings.Count(out, "⚠") < 3 { // two cells + the note
			t.Errorf("%s: want a ⚠ mark on each changed cell, got %d marks", format, strings.Count(out, "⚠"))
		}
	}

	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(a.Prefill) + len(a.Decode); len(rows) != want {
		t.Fatalf("%d CSV rows, want %d", len(rows), want)
	}
	changed := 0
	for _, r := range rows[1:] {
		if r[5] == "true" {
			changed++
		}
		if r[3] == "valid" && r[4] == "valid" && r[0] == "decode" && r[8] != "1.1000" {
			t.Errorf("cell %s×%s tok/s ratio %s, want 1.1000", r[1], r[2], r[8])
		}
	}
	if changed != 2 {
		t.Errorf("%d changed cells in CSV, want 2", changed)
	}

	buf.Reset()
	if err := Compare(&buf, a, b, "json"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cells []jsonPair `json:"cells"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.Cells) != len(a.Decode) {
		t.Fatalf("JSON comparison: %v, %d cells", err, len(doc.Cells))
	}

	if err := Compare(&buf, a, b, "pdf"); err == nil || !strings.Contains(err.Error(), "unknown report format") {
		t.Errorf("unknown format: err = %v", err)
	}
	if err := Compare(&buf, a, nil, "text"); err == nil {
		t.Error("comparing with nil should fail")
	}
}

// TestCompareSame: a run against itself changes nothing, every ratio is 1.
func TestCompareSame(t *testing.T) {
	a := loadSeed(t, "002")
	var buf bytes.Buffer
	if err := Compare(&buf, a, a, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "⚠V") || !strings.Contains(out, "0 of 48 cells changed status") || !strings.Contains(out, "nothing: same model") {
		t.Errorf("self-comparison:\n%s", out)
	}
	if strings.Contains(out, "×0.") || strings.Contains(out, "×1.01") {
		t.Error("self-comparison has a ratio other than ×1.00")
	}
}

// TestCompareGolden pins the comparison layouts of two different seed runs.
func TestCompareGolden(t *testing.T) {
	a, b := loadSeed(t, "002"), loadSeed(t, "003")
	for _, f := range []struct{ format, ext string }{{"text", "txt"}, {"md", "md"}, {"csv", "csv"}} {
		var buf bytes.Buffer
		if err := CompareLabeled(&buf, a, b, "seed-002.json", "seed-003.json", f.format); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "compare-002-003."+f.ext, buf.Bytes())
		if f.format == "text" {
			for i, l := range strings.Split(buf.String(), "\n") {
				if runeLen(l) > textWidth {
					t.Errorf("comparison line %d is %d columns: %q", i+1, runeLen(l), l)
				}
			}
		}
	}
}
