package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestDatasetRunLabels: a dataset's run has one row of the file's own
// prompts, not "context 0", and its max output applies only to the lines
// without their own max_tokens.
func TestDatasetRunLabels(t *testing.T) {
	r := &result.Result{Schema: result.SchemaVersion, Model: result.Model{Served: "m"},
		Settings: result.Settings{DecodeTest: "6 requests", MaxOutput: 512, Contexts: []int{0}, Concurrency: []int{2}, API: "chat", Requests: 6,
			Dataset: &result.Dataset{Name: "chat.jsonl", Size: 100, SHA256: strings.Repeat("a", 64), Format: "chat", Entries: 40}}}
	r.Decode = []result.Cell{{Context: 0, Concurrency: 2, Status: result.Valid, Measured: true, TotalTokPerSec: 197.1, TTFTms: 33, TBTms: 10, TTFTKind: result.TTFTCold}}
	var buf bytes.Buffer
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	out := oneSpaced(buf.String())
	for _, want := range []string{"Max output 512 tokens, for lines without their own max_tokens", "row: the dataset's prompts", "dataset 197.1",
		"a dataset's prompts (chat.jsonl) × 1 concurrency level (2)", "Decode dataset 2 Valid"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, buf.String())
		}
	}
	if strings.Contains(out, "rows: context") {
		t.Errorf("a dataset's grid says its rows are contexts:\n%s", buf.String())
	}
	for format, want := range map[Format]string{"md": "the row is the dataset's prompts", "html": "the dataset, "} {
		buf.Reset()
		if err := Render(&buf, r, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "rows are context length") {
			t.Errorf("%s: no %q, or rows said to be contexts:\n%s", format, want, buf.String())
		}
	}
	// Two dataset runs compared: the row is the datasets' prompts.
	buf.Reset()
	if err := Compare(&buf, r, r, "text"); err != nil {
		t.Fatal(err)
	}
	if out := oneSpaced(buf.String()); !strings.Contains(out, "the row is the datasets' prompts") || !strings.Contains(out, "dataset ×1.00") {
		t.Errorf("two dataset runs compared:\n%s", buf.String())
	}
	// A ShareGPT entry's output length is its reply's: no max output applies.
	r.Settings.Dataset.Format = "sharegpt"
	buf.Reset()
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Max output") {
		t.Errorf("a ShareGPT run names a max output no entry used:\n%s", buf.String())
	}
	r.Settings.Dataset = nil
	buf.Reset()
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	if out := oneSpaced(buf.String()); !strings.Contains(out, "Max output 512 tokens Scenario") && !strings.Contains(out, "Max output 512 tokens API") || strings.Contains(out, "dataset 197.1") {
		t.Errorf("a synthetic run's labels changed:\n%s", buf.String())
	}
}
