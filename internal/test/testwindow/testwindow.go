// Package testwindow is for tests whose property needs a number of
// requests (or events) inside a wall-clock window: a window sized for an
// idle machine holds fewer on a busy one, and the test then failed for
// the machine's speed, not for the property it asserts.
//
// Enough runs such a test's measurement with its window and, while the
// count falls short, again with a window sized from the rate the short
// run measured, so the count is reached on a slow machine too and the
// test asserts its property on the last run, unchanged.
package testwindow

import (
	"testing"
	"time"
)

// Run measures with window w and returns how many it got and how many
// the test wants (for several cells, the cell furthest short).
type Run func(w time.Duration) (got, want int)

// Enough calls run with window w, then, while got < want, with a window
// grown by the measured shortfall (want/got with half as much again for
// margin, at least doubled), up to most. It returns the last window, whose
// run's results the test asserts on (a count still short at most is then
// the test's own failure, reported as it would be). Each retry is logged.
func Enough(tb testing.TB, w, most time.Duration, run Run) time.Duration {
	tb.Helper()
	for {
		got, want := run(w)
		if got >= want || w >= most {
			return w
		}
		grow := 2.0
		if got > 0 {
			grow = max(grow, 1.5*float64(want)/float64(got))
		}
		next := min(time.Duration(float64(w)*grow), most)
		tb.Logf("window %v held %d of the %d wanted (a busy machine): again with %v", w, got, want, next)
		w = next
	}
}
