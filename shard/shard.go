// Package shard is the arithmetic of a sharded matrix run (METHOD.md §10):
// N load generators that never talk to each other each run shard I of every
// cell. A cell's N requests are split so the shares sum to N exactly, each
// shard takes every N-th global slot (so prompts stay distinct across
// shards and together are the prompts of a single-process run), and every
// phase starts on a schedule derived from one common start time. It is
// pure: no I/O, no clock.
package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Spec names one shard: Index (0-based) of Count.
type Spec struct{ Index, Count int }

// Sharded reports whether s names a shard at all (the zero Spec does not).
func (s Spec) Sharded() bool { return s.Count > 0 }

// String is "I/N".
func (s Spec) String() string { return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Count) }

// Validate says what is wrong with s, if anything.
func (s Spec) Validate() error {
	switch {
	case s.Count < 1:
		return fmt.Errorf("shard count %d: want at least 1", s.Count)
	case s.Index < 0 || s.Index >= s.Count:
		return fmt.Errorf("shard %d of %d: the index runs from 0 to %d", s.Index, s.Count, s.Count-1)
	}
	return nil
}

// MaxCount bounds the shard count: more load generators than this is a typo.
const MaxCount = 4096

// Parse reads "I/N" (shard I, 0-based, of N).
func Parse(v string) (Spec, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(v), "/")
	if !ok {
		return Spec{}, fmt.Errorf("shard %q: want I/N, e.g. 0/3 for the first of three", v)
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return Spec{}, fmt.Errorf("shard %q: want I/N with whole numbers, e.g. 0/3", v)
	}
	if n > MaxCount {
		return Spec{}, fmt.Errorf("shard %q: at most %d shards", v, MaxCount)
	}
	s := Spec{Index: i, Count: n}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("shard %q: %w", v, err)
	}
	return s, nil
}

// FromIndex is the shard a Kubernetes Indexed Job's pod runs: its
// JOB_COMPLETION_INDEX (idx) of count shards.
func FromIndex(idx string, count int) (Spec, error) {
	if idx == "" {
		return Spec{}, errors.New("JOB_COMPLETION_INDEX is not set: --shards N takes the shard from it (a Kubernetes Indexed Job sets it); elsewhere give --shard I/N")
	}
	i, err := strconv.Atoi(strings.TrimSpace(idx))
	if err != nil {
		return Spec{}, fmt.Errorf("JOB_COMPLETION_INDEX %q is not a whole number", idx)
	}
	if count > MaxCount {
		return Spec{}, fmt.Errorf("--shards %d: at most %d shards", count, MaxCount)
	}
	s := Spec{Index: i, Count: count}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("JOB_COMPLETION_INDEX %d with --shards %d: %w (completions must equal --shards)", i, count, err)
	}
	return s, nil
}

// Share is how many of a cell's n requests this shard keeps in flight:
// n/N, one more for the first n mod N shards, so the shares of all shards
// sum to n exactly (64 over 3 shards: 22 + 21 + 21).
func (s Spec) Share(n int) int {
	if !s.Sharded() {
		return n
	}
	q, r := n/s.Count, n%s.Count
	if s.Index < r {
		q++
	}
	return q
}

// Slot is the global slot of this shard's j-th stream: shards take every
// N-th slot, so the slots of a cell of n requests, over all shards, are
// exactly 0 … n-1, and this shard's first Share(n) streams are its part
// of them. A slot's prompt depends on the global slot alone.
func (s Spec) Slot(j int) int {
	if !s.Sharded() {
		return j
	}
	return s.Index + j*s.Count
}

// Slots lists the global slots of this shard's streams for a cell of n.
func (s Spec) Slots(n int) []int {
	out := make([]int, s.Share(n))
	for j := range out {
		out[j] = s.Slot(j)
	}
	return out
}

// RunID is the salt of a sharded run whose shards were given none: derived
// from the common start time, so every shard of one run derives the same
// and another run (another start) a different one.
func RunID(startAt time.Time) string {
	h := fnv.New32a()
	h.Write([]byte(startAt.UTC().Format(time.RFC3339Nano)))
	return fmt.Sprintf("%08x", h.Sum32())
}

// Schedule is when every phase of a sharded run starts, from the common
// start: cell slot k's window opens at Start + Gap + k × (Window + Gap).
// In each gap cancelled streams leave, then the next cell warms up, every
// shard at the same instant, as a single load generator would send all of
// a cell's warm-up requests at once (so each shard's gauges and counters
// see the same engine). A row's first cell needs the first half of its gap
// for its preparation (prompts, shard 0's cold prefill alone on the
// engine) and warms up at mid-gap; the row's other cells have a quarter
// gap to drain and warm up for three quarters.
type Schedule struct {
	Start  time.Time // the common start (--start-at)
	Window time.Duration
	Gap    time.Duration
}

// Open is when cell slot k's window opens.
func (s Schedule) Open(k int) time.Time {
	return s.Start.Add(s.Gap + time.Duration(k)*(s.Window+s.Gap))
}

// Close is when cell slot k's window closes.
func (s Schedule) Close(k int) time.Time { return s.Open(k).Add(s.Window) }

// Warm is when the shards send cell slot k's warm-up requests; rowFirst
// says it is the first cell of its context row.
func (s Schedule) Warm(k int, rowFirst bool) time.Time {
	if rowFirst {
		return s.Open(k).Add(-s.Gap / 2)
	}
	return s.Open(k).Add(-s.Gap * 3 / 4)
}

// After is when the schedule's k cells are over, and half a gap later: when
// shard 0 measures the prefill rows that are not decode rows, alone on the
// engine.
func (s Schedule) After(k int) time.Time {
	if k == 0 {
		return s.Start
	}
	return s.Close(k - 1).Add(s.Gap / 2)
}

// LateTolerance is how late a window may open before the cell is marked
// Late window: 1% of the window, at least 100 ms (what a busy machine's
// timers and a connection's first write take).
func LateTolerance(window time.Duration) time.Duration {
	return max(window/100, 100*time.Millisecond)
}

// MinGap is the shortest gap a schedule may have: drain and warm-up need
// some time even on the fastest engine.
const MinGap = time.Second
