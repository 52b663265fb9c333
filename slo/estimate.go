package slo

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// The attainment of a window's requests, cut ones included (METHOD.md §6).
//
// A request cut before its end whose result was still open (undecided) is
// not a request that would have met the objectives: leaving it out while
// the cut requests that had already missed stay in reads attainment low
// (the requests a cut finds still in time are the ones that have not
// missed yet). Each request's result is decided at an age (time since
// sent): a miss when it became certain (no first token by the TTFT limit,
// the end of a gap over the TBT limit, the E2E limit passed, the end of a
// request that failed or whose mean time per token missed TPOT), good
// when the last objective was met (the first token, for a TTFT objective
// alone; else its end). A cut request still open is right-censored at its
// age at the cut. The window's close and a rate cell's grace end are
// instants of the schedule, not of a request's progress, so censoring is
// independent of outcome, and the share of requests that end good is the
// cumulative incidence of "good" among the two competing outcomes, the
// Aalen–Johansen estimator (O. O. Aalen and S. Johansen, "An empirical
// transition matrix for non-homogeneous Markov chains based on censored
// observations", Scand. J. Statist. 5, 1978; with one outcome it is
// Kaplan–Meier's product limit):
//
//	A = Σ over ages t of S(t−) × good(t) / atRisk(t),
//	S(t) = Π over ages u ≤ t of (1 − (good(u) + missed(u)) / atRisk(u))
//
// With nothing undecided A is Good / Judged exactly. Where requests are
// still undecided past the last age any result was decided at (every
// request cut before any could end: long outputs in a short window), S
// there is the share whose result nothing observed can tell: attainment
// lies between A (had they all missed) and A + S (had they all been
// good), and both bounds are given. The figure shown then splits S as the
// results decided split, A + S × A / (1 − S): an assumption (those
// requests fare as the ones decided did), said with the bounds.

// life is one request's result for the estimator: decided good or missed
// at an age, or still undecided when cut at that age.
type life struct {
	age  time.Duration
	kind lifeKind
}

type lifeKind int8

// Decided results come before a censoring at the same age: a request cut
// at the instant another's result was decided was still at risk then.
const (
	lifeGood lifeKind = iota
	lifeMissed
	lifeOpen
)

// lifeOf is r's life as WindowUntil judges it: v is its verdict, cutAt
// the instant it was cut (ignored when v is not Cut).
func (s Spec) lifeOf(r *record.Record, v Verdict, cutAt time.Duration) life {
	switch {
	case !v.Judged:
		return life{max(cutAt-r.Sent, 0), lifeOpen}
	case v.Good:
		return life{s.goodAge(r), lifeGood}
	}
	return life{s.missAge(r, v, cutAt), lifeMissed}
}

// goodAge is when r had met every objective: its first token for a TTFT
// objective alone, else its end.
func (s Spec) goodAge(r *record.Record) time.Duration {
	if s.TBT == 0 && s.TPOT == 0 && s.E2E == 0 && len(r.Arrivals) > 0 {
		return r.Arrivals[0] - r.Sent
	}
	return max(r.End-r.Sent, 0)
}

// missAge is the earliest age at which one of r's misses was certain.
func (s Spec) missAge(r *record.Record, v Verdict, cutAt time.Duration) time.Duration {
	end := r.End
	if v.Cut {
		end = cutAt
	}
	best := max(end-r.Sent, 0) // a failure, or TPOT: at the end
	for _, name := range v.Missed {
		switch name {
		case result.SLOTTFT:
			best = min(best, s.TTFT+1)
			if len(r.Arrivals) > 0 {
				best = min(best, r.Arrivals[0]-r.Sent)
			}
		case result.SLOTBT:
			for i := 1; i < len(r.Arrivals); i++ {
				if r.Arrivals[i]-r.Arrivals[i-1] > s.TBT {
					best = min(best, r.Arrivals[i]-r.Sent)
					break
				}
			}
		case result.SLOE2E:
			best = min(best, s.E2E+1)
		}
	}
	return max(best, 0)
}

// estimate is the Aalen–Johansen attainment of lives: low is the share
// decided good, high that plus the share still undecided past the last
// decided age (high == low when nothing is). ok is false for no lives.
func estimate(lives []life) (low, high float64, ok bool) {
	if len(lives) == 0 {
		return 0, 0, false
	}
	good, missedAll, open := 0, 0, 0
	for _, x := range lives {
		switch x.kind {
		case lifeGood:
			good++
		case lifeMissed:
			missedAll++
		default:
			open++
		}
	}
	if open == 0 {
		// Nothing censored: the plain share, exactly.
		a := float64(good) / float64(len(lives))
		return a, a, true
	}
	l := slices.Clone(lives)
	slices.SortFunc(l, func(a, b life) int {
		if c := cmp.Compare(a.age, b.age); c != 0 {
			return c
		}
		return cmp.Compare(a.kind, b.kind)
	})
	atRisk := float64(len(l))
	surv := 1.0
	for i := 0; i < len(l); {
		var g, missed, o float64
		j := i
		for ; j < len(l) && l[j].age == l[i].age; j++ {
			switch l[j].kind {
			case lifeGood:
				g++
			case lifeMissed:
				missed++
			default:
				o++
			}
		}
		if g+missed > 0 {
			low += surv * g / atRisk
			surv *= 1 - (g+missed)/atRisk
		}
		atRisk -= g + missed + o
		i = j
	}
	// With one outcome only, the sum is 0 or 1 − S exactly, where the
	// products would round.
	switch {
	case good == 0:
		low = 0
	case missedAll == 0:
		low = 1 - surv
	}
	// Rounding aside, both lie in [0, 1].
	low = min(max(low, 0), 1)
	return low, min(max(low+surv, low), 1), true
}

// estSum is attainment estimates of several tallies, each weighted by the
// requests it counted (judged and undecided): what a document keeps of a
// cell's estimate, for merging shards and summing a run's cells. point
// is the figure shown, low and high its bounds.
type estSum struct {
	n, point, low, high float64
}

// pointOf is the figure shown for bounds low and high (see above): the
// undecided share split as the decided results split; low when nothing
// was decided.
func pointOf(low, high float64) float64 {
	s := high - low
	switch {
	case s <= 1e-12 || s >= 1 || low <= 0:
		return low
	case high >= 1-1e-12 && low >= 1-s-1e-12:
		return 1 // every result decided was good: exactly, not by rounding
	}
	return min(low+s*low/(1-s), high)
}

// attainment is the tally's estimate: its own window's requests and the
// documents' cells it was merged with, each weighted by the requests it
// counted. ok is false when it has neither (a proxy's or a replay's
// running tally: Good / Judged).
func (t Tally) attainment() (point, low, high float64, ok bool) {
	sum := t.est
	if l, h, has := estimate(t.lives); has {
		n := float64(len(t.lives))
		sum.n += n
		sum.point += pointOf(l, h) * n
		sum.low += l * n
		sum.high += h * n
	}
	if sum.n <= 0 {
		return 0, 0, 0, false
	}
	return sum.point / sum.n, sum.low / sum.n, sum.high / sum.n, true
}
