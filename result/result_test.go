package result

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
)

func sample() *Result {
	h := histo.New()
	h.RecordTTFT(44 * time.Millisecond)
	h.RecordTBT(6200*time.Microsecond, 3)
	return &Result{
		Schema:   SchemaVersion,
		Tool:     Tool{Name: "tokentap", Version: "v1"},
		Started:  time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		Ended:    time.Date(2026, 11, 30, 10, 25, 0, 0, time.UTC),
		Settings: Settings{DecodeTest: "Fixed duration", WindowSeconds: 30, MaxOutput: 8192, Contexts: []int{0}, Concurrency: []int{1, 2}},
		Prefill:  []Prefill{{Context: 8192, PromptTokens: 8190, Status: Valid, TTFTms: 828, TokPerSec: 9918, Requests: 1}},
		Decode: []Cell{
			{Context: 0, Concurrency: 1, Status: Valid, Measured: true, TotalTokPerSec: 156.2, TTFTms: 44, TBTms: 6.2, MaxWaiting: 0, Histograms: h},
			{Context: 0, Concurrency: 2, Status: OverCapacity, MaxWaiting: -1},
		},
	}
}

func TestRoundTripKeepsFiguresAndHistograms(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Cell(0, 1)
	if c == nil || c.TotalTokPerSec != 156.2 || c.Status != Valid {
		t.Fatalf("cell (0,1) lost: %+v", c)
	}
	if d, ok := histo.Latency(c.Histograms.TBT, 0.5); !ok || d < 6190*time.Microsecond || d > 6210*time.Microsecond {
		t.Fatalf("TBT median after round trip %v, want 6.2 ms", d)
	}
	if c.Histograms.TBT.TotalCount() != 3 {
		t.Fatalf("TBT count %d, want 3", c.Histograms.TBT.TotalCount())
	}
	if got.Cell(0, 2).Status != OverCapacity || got.Cell(0, 4) != nil {
		t.Fatal("Cell lookup wrong")
	}
}

func TestReadRefuses(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"newer schema", `{"schema": 99}`, "this tokentap reads 1 to"},
		{"no schema", `{"decode": []}`, `it has no "schema" field`},
		{"empty object", `{}`, `it has no "schema" field`},
		{"not json", `<html>`, "not a tokentap result document"},
		// A schema alone rendered as a run of an "Unknown model", exit 0.
		{"schema alone", `{"schema":1}`, `it has no "settings" field`},
		{"no cells", `{"schema":1,"settings":{}}`, `it has no "decode" field`},
		{"null cells", `{"schema":1,"settings":{},"decode":null}`, `it has no "decode" field`},
	}
	for _, tt := range tests {
		_, err := Read(strings.NewReader(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "schema 0") {
			t.Errorf("%s: error %v, want it to say %q", tt.name, err, tt.want)
		}
	}
}

func TestWriteReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	var buf bytes.Buffer
	if err := sample().Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err != nil {
		t.Fatalf("written document does not read back: %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("reading a missing file succeeded")
	}
}

func TestStatusLabels(t *testing.T) {
	for s, want := range map[Status]string{OverCapacity: "Over capacity", Failed: "Failed", RequestsQueued: "Requests queued", Valid: "Valid", NotRun: "Not run"} {
		if s.Label() != want {
			t.Errorf("%s label %q, want %q", s, s.Label(), want)
		}
	}
}

// TestUnknownStatusRefused: a status the schema does not know is refused
// on reading, naming it (report rendered it as it stood).
func TestUnknownStatusRefused(t *testing.T) {
	doc := `{"schema":1,"settings":{},"decode":[{"context":0,"concurrency":1,"status":"splendid"}]}`
	_, err := Read(strings.NewReader(doc))
	if err == nil || !strings.Contains(err.Error(), `status "splendid" is none of over_capacity`) {
		t.Fatalf("err %v", err)
	}
	if _, err := Read(strings.NewReader(strings.Replace(doc, "splendid", "valid", 1))); err != nil {
		t.Fatalf("a valid status: %v", err)
	}
}

// TestCellShowsFigures: a cell shows its figures when its status does and
// a token arrived in its window; a queued cell whose window saw none (the
// engine still prefilling what it ran) shows none, not 0 tok/s and 0 ms.
func TestCellShowsFigures(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Cell
		want bool
	}{
		{"valid with tokens", Cell{Status: Valid, Measured: true, OutputTokens: 10}, true},
		{"queued with tokens", Cell{Status: RequestsQueued, Measured: true, OutputTokens: 10}, true},
		{"queued, no token in the window", Cell{Status: RequestsQueued, Measured: true}, false},
		{"failed with tokens", Cell{Status: Failed, Measured: true, OutputTokens: 10}, false},
		{"over capacity, not run", Cell{Status: OverCapacity}, false},
		{"valid, figures from elsewhere (not measured here)", Cell{Status: Valid}, true},
	} {
		if got := tc.c.ShowsFigures(); got != tc.want {
			t.Errorf("%s: ShowsFigures() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
