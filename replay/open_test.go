package replay

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestPoissonArrivals: the count is the rate asked for, the times fall in
// the window in order, the same seed gives the same schedule, and the gaps
// look like a Poisson process's: exponential, their spread as large as
// their mean (coefficient of variation about 1, where evenly spaced
// arrivals have 0).
func TestPoissonArrivals(t *testing.T) {
	w := 100 * time.Second
	at := PoissonArrivals(20, w, 7)
	if len(at) != 2000 || !slices.IsSorted(at) || at[0] < 0 || at[len(at)-1] >= w {
		t.Fatalf("%d arrivals, sorted %v, from %v to %v", len(at), slices.IsSorted(at), at[0], at[len(at)-1])
	}
	if !slices.Equal(at, PoissonArrivals(20, w, 7)) || slices.Equal(at, PoissonArrivals(20, w, 8)) {
		t.Error("the schedule does not follow its seed")
	}
	var sum, sq float64
	for i := 1; i < len(at); i++ {
		g := (at[i] - at[i-1]).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(at) - 1)
	mean := sum / n
	cv := math.Sqrt(sq/n-mean*mean) / mean
	if mean < 0.045 || mean > 0.055 || cv < 0.9 || cv > 1.1 {
		t.Errorf("gaps: mean %.4f s (want 0.05), coefficient of variation %.2f (want about 1)", mean, cv)
	}
	if PoissonArrivals(0.1, time.Second, 1) != nil {
		t.Error("a rate that rounds to no request in the window gave arrivals")
	}
}

// TestRunOpen: requests go out at their times whatever is still running,
// what runs past the window gets its grace and is then cancelled, and
// every record is kept. The grace is far longer than a short request
// takes (about 30 ms; a loaded machine took more than 450 ms) and far
// shorter than the long one's 20 s, so which ones end and which one is
// cancelled holds however slow the machine.
func TestRunOpen(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	short, long := body(t, tg, "hi", 4), body(t, tg, "hi", 5000) // ~20 s of tokens at 4 ms
	at := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}
	const window, grace = 300 * time.Millisecond, 3 * time.Second
	clock := record.NewClock()
	run := Run(context.Background(), Open{Options: Options{Target: tg, Clock: clock, MaxTokens: 4, Stream: true, Tag: "open", Window: window}, Bodies: []Body{short, long, short, short}, At: at, Grace: grace})
	if len(run.Records) != 4 {
		t.Fatalf("%d records", len(run.Records))
	}
	for i, r := range run.Records {
		if r.Sent < run.Start+at[i] {
			t.Errorf("request %d sent at +%v, before its time +%v", i, r.Sent-run.Start, at[i])
		}
		if !strings.HasPrefix(r.ID, "open#") {
			t.Errorf("id %q", r.ID)
		}
	}
	if r := run.Records[1]; r.Outcome != record.Cancelled || r.End-run.Start < window+grace-50*time.Millisecond {
		t.Errorf("the long request: %s ending at +%v; want cancelled after window + grace (%v)", r.Outcome, r.End-run.Start, window+grace)
	}
	for _, i := range []int{0, 2, 3} {
		if r := run.Records[i]; r.Outcome != record.OK || r.ArrivedTokens() != 4 {
			t.Errorf("request %d: %s with %d tokens", i, r.Outcome, r.ArrivedTokens())
		}
	}
	if run.End-run.Start != window || run.Failed {
		t.Errorf("window %v, failed %v", run.End-run.Start, run.Failed)
	}
	// Requests that all end early leave the window its full length.
	run = Run(context.Background(), Open{Options: Options{Target: tg, Clock: clock, MaxTokens: 4, Stream: true, Window: 400 * time.Millisecond}, Bodies: []Body{short}, At: at[:1], Grace: time.Second})
	if len(run.Records) != 1 || run.End-run.Start != 400*time.Millisecond || clock.Now()-run.Start < 400*time.Millisecond {
		t.Errorf("a window whose one request ended early was measured for %v", run.End-run.Start)
	}
}

// TestRunOpenLastInstant: requests due in the window's last nanosecond
// (where bursty gaps often put one) are sent, though the timer cannot wake
// before the window's end, and the window stretches to their sends, so
// the loop's window holds every record; none is left unsent, unless the
// machine stalled the loop past the window's end by more than
// SendLateTolerance, which the result then measures (UnsentLate).
func TestRunOpenLastInstant(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	short := body(t, tg, "hi", 4)
	const window = 200 * time.Millisecond
	at := []time.Duration{0, window / 2, window - 1, window - 1, window} // the last is due at the end: never sent
	run := Run(context.Background(), Open{Options: Options{Target: tg, Clock: record.NewClock(), MaxTokens: 4, Stream: true, Window: window},
		Bodies: []Body{short, short, short, short, short}, At: at, Grace: time.Second})
	if tol := SendLateTolerance(window); run.Unsent > 0 && run.UnsentLate > tol {
		t.Logf("%d unsent: the loop woke %v late, more than the %v allowed (a busy machine)", run.Unsent, run.UnsentLate, tol)
	} else if len(run.Records) != 4 || run.Unsent != 0 || run.UnsentLate != 0 {
		t.Fatalf("%d records, %d unsent (the loop woke %v late); want the 4 due in the window sent", len(run.Records), run.Unsent, run.UnsentLate)
	}
	if len(run.Records)+run.Unsent != 4 {
		t.Fatalf("%d records and %d unsent of the 4 due in the window", len(run.Records), run.Unsent)
	}
	for i, r := range run.Records {
		if r.Outcome != record.OK || r.Sent < run.Start || r.Sent >= run.End {
			t.Errorf("request %d: %s, sent at +%v, outside the window [0, %v)", i, r.Outcome, r.Sent-run.Start, run.End-run.Start)
		}
	}
	if run.End-run.Start < window {
		t.Errorf("window %v, shorter than the %v asked for", run.End-run.Start, window)
	}
}
