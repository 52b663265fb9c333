package matrix

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestEngineGone: an engine that dies in the middle of a run broke off
// the run (ErrEngineGone, which the CLI exits 1 on), not a cell whose
// requests failed (exit 3): the cells finished before it keep their
// figures, the one it died in is Failed, the rest Not run, and the result
// says why it stopped. The engine dies after the first cell, at each of
// the steps that can hear it gone: a decode cell, and the next row's
// prompts (counted by the engine).
func TestEngineGone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		contexts []int
		failed   [2]int // the cell the engine died in; {-1}: none (it died between rows)
		notRun   [][2]int
	}{
		{"in a cell", []int{0}, [2]int{0, 2}, [][2]int{{0, 4}}},
		{"before a row", []int{0, 1024}, [2]int{-1}, [][2]int{{1024, 1}, {1024, 2}, {1024, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := fixtures.StartTest(t, quickModel())
			sc := scenarios.Scenario{Name: "gone", Contexts: tc.contexts, Concurrency: []int{1, 2, 4}, Window: 300 * time.Millisecond, MaxOutput: 8, API: "chat"}
			cfg := Config{Target: replay.Target{BaseURL: e.URL()}, Scenario: sc}
			last := [2]int{0, 1}
			if tc.failed[0] < 0 {
				last = [2]int{0, 4} // the engine goes with the 0 row done
			}
			cfg.OnCell = func(c CellRun) {
				if c.Cell.Context == last[0] && c.Cell.Concurrency == last[1] {
					e.Close()
				}
			}
			res, err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrEngineGone) || res == nil {
				t.Fatalf("error %v, result %v; want ErrEngineGone with the result so far", err, res != nil)
			}
			// Refused, or a kept-alive connection found closed: either way unreachable.
			if !strings.Contains(res.StoppedEarly, "broke off") || !strings.Contains(res.StoppedEarly, "engine unreachable") {
				t.Errorf("stopped early %q: want why", res.StoppedEarly)
			}
			if c := res.Cell(0, 1); c == nil || c.Status != result.Valid {
				t.Errorf("cell 0 × 1, finished before the engine died: %+v", c)
			}
			if tc.failed[0] >= 0 {
				if c := res.Cell(tc.failed[0], tc.failed[1]); c == nil || c.Status != result.Failed {
					t.Errorf("cell %v, the engine died in it: %+v, want Failed", tc.failed, c)
				}
			}
			for _, k := range tc.notRun {
				if c := res.Cell(k[0], k[1]); c == nil || c.Status != result.NotRun {
					t.Errorf("cell %v, after the engine died: %+v, want Not run", k, c)
				}
			}
		})
	}
}
