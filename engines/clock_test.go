package engines

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// skewedEngine answers /v1/models with a Date header from a clock skew
// ahead of this machine's (negative: behind). A server that refreshes its
// Date once a second at its own phase (uvicorn, fasthttp) looks the same:
// a clock behind by its lag.
func skewedEngine(t *testing.T, skew time.Duration, date bool) *Info {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if date {
			w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		} else {
			w.Header()["Date"] = nil // net/http adds one unless told not to
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
	}))
	t.Cleanup(srv.Close)
	return &Info{c: &client{base: srv.URL, shown: srv.URL, hc: srv.Client()}}
}

// TestClockOffset: the offset read from the Date header's ticks is the
// engine's skew within the uncertainty it states, and that uncertainty is
// about a round trip on loopback, far below the header's one second.
func TestClockOffset(t *testing.T) {
	if testing.Short() {
		t.Skip("reads clocks for seconds")
	}
	for _, skew := range []time.Duration{1234 * time.Millisecond, -3*time.Second - 7*time.Millisecond} {
		in := skewedEngine(t, skew, true)
		got, err := in.ClockOffset(context.Background())
		if err != nil {
			t.Fatalf("skew %s: %v", skew, err)
		}
		// This machine is behind the engine by skew: its offset is -skew.
		diff := got.Offset + skew
		// Generous under -race and a busy machine: a stated uncertainty
		// below 50 ms still beats the header's 1 s by far.
		if math.Abs(float64(diff)) > float64(got.Uncertainty)+float64(time.Millisecond) || got.Uncertainty > 50*time.Millisecond {
			t.Errorf("skew %s: offset %s ± %s, off by %s", skew, got.Offset, got.Uncertainty, diff)
		}
		if !strings.Contains(got.Source, "Date") {
			t.Errorf("source %q", got.Source)
		}
	}
}

func TestClockOffsetWithoutDate(t *testing.T) {
	in := skewedEngine(t, 0, false)
	if _, err := in.ClockOffset(context.Background()); err == nil || !strings.Contains(err.Error(), "no Date header") {
		t.Errorf("an engine without a Date header: %v", err)
	}
	if _, err := (&Info{}).ClockOffset(context.Background()); err == nil {
		t.Error("an unprobed engine's clock was read")
	}
}
