package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestLateWindowShown: a cell a shard opened late (a merged sharded run)
// shows its figures, marked, with the footnote that says what it means.
func TestLateWindowShown(t *testing.T) {
	r := loadRun(t)
	var late *result.Cell
	for i := range r.Decode {
		if r.Decode[i].Status == result.Valid {
			late = &r.Decode[i]
			break
		}
	}
	late.Status = result.LateWindow
	late.Reason = "shard 1 opened the window 2.1s late (more than 300ms): fewer than N requests ran at its start; give a longer --gap"
	tok := fmtHeadline(late.TotalTokPerSec)
	for _, format := range []Format{"text", "md", "html"} {
		var b bytes.Buffer
		if err := Render(&b, r, format); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(b.String()), " ") // text wraps its footnotes
		for _, want := range []string{"Late window: one of the load generators of a sharded run opened this measurement late", tok} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q", format, want)
			}
		}
		if format == "text" && !strings.Contains(out, "late = Late window:") {
			t.Error("the text grid's mark is not explained")
		}
		if format != "text" && !strings.Contains(out, "Late window<") && !strings.Contains(out, "<br>Late window<br>") {
			t.Errorf("%s report does not mark the late cell", format)
		}
	}
}
