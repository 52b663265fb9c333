package cell

import (
	"math"
	"testing"

	"github.com/tokentap/tokentap/record"
)

func TestMeanSeqTokens(t *testing.T) {
	w := Window{Start: msd(1000), End: msd(2000)}
	// Prompt 100: events at 900 (before), 1100, 1200 (3 tokens), 2100 (after).
	a := record.Record{PromptTokens: 100}
	a.AddEvent(msd(900), 1)
	a.AddEvent(msd(1100), 1)
	a.AddEvent(msd(1200), 3)
	a.AddEvent(msd(2100), 1)
	// No prompt count: the fallback of 1000 stands in; one event at 1500.
	b := record.Record{}
	b.AddEvent(msd(1500), 1)
	// In the window: a's tokens at positions 101, 102, 103, 104; b's at 1000.
	want := (101.0 + 102 + 103 + 104 + 1000) / 5
	if got := MeanSeqTokens([]record.Record{a, b}, w, 1000); math.Abs(got-want) > 1e-9 {
		t.Errorf("MeanSeqTokens = %v, want %v", got, want)
	}
	if got := MeanSeqTokens([]record.Record{a}, Window{Start: msd(3000), End: msd(4000)}, 0); got != 0 {
		t.Errorf("no token in the window: %v", got)
	}
}
