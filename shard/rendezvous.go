package shard

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The rendezvous (METHOD §10): instead of a start on the wall clock given
// in advance, shard 0 is the coordinator; every other shard checks in with
// it once ready (probed the engine, made its plan), and when the last has,
// the coordinator fixes the common start a margin ahead and answers every
// shard with it. Gathering is the coordinator's side of it, pure: the
// network is the caller's (package matrix).

// CheckIn is one shard's word to the coordinator: "ready".
type CheckIn struct {
	Index int    `json:"index"`
	Count int    `json:"count"`
	Plan  string `json:"plan"`  // a digest of the plan and settings: every shard must run the same
	Token string `json:"token"` // random per process: a retry carries the same token, another process another
	Host  string `json:"host,omitempty"`
}

// Refusal is a check-in the coordinator turns away for good: retrying
// cannot help.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

// Gathering is the coordinator's record of which shards are ready, and
// the common start once all are.
type Gathering struct {
	count  int
	plan   string
	margin time.Duration
	in     map[int]CheckIn
	start  time.Time
}

// NewGathering starts a gathering for self's run: self (shard 0, the
// coordinator) is ready; the start is fixed margin after the last shard
// checks in.
func NewGathering(self CheckIn, margin time.Duration) *Gathering {
	g := &Gathering{count: self.Count, plan: self.Plan, margin: margin, in: map[int]CheckIn{}}
	g.in[self.Index] = self
	return g
}

// CheckIn records c at now and returns the common start, zero while some
// shard is still missing. A check-in that cannot join the run is refused
// with a *Refusal saying why: another run's shard count or plan, an index
// out of range, or an index that another process already holds (a retry,
// with the same token, is answered again, until the start has passed).
func (g *Gathering) CheckIn(c CheckIn, now time.Time) (time.Time, error) {
	who := "shard " + strconv.Itoa(c.Index)
	if c.Host != "" {
		who += " (" + c.Host + ")"
	}
	switch {
	case c.Count != g.count:
		return time.Time{}, &Refusal{fmt.Sprintf("%s runs with %d shards; the coordinator's run has %d: every shard needs the same --shards", who, c.Count, g.count)}
	case c.Index < 0 || c.Index >= g.count:
		return time.Time{}, &Refusal{fmt.Sprintf("%s: the index runs from 0 to %d", who, g.count-1)}
	case c.Plan != g.plan:
		return time.Time{}, &Refusal{fmt.Sprintf("%s planned another run than shard 0 (plan %s, shard 0's %s): every shard needs the same settings and the same engine", who, c.Plan, g.plan)}
	}
	if had, ok := g.in[c.Index]; ok && had.Token != c.Token {
		if c.Index == 0 {
			return time.Time{}, &Refusal{fmt.Sprintf("%s: shard 0 is the coordinator; two processes run it", who)}
		}
		by := ""
		if had.Host != "" {
			by = " from " + had.Host
		}
		return time.Time{}, &Refusal{fmt.Sprintf("%s: shard %d checked in already%s; two processes run it", who, c.Index, by)}
	}
	if !g.start.IsZero() {
		if !now.Before(g.start) {
			return time.Time{}, &Refusal{fmt.Sprintf("%s: the run started at %s, %s ago: too late to join",
				who, g.start.UTC().Format(time.RFC3339Nano), now.Sub(g.start).Round(time.Millisecond))}
		}
		return g.start, nil
	}
	g.in[c.Index] = c
	if len(g.in) == g.count {
		g.start = now.Add(g.margin)
	}
	return g.start, nil
}

// Leave forgets shard index's check-in by the process holding token,
// while the start is not fixed: that process is gone (its held check-in
// closed), so it is not ready, and another process of its index may check
// in. It reports whether anything was forgotten; the coordinator's own
// check-in, another process's, or any once the start is fixed, stay.
func (g *Gathering) Leave(index int, token string) bool {
	had, ok := g.in[index]
	if !ok || had.Token != token || index == 0 || !g.start.IsZero() {
		return false
	}
	delete(g.in, index)
	return true
}

// Start is the common start, zero until every shard checked in.
func (g *Gathering) Start() time.Time { return g.start }

// Ready is how many shards checked in, the coordinator among them.
func (g *Gathering) Ready() int { return len(g.in) }

// Missing lists the shards that have not checked in, in index order.
func (g *Gathering) Missing() []int {
	var out []int
	for i := range g.count {
		if _, ok := g.in[i]; !ok {
			out = append(out, i)
		}
	}
	return out
}

// Waiting says where the gathering stands, for a shard's progress and
// errors: "2 of 3 shards ready; waiting for shard 2".
func (g *Gathering) Waiting() string {
	m := g.Missing()
	if len(m) == 0 {
		return fmt.Sprintf("all %d shards ready", g.count)
	}
	ids := make([]string, len(m))
	for i, v := range m {
		ids[i] = strconv.Itoa(v)
	}
	if len(ids) > 8 {
		ids = append(slices.Clone(ids[:8]), "…")
	}
	word := "shard "
	if len(m) > 1 {
		word = "shards "
	}
	return fmt.Sprintf("%d of %d shards ready; waiting for %s%s", len(g.in), g.count, word, strings.Join(ids, ", "))
}

// CheckStart refuses a common start that came too late to keep: a shard
// must have it before it passes, or its first phase would already be
// late (the answer crossed a slow network, or the clocks of the
// coordinator and this shard differ by more than the margin).
func CheckStart(start, now time.Time) error {
	if !now.Before(start) {
		return &Refusal{fmt.Sprintf("the common start %s passed %s before this shard heard of it: a clock off by more than the rendezvous margin, or an answer that took as long; give a larger --rendezvous-margin or set the clocks right",
			start.UTC().Format(time.RFC3339Nano), now.Sub(start).Round(time.Millisecond))}
	}
	return nil
}

// DefaultMargin is how far ahead of the last check-in the coordinator
// sets the start: each shard reads its clock's offset against the engine
// (about 2 s) and the answer crosses the network.
const DefaultMargin = 10 * time.Second

// MinMargin is the least margin: less leaves no time for the answer.
const MinMargin = 500 * time.Millisecond
