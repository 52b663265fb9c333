package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestColdCellsAreNotCalledWarm: a run whose every decode cell's TTFT is
// cold (a dataset's prompts, sent as given) is not labelled warm anywhere
// (a new user found "TTFT, warm" and the warm-cache paragraph over such a
// run); a run with a warm cell keeps the seeds' labels.
func TestColdCellsAreNotCalledWarm(t *testing.T) {
	for _, cold := range []bool{true, false} {
		r := syntheticRun()
		r.Prefill = nil
		for i := range r.Decode {
			if r.Decode[i].ShowsFigures() && cold {
				r.Decode[i].TTFTKind = result.TTFTCold
			}
		}
		for _, f := range []Format{Text, Markdown, HTML} {
			var b bytes.Buffer
			if err := Render(&b, r, f); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			warm := strings.Contains(out, "TTFT, warm") || strings.Contains(out, "warm prefix") || strings.Contains(out, "warms the server")
			if cold && (warm || !strings.Contains(out, "sent as given")) {
				t.Errorf("%s, every cell cold: a warm label, or no word that the prompts were sent as given:\n%s", f, out)
			}
			if !cold && !warm {
				t.Errorf("%s, warm cells: the warm labels are gone", f)
			}
		}
	}
}
