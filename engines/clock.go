package engines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ClockOffset is how far this machine's wall clock is ahead of the
// engine's (negative: behind), as the engine's HTTP Date header tells.
type ClockOffset struct {
	Offset      time.Duration
	Uncertainty time.Duration // ± around Offset
	Source      string        // the endpoint and header it was read from
}

// clockPath is what the clock probe asks: every OpenAI-compatible engine
// answers it from memory.
const clockPath = "/v1/models"

// ClockOffset reads the engine's clock from the Date header of its answers
// (RFC 9110: every origin server with a clock sends one, to the second).
// One second's resolution is too coarse to align load generators, so it
// finds the instant the header's second changes: polling every 25 ms until
// it does brackets that instant to about 25 ms; then, one second later,
// polling back to back around the predicted change brackets it to about one
// round trip. The offset is the local time of that instant minus the second
// the header shows from it on.
//
// A server that refreshes its Date once a second at its own phase (uvicorn,
// fasthttp) shows its seconds late by up to one second: every shard reading
// the same server sees the same lag, so offsets still compare shard to
// shard, which is what a sharded run needs of them. It takes about two
// seconds, and fails when the engine sends no Date header or it does not
// change within 1.5 s.
func (in *Info) ClockOffset(ctx context.Context) (ClockOffset, error) {
	c := in.c
	if c == nil {
		return ClockOffset{}, errors.New("clock: the engine was not probed")
	}
	src := "GET " + clockPath + " Date header"
	// Coarse: poll until the second changes.
	prev, err := c.dateProbe(ctx)
	if err != nil {
		return ClockOffset{}, err
	}
	deadline := prev.sent.Add(1500 * time.Millisecond)
	var next probeTime
	for {
		if err := sleepCtx(ctx, 25*time.Millisecond); err != nil {
			return ClockOffset{}, err
		}
		next, err = c.dateProbe(ctx)
		if err != nil {
			return ClockOffset{}, err
		}
		if !next.date.Equal(prev.date) {
			break
		}
		if next.sent.After(deadline) {
			return ClockOffset{}, fmt.Errorf("clock: the engine's Date header stayed %s for 1.5 s", prev.date.Format(http.TimeFormat))
		}
		prev = next
	}
	coarse, ok := bracket(prev, next)
	if !ok {
		return ClockOffset{}, fmt.Errorf("clock: the engine's Date header went from %s to %s", prev.date.Format(http.TimeFormat), next.date.Format(http.TimeFormat))
	}
	coarse.Source = src

	// Fine: one second after the change just seen comes the next; poll
	// back to back across it.
	tick := next.date.Add(time.Second).Add(coarse.Offset) // local wall time of the next change
	margin := coarse.Uncertainty + 5*time.Millisecond
	if err := sleepCtx(ctx, time.Until(tick.Add(-margin))); err != nil {
		return ClockOffset{}, err
	}
	prev, err = c.dateProbe(ctx)
	if err != nil {
		return coarse, nil
	}
	stop := tick.Add(margin + 20*time.Millisecond)
	for n := 0; n < 2000; n++ {
		p, err := c.dateProbe(ctx)
		if err != nil {
			return coarse, nil
		}
		if !p.date.Equal(prev.date) {
			if fine, ok := bracket(prev, p); ok && fine.Uncertainty < coarse.Uncertainty {
				fine.Source = src
				return fine, nil
			}
			return coarse, nil
		}
		if p.sent.After(stop) {
			break
		}
		prev = p
	}
	return coarse, nil // the header's seconds do not change on the second: the coarse reading is all there is
}

// probeTime is one clock probe: when it was sent and answered (local
// clock, with monotonic readings) and the Date it carried.
type probeTime struct {
	sent, recv time.Time
	date       time.Time
}

// bracket: the Date changed from a.date to b.date between probes a and b,
// so the engine's clock showed b.date at some instant after a was sent and
// before b's answer came back. It returns the middle of that interval as
// the offset, half its length as the uncertainty; ok is false unless the
// date moved by exactly one second.
func bracket(a, b probeTime) (ClockOffset, bool) {
	if !b.date.Equal(a.date.Add(time.Second)) {
		return ClockOffset{}, false
	}
	half := b.recv.Sub(a.sent) / 2
	mid := a.sent.Add(half)
	return ClockOffset{Offset: mid.Round(0).Sub(b.date), Uncertainty: half}, true
}

// dateProbe sends one GET and reads its Date header.
func (c *client) dateProbe(ctx context.Context) (probeTime, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+clockPath, nil)
	if err != nil {
		return probeTime{}, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	sent := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return probeTime{}, c.reachError(ctx, err)
	}
	recv := time.Now()
	// Read the answer to its end so the connection is reused: the next
	// probe's round trip is then one request, not a handshake too.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	resp.Body.Close()
	d := resp.Header.Get("Date")
	if d == "" {
		return probeTime{}, fmt.Errorf("clock: %s%s sends no Date header", c.shown, clockPath)
	}
	t, err := http.ParseTime(d)
	if err != nil {
		return probeTime{}, fmt.Errorf("clock: %s%s sends a Date header that is not an HTTP date: %q", c.shown, clockPath, d)
	}
	return probeTime{sent: sent, recv: recv, date: t}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
