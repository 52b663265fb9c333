package testwindow

import (
	"testing"
	"time"
)

// TestEnough: a window that holds enough runs once; one that holds too
// few runs again with a window sized from the rate measured, until it
// holds enough or reaches the most allowed.
func TestEnough(t *testing.T) {
	for _, tc := range []struct {
		name    string
		perSec  float64 // what the "machine" gets done
		want    int
		w, most time.Duration
		windows []time.Duration
	}{
		{"enough at once", 10, 5, time.Second, 10 * time.Second, []time.Duration{time.Second}},
		{"short: sized from the rate", 5, 8, time.Second, 10 * time.Second, []time.Duration{time.Second, 2400 * time.Millisecond}},
		{"far short: grows by the shortfall", 1, 8, time.Second, 60 * time.Second, []time.Duration{time.Second, 12 * time.Second}},
		{"nothing: doubles", 0, 1, time.Second, 3 * time.Second, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"capped", 1, 100, time.Second, 5 * time.Second, []time.Duration{time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran []time.Duration
			last := Enough(t, tc.w, tc.most, func(w time.Duration) (int, int) {
				ran = append(ran, w)
				return int(tc.perSec * w.Seconds()), tc.want
			})
			if len(ran) != len(tc.windows) || last != ran[len(ran)-1] {
				t.Fatalf("windows %v, last %v; want %v", ran, last, tc.windows)
			}
			for i := range ran {
				if ran[i] != tc.windows[i] {
					t.Fatalf("windows %v; want %v", ran, tc.windows)
				}
			}
		})
	}
}
