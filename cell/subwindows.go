package cell

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokentap/tokentap/result"
)

// SubWindowCount is how many equal, consecutive parts a cell's window is
// cut into for the comparison's noise (METHOD §9): each part's tok/s and
// median time between tokens are batch estimates of the cell's figures,
// and their spread is the figures' own uncertainty within the run.
const SubWindowCount = 10

// SubWindows are a cell's figures over each of its SubWindowCount equal
// parts, in order. TokS[i] is the tokens made in part i over its seconds
// (summed over the parts of a sharded cell, as Total tok/s is), a token
// made over the gap before it: each sub-window counts the share of each
// gap that lies in it. Counting arrivals instead would move a sub-window's
// count by whole steps of the batch (every stream's token of one engine
// step arrives at once: N tokens in or out at each edge), a quantization
// that is no noise of the engine and that the whole window's count does
// not have. A request's first event has no gap: it counts where it came.
// TBT[i] the median time between tokens of the gaps that ended in part i,
// by the same rule as the TBT column, 0 where none did. TBT is nil for a
// cell several load generators measured: medians of separate parts do not
// merge.
type SubWindows struct {
	TokS []float64
	TBT  []time.Duration
}

// slicer gathers one part's tokens and gaps by sub-window.
type slicer struct {
	w      Window
	tokens [SubWindowCount]float64
	gaps   [SubWindowCount][]weighted
}

// weighted is a gap per token and how many tokens it stands for.
type weighted struct {
	v time.Duration
	n int
}

// index is the sub-window of instant t, which must be inside the window.
func (s *slicer) index(t time.Duration) int {
	i := int(int64(t-s.w.Start) * SubWindowCount / int64(s.w.Len()))
	return min(max(i, 0), SubWindowCount-1)
}

// add counts an event of k tokens at t inside the window, after a gap
// where hasGap (a request's first event has none).
func (s *slicer) add(t time.Duration, k int, gap time.Duration, hasGap bool) {
	i := s.index(t)
	if hasGap {
		s.gaps[i] = append(s.gaps[i], weighted{gap / time.Duration(k), k})
	}
	if !hasGap || gap <= 0 {
		s.tokens[i] += float64(k)
		return
	}
	// Spread k over [t − gap, t], the part inside the window.
	part := s.w.Len() / SubWindowCount
	for j := i; j >= 0; j-- {
		lo := s.w.Start + time.Duration(j)*part
		hi := lo + part
		if j == SubWindowCount-1 {
			hi = s.w.End
		}
		from, to := max(t-gap, lo), min(t, hi)
		if to > from {
			s.tokens[j] += float64(k) * float64(to-from) / float64(gap)
		}
		if t-gap >= lo {
			break
		}
	}
}

// result is the part's figures.
func (s *slicer) result() SubWindows {
	secs := s.w.Len().Seconds() / SubWindowCount
	out := SubWindows{TokS: make([]float64, SubWindowCount), TBT: make([]time.Duration, SubWindowCount)}
	for i := range SubWindowCount {
		out.TokS[i] = s.tokens[i] / secs
		out.TBT[i] = weightedMedian(s.gaps[i])
	}
	return out
}

// weightedMedian is the value at the nearest rank of the median, each
// value counted n times; 0 for none.
func weightedMedian(v []weighted) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.SortFunc(v, func(a, b weighted) int { return cmp.Compare(a.v, b.v) })
	total := 0
	for _, x := range v {
		total += x.n
	}
	rank := max((total+1)/2, 1)
	seen := 0
	for _, x := range v {
		seen += x.n
		if seen >= rank {
			return x.v
		}
	}
	return v[len(v)-1].v
}

// addPart sums a part's sub-windows into sw: tok/s index by index; the
// medians of time between tokens only where there is one part.
func (sw *SubWindows) addPart(p SubWindows, parts int) {
	if sw.TokS == nil {
		sw.TokS = make([]float64, SubWindowCount)
	}
	for i, v := range p.TokS {
		sw.TokS[i] += v
	}
	if parts == 1 {
		sw.TBT = p.TBT
	}
}

// Result is the sub-windows as the result document keeps them; nil when
// there are none (no window measured).
func (sw SubWindows) Result() *result.SubWindows {
	if sw.TokS == nil {
		return nil
	}
	out := &result.SubWindows{TokS: slices.Clone(sw.TokS)}
	if sw.TBT != nil {
		out.TBTms = make([]float64, len(sw.TBT))
		for i, d := range sw.TBT {
			out.TBTms[i] = millis(d)
		}
	}
	return out
}
