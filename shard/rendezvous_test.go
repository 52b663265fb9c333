package shard

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGathering(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	margin := 10 * time.Second
	in := func(i int, token string) CheckIn {
		return CheckIn{Index: i, Count: 3, Plan: "p", Token: token, Host: "pod-" + token}
	}
	type step struct {
		c     CheckIn
		at    time.Duration // after t0
		start time.Duration // the start returned, after t0; 0: none yet
		err   string        // a refusal saying this
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		missing []int
	}{
		{"the last check-in fixes the start", []step{
			{c: in(2, "b"), at: time.Second},
			{c: in(1, "a"), at: 5 * time.Second, start: 15 * time.Second},
		}, nil},
		{"a retry is answered again", []step{
			{c: in(1, "a"), at: time.Second},
			{c: in(1, "a"), at: 2 * time.Second},
			{c: in(2, "b"), at: 3 * time.Second, start: 13 * time.Second},
			{c: in(1, "a"), at: 4 * time.Second, start: 13 * time.Second},
		}, nil},
		{"waiting for one", []step{{c: in(2, "b"), at: time.Second}}, []int{1}},
		{"another process with a shard's index", []step{
			{c: in(1, "a"), at: time.Second},
			{c: in(1, "z"), at: 2 * time.Second, err: "shard 1 checked in already from pod-a; two processes run it"},
		}, []int{2}},
		{"another process claims the coordinator's index", []step{
			{c: in(0, "z"), at: time.Second, err: "shard 0 is the coordinator"},
		}, []int{1, 2}},
		{"another shard count", []step{
			{c: CheckIn{Index: 1, Count: 4, Plan: "p", Token: "a"}, err: "runs with 4 shards; the coordinator's run has 3"},
		}, []int{1, 2}},
		{"index out of range", []step{
			{c: CheckIn{Index: 3, Count: 3, Plan: "p", Token: "a"}, err: "the index runs from 0 to 2"},
		}, []int{1, 2}},
		{"another plan", []step{
			{c: CheckIn{Index: 1, Count: 3, Plan: "q", Token: "a"}, err: "planned another run than shard 0"},
		}, []int{1, 2}},
		{"too late: the start passed", []step{
			{c: in(1, "a"), at: time.Second},
			{c: in(2, "b"), at: 2 * time.Second, start: 12 * time.Second},
			{c: in(2, "b"), at: 13 * time.Second, err: "the run started at 2026-01-02T03:04:17Z, 1s ago: too late to join"},
		}, nil},
		{"a second process after the start is fixed", []step{
			{c: in(1, "a"), at: time.Second},
			{c: in(2, "b"), at: 2 * time.Second, start: 12 * time.Second},
			{c: in(2, "c"), at: 3 * time.Second, err: "shard 2 checked in already"},
		}, nil},
	} {
		g := NewGathering(CheckIn{Index: 0, Count: 3, Plan: "p", Token: "self"}, margin)
		for i, s := range tc.steps {
			start, err := g.CheckIn(s.c, t0.Add(s.at))
			var ref *Refusal
			switch {
			case s.err != "" && (!errors.As(err, &ref) || !strings.Contains(err.Error(), s.err)):
				t.Errorf("%s, step %d: %v; want a refusal saying %q", tc.name, i, err, s.err)
			case s.err == "" && err != nil:
				t.Errorf("%s, step %d: %v", tc.name, i, err)
			case s.err == "" && s.start == 0 && !start.IsZero():
				t.Errorf("%s, step %d: start %v before every shard checked in", tc.name, i, start)
			case s.err == "" && s.start != 0 && !start.Equal(t0.Add(s.start)):
				t.Errorf("%s, step %d: start %v, want t0 + %v", tc.name, i, start, s.start)
			}
		}
		if got := g.Missing(); !slices.Equal(got, tc.missing) {
			t.Errorf("%s: missing %v, want %v", tc.name, got, tc.missing)
		}
		if len(tc.missing) == 0 && g.Start().IsZero() {
			t.Errorf("%s: every shard in and no start", tc.name)
		}
	}
}

func TestGatheringWaiting(t *testing.T) {
	g := NewGathering(CheckIn{Index: 0, Count: 12, Plan: "p"}, time.Second)
	if w := g.Waiting(); w != "1 of 12 shards ready; waiting for shards 1, 2, 3, 4, 5, 6, 7, 8, …" {
		t.Errorf("waiting: %q", w)
	}
	for i := 1; i < 11; i++ {
		if _, err := g.CheckIn(CheckIn{Index: i, Count: 12, Plan: "p"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if w := g.Waiting(); w != "11 of 12 shards ready; waiting for shard 11" {
		t.Errorf("waiting: %q", w)
	}
	if _, err := g.CheckIn(CheckIn{Index: 11, Count: 12, Plan: "p"}, time.Now()); err != nil || g.Start().IsZero() {
		t.Fatal(err, g.Start())
	}
	if w := g.Waiting(); w != "all 12 shards ready" {
		t.Errorf("waiting: %q", w)
	}
}

func TestCheckStart(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := CheckStart(now.Add(time.Millisecond), now); err != nil {
		t.Errorf("a start ahead: %v", err)
	}
	for _, at := range []time.Time{now, now.Add(-3 * time.Second)} {
		err := CheckStart(at, now)
		var ref *Refusal
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), "before this shard heard of it") {
			t.Errorf("start %v at %v: %v; want a refusal", at, now, err)
		}
	}
}

// TestGatheringLeave: a shard gone before the start is forgotten, so the
// start waits for it and a new process of its index joins; the
// coordinator, another process's check-in and any check-in once the start
// is fixed stay.
func TestGatheringLeave(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := func(i int, tok string) CheckIn { return CheckIn{Index: i, Count: 3, Plan: "p", Token: tok} }
	g := NewGathering(c(0, "a"), time.Second)
	if _, err := g.CheckIn(c(1, "b"), now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		index int
		token string
		want  bool
	}{
		{0, "a", false}, // the coordinator
		{1, "x", false}, // not the process that checked in
		{2, "c", false}, // never checked in
		{1, "b", true},
		{1, "b", false}, // already gone
	} {
		if got := g.Leave(tc.index, tc.token); got != tc.want {
			t.Errorf("Leave(%d, %q) = %v, want %v", tc.index, tc.token, got, tc.want)
		}
	}
	if got := g.Waiting(); got != "1 of 3 shards ready; waiting for shards 1, 2" {
		t.Errorf("after shard 1 left: %q", got)
	}
	if _, err := g.CheckIn(c(1, "b2"), now); err != nil {
		t.Errorf("shard 1's new process: %v", err)
	}
	start, err := g.CheckIn(c(2, "c"), now)
	if err != nil || start.IsZero() {
		t.Fatalf("the last shard: start %v, %v", start, err)
	}
	if g.Leave(1, "b2") || g.Ready() != 3 {
		t.Error("a shard left after the start was fixed")
	}
}
