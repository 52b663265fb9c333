package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/traffic"
)

// capture is a small proxy capture: two models, answered, refused and
// cancelled requests.
func capture() []record.Record {
	stream := func(id, model string, sent time.Duration, n int) record.Record {
		r := record.Record{ID: id, Model: model, Sent: sent, Stream: true, API: record.Chat, Outcome: record.OK,
			PromptTokens: 100, Wall: time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC).Add(sent)}
		for i := range n {
			r.AddEvent(sent+50*time.Millisecond+time.Duration(i)*10*time.Millisecond, 1)
		}
		r.End = sent + 50*time.Millisecond + time.Duration(n)*10*time.Millisecond
		r.CompletionTokens = n
		return r
	}
	recs := []record.Record{stream("a", "qwen", 0, 20), stream("b", "qwen", 100*time.Millisecond, 30), stream("c", "llama", 200*time.Millisecond, 10)}
	recs = append(recs, record.Record{ID: "d", Model: "nope", Sent: 300 * time.Millisecond, End: 301 * time.Millisecond,
		Outcome: record.HTTPError, Status: 404, Blame: record.BlameClient, Stream: true})
	c := stream("e", "qwen", 400*time.Millisecond, 5)
	c.Outcome, c.Blame = record.Cancelled, record.BlameClient
	return append(recs, c)
}

// TestRenderTraffic: a capture renders as a traffic summary in every
// format: by model and outcome (whose fault, HTTP status), tokens per
// second, and percentiles with sample counts.
func TestRenderTraffic(t *testing.T) {
	s := traffic.Summarize(capture(), nil)
	if s.Requests != 5 || s.OK != 3 || s.Failed != 1 || s.Cancelled != 1 || len(s.Models) != 3 {
		t.Fatalf("summary %+v", s)
	}
	for _, format := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := RenderTraffic(&buf, s, format, "cap.jsonl"); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{"cap.jsonl", "qwen", "llama", "nope", "http_error", "client", "404", "TTFT",
			"Time between tokens", "End to end", "p99", "Output tok/s", "3 models", "5 requests"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q:\n%s", format, want, out)
			}
		}
		if format == "text" {
			for i, l := range strings.Split(out, "\n") {
				if runeLen(l) > textWidth {
					t.Errorf("text line %d is %d columns", i+1, runeLen(l))
				}
			}
		}
	}
	var buf bytes.Buffer
	if err := RenderTraffic(&buf, s, "csv", "cap.jsonl"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 5 || rows[0][0] != "model" || rows[4][0] != "all" {
		t.Fatalf("CSV: %v %v", err, rows)
	}
	buf.Reset()
	if err := RenderTraffic(&buf, s, "json", "cap.jsonl"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Requests int `json:"requests"`
		TTFT     struct {
			N   int     `json:"n"`
			P50 float64 `json:"p50"`
		} `json:"ttft_ms"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || doc.Requests != 5 || doc.TTFT.N != 4 || doc.TTFT.P50 < 49 || doc.TTFT.P50 > 51 {
		t.Errorf("JSON: %v %+v", err, doc)
	}
	if err := RenderTraffic(&buf, s, "pdf", "x"); err == nil {
		t.Error("unknown format accepted")
	}
}
