package matrix

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestUnannouncedEventCounts (METHOD §2): an SGLang-shaped fake sending 4
// tokens an event without per-event counts (as SGLang before PR #12241
// did) leaves the requests cut at the window's close counted one token an
// event: the cell is flagged, with a note, and its scaled tok/s agrees
// with the tokens the fake wrote (its ledger) where the measured one is
// short. With per-event counts, nothing is flagged.
func TestUnannouncedEventCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("two 3 s windows")
	}
	for _, counts := range []bool{false, true} {
		m := fixtures.DefaultModel()
		m.Flavor = fixtures.FlavorSGLang
		m.Name = "sglang-spec"
		m.FirstEventDelay = 20 * time.Millisecond
		m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 5*time.Millisecond, 0, 0
		m.TokensPerEvent = 4
		m.NoEventCounts = !counts
		eng := fixtures.StartTest(t, m)
		var run CellRun
		res, err := Run(context.Background(), Config{
			Target: replay.Target{BaseURL: eng.URL()},
			// 160 tokens at 20 ms an event of 4: about 0.8 s a request,
			// so a 3 s window has requests completed and cut.
			Scenario: scenarios.Scenario{Name: "counts", Contexts: []int{0}, Concurrency: []int{4},
				Window: 3 * time.Second, MaxOutput: 160},
			OnCell: func(c CellRun) { run = c },
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the fake finishes the ledger entries of cancelled streams
		c := res.Cell(0, 4)
		if c == nil || c.Status != result.Valid || c.Completed == 0 {
			t.Fatalf("counts %v: cell %+v", counts, c)
		}
		truth := ledgerTruth(t, eng, run)
		u := c.Unannounced
		note := strings.Join(res.Notes, "\n")
		t.Logf("per-event counts %v: %.1f tok/s, ledger %.1f, unannounced %+v", counts, c.TotalTokPerSec, truth.tokS, u)
		if counts {
			if u != nil || strings.Contains(note, "announced no per-event count") {
				t.Errorf("with per-event counts the cell is flagged: %+v, %q", u, note)
			}
			continue
		}
		if u == nil || math.Abs(u.TokensPerEvent-4) > 0.2 || !strings.Contains(note, "announced no per-event count") {
			t.Fatalf("without per-event counts the cell is not flagged: %+v, notes %q", u, note)
		}
		// Short by about (k − 1) tokens for each counted one (how many
		// depends on where the close fell in the cut requests).
		secs := run.Window.Len().Seconds()
		if short := (u.TokensPerEvent - 1) * float64(u.OneEachTokens) / secs; truth.tokS-c.TotalTokPerSec < 0.5*short {
			t.Errorf("measured %.1f tok/s, the ledger %.1f: the cut requests' tokens should be short by about %.1f", c.TotalTokPerSec, truth.tokS, short)
		}
		if math.Abs(u.ScaledTokPerSec-truth.tokS)/truth.tokS > 0.05 {
			t.Errorf("scaled %.1f tok/s, the ledger %.1f: more than 5%% apart", u.ScaledTokPerSec, truth.tokS)
		}
	}
}
