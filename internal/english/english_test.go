package english

import "testing"

func TestList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a and b"},
		{[]string{"a", "b", "c"}, "a, b and c"},
		{[]string{"p50", "p90", "p99", "p99.9"}, "p50, p90, p99 and p99.9"},
	} {
		if got := List(tc.in); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, "0 cells"},
		{1, "1 cell"},
		{2, "2 cells"},
		{128, "128 cells"},
	} {
		if got := Count(tc.n, "cell", "cells"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
