package shard

import (
	"strings"
	"testing"
	"time"
)

func TestShareSumsToN(t *testing.T) {
	for _, tc := range []struct {
		n, count int
		want     []int
	}{
		{64, 3, []int{22, 21, 21}},
		{1, 3, []int{1, 0, 0}},
		{4, 2, []int{2, 2}},
		{5, 2, []int{3, 2}},
		{7, 1, []int{7}},
		{0, 2, []int{0, 0}},
		{128, 5, []int{26, 26, 26, 25, 25}},
	} {
		for i, w := range tc.want {
			if got := (Spec{Index: i, Count: tc.count}).Share(tc.n); got != w {
				t.Errorf("Share(%d) of shard %d/%d = %d, want %d", tc.n, i, tc.count, got, w)
			}
		}
	}
	// Every split sums to N, differs by at most one between shards, and
	// the shards' slots are 0 … N-1, each once.
	for count := 1; count <= 17; count++ {
		for n := 0; n <= 200; n++ {
			sum, lo, hi := 0, n, 0
			seen := make([]int, n)
			for i := range count {
				sp := Spec{Index: i, Count: count}
				s := sp.Share(n)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
				for _, slot := range sp.Slots(n) {
					if slot < 0 || slot >= n {
						t.Fatalf("shard %s of n=%d has slot %d", sp, n, slot)
					}
					seen[slot]++
				}
			}
			if sum != n || hi-lo > 1 {
				t.Fatalf("n=%d over %d shards: shares sum to %d, from %d to %d", n, count, sum, lo, hi)
			}
			for slot, k := range seen {
				if k != 1 {
					t.Fatalf("n=%d over %d shards: slot %d taken %d times", n, count, slot, k)
				}
			}
		}
	}
	if (Spec{}).Share(9) != 9 || (Spec{}).Slot(4) != 4 {
		t.Error("an unsharded run must send all of N on slots 0 … N-1")
	}
}

// A shard's first k streams are its part of a cell of any n >= k: a row's
// prompts are built once for its largest cell and its smaller cells use
// their first Share(n).
func TestSlotsArePrefixes(t *testing.T) {
	for count := 1; count <= 5; count++ {
		for i := range count {
			sp := Spec{Index: i, Count: count}
			big := sp.Slots(100)
			for n := 0; n <= 100; n++ {
				small := sp.Slots(n)
				for j := range small {
					if small[j] != big[j] {
						t.Fatalf("shard %s: cell of %d takes slot %d as stream %d, the row's prompts have %d", sp, n, small[j], j, big[j])
					}
				}
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		err  string
	}{
		{"0/3", Spec{0, 3}, ""},
		{" 2/3 ", Spec{2, 3}, ""},
		{"0/1", Spec{0, 1}, ""},
		{"3/3", Spec{}, "index runs from 0 to 2"},
		{"-1/3", Spec{}, "index"},
		{"0/0", Spec{}, "count 0"},
		{"1", Spec{}, "want I/N"},
		{"a/b", Spec{}, "whole numbers"},
		{"1/3/4", Spec{}, "whole numbers"},
		{"0/99999", Spec{}, "at most"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q) error %v; want one saying %q", tc.in, err, tc.err)
		}
	}
}

func TestFromIndex(t *testing.T) {
	if s, err := FromIndex("2", 3); err != nil || s != (Spec{2, 3}) {
		t.Errorf("FromIndex(2, 3) = %v, %v", s, err)
	}
	for _, tc := range []struct {
		idx   string
		count int
		err   string
	}{
		{"", 3, "JOB_COMPLETION_INDEX is not set"},
		{"x", 3, "not a whole number"},
		{"3", 3, "completions must equal --shards"},
		{"0", 0, "count 0"},
	} {
		if _, err := FromIndex(tc.idx, tc.count); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("FromIndex(%q, %d): %v; want an error saying %q", tc.idx, tc.count, err, tc.err)
		}
	}
}

func TestSchedule(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s := Schedule{Start: start, Window: 30 * time.Second, Gap: 20 * time.Second}
	for _, tc := range []struct {
		got, want time.Time
		what      string
	}{
		{s.Open(0), start.Add(20 * time.Second), "first window opens one gap after the start"},
		{s.Warm(0, true), start.Add(10 * time.Second), "a row's first cell warms up half a gap before"},
		{s.Warm(1, false), start.Add(55 * time.Second), "another cell a quarter gap after the close"},
		{s.Close(0), start.Add(50 * time.Second), "it closes a window later"},
		{s.Open(1), start.Add(70 * time.Second), "the next opens a gap after that"},
		{s.Warm(1, true), start.Add(60 * time.Second), "a row's first cell half a gap after the close"},
		{s.Open(5), start.Add(20*time.Second + 5*50*time.Second), "cell 5"},
		{s.After(2), start.Add(110 * time.Second), "half a gap after the last of two windows"},
		{s.After(0), start, "no cells: the start"},
	} {
		if !tc.got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.what, tc.got.Format(time.TimeOnly), tc.want.Format(time.TimeOnly))
		}
	}
}

func TestRunIDAndTolerance(t *testing.T) {
	a := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	if RunID(a) != RunID(a.In(time.FixedZone("x", 3600))) {
		t.Error("one instant in two zones must give one run")
	}
	if RunID(a) == RunID(a.Add(time.Second)) {
		t.Error("two starts gave one run id")
	}
	if LateTolerance(30*time.Second) != 300*time.Millisecond || LateTolerance(2*time.Second) != 100*time.Millisecond {
		t.Errorf("late tolerance %s, %s", LateTolerance(30*time.Second), LateTolerance(2*time.Second))
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0/3", "2/3", "3/3", "-1/2", "a/b", "", "0/4096", "1/1/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := Parse(v)
		if err != nil {
			return
		}
		if s.Validate() != nil || s.Count > MaxCount {
			t.Fatalf("Parse(%q) = %v, which is not a shard", v, s)
		}
		back, err := Parse(s.String())
		if err != nil || back != s {
			t.Fatalf("Parse(%q) = %v; its String %q parses to %v, %v", v, s, s.String(), back, err)
		}
	})
}
