package cell

import (
	"slices"

	"github.com/tokentap/tokentap/record"
)

// This file is the arithmetic of METHOD.md §8 that reads records: the mean
// context a decoding sequence had, which the bandwidth limit reads the KV
// cache for.

// MeanSeqTokens is the mean context of a sequence at the decode steps
// inside window w (METHOD.md §8): over every token that arrived in the
// window, its request's prompt tokens plus the tokens it had output
// before it. A request that reports no prompt count (cut before its
// usage, with none set by the load generator) counts prompt tokens. 0
// when no token arrived in the window.
func MeanSeqTokens(recs []record.Record, w Window, prompt int) float64 {
	var sum float64
	var n int64
	for i := range recs {
		r := &recs[i]
		lo, _ := slices.BinarySearch(r.Arrivals, w.Start)
		hi, _ := slices.BinarySearch(r.Arrivals, w.End)
		if lo >= hi {
			continue
		}
		p := r.PromptTokens
		if p <= 0 {
			p = prompt
		}
		before := 0
		for j := 0; j < lo; j++ {
			before += eventTokens(r, j)
		}
		for j := lo; j < hi; j++ {
			k := eventTokens(r, j)
			// Tokens at positions before, before+1, …, before+k-1.
			sum += float64(k)*float64(p+before) + float64(k*(k-1))/2
			n += int64(k)
			before += k
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
