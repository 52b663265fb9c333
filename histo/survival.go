package histo

import (
	"math"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Quantile reads quantile q (0..1) of a latency over every request, seen or
// not (METHOD.md §3, "Every request sent"): events holds the latencies that
// were seen (a first token, an end), censored the waits of the requests cut
// or ended before it came, each a lower bound of its latency
// (right-censored). It is the Kaplan–Meier product-limit estimator (Kaplan
// & Meier, "Nonparametric estimation from incomplete observations", JASA
// 53, 1958), on the histograms' buckets:
//
//	S(t) = Π over bucket values v ≤ t of (1 − d(v) / r(v))
//
// where d(v) is the latencies seen in bucket v and r(v) the requests still
// at risk there (neither seen nor censored in a lower bucket; a request
// censored in the bucket of a latency is at risk at it, the usual
// convention). The quantile is the smallest bucket value at which
// 1 − S(t) reaches ρ/n, with n every request (seen and censored) and ρ the
// nearest rank ⌊q·n + ½⌋ (at least 1), as HdrHistogram reads a percentile:
// with nothing censored 1 − S(t) is the plain empirical share seen by t,
// and Quantile is exactly Latency.
//
// Where 1 − S never reaches that level (the quantile lies among the
// censored), the estimator says only that the quantile is beyond the
// largest time observed: atLeast is set and d is that time (the largest
// censored wait), a lower bound. ok is false when both histograms are
// empty. A nil histogram counts as empty.
func Quantile(events, censored *hdr.Histogram, q float64) (d time.Duration, atLeast, ok bool) {
	var ne, nc int64
	if events != nil {
		ne = events.TotalCount()
	}
	if censored != nil {
		nc = censored.TotalCount()
	}
	n := ne + nc
	if n == 0 {
		return 0, false, false
	}
	if nc == 0 {
		d, ok = Latency(events, q)
		return d, false, ok
	}
	v, atLeast := KaplanMeier(Steps(events, censored), q)
	return time.Duration(v) * time.Microsecond, atLeast, true
}

// Steps lays the seen latencies (events) and censored waits side by side,
// bucket by bucket in increasing value (µs), for KaplanMeier. A nil
// histogram counts as empty.
func Steps(events, censored *hdr.Histogram) []Step {
	var eb, cb []hdr.Bar
	if events != nil && events.TotalCount() > 0 {
		eb = events.Distribution()
	}
	if censored != nil && censored.TotalCount() > 0 {
		cb = censored.Distribution()
	}
	var steps []Step
	i, j := 0, 0
	for i < len(eb) || j < len(cb) {
		// The next bucket value either histogram holds.
		v := int64(math.MaxInt64)
		if i < len(eb) {
			v = eb[i].To
		}
		if j < len(cb) && cb[j].To < v {
			v = cb[j].To
		}
		st := Step{Value: v}
		for i < len(eb) && eb[i].To == v {
			st.Seen += eb[i].Count
			i++
		}
		for j < len(cb) && cb[j].To == v {
			st.Censored += cb[j].Count
			j++
		}
		if st.Seen+st.Censored > 0 {
			steps = append(steps, st)
		}
	}
	return steps
}

// Step is one latency value of a Kaplan–Meier estimate: how many requests
// had their latency seen at it, and how many were censored at it (their
// latency at least Value).
type Step struct {
	Value, Seen, Censored int64
}

// KaplanMeier is Quantile's estimator over steps in increasing Value order
// (steps with nothing in them are skipped): quantile q of the latency over
// every request counted, seen or censored, and atLeast when it lies among
// the censored (v is then the largest value of all). It allocates nothing,
// so a bootstrap (package change) can call it on each resample.
func KaplanMeier(steps []Step, q float64) (v int64, atLeast bool) {
	var n int64
	for _, st := range steps {
		n += st.Seen + st.Censored
	}
	if n == 0 {
		return 0, false
	}
	q = min(max(q, 0), 1)
	rank := max(math.Floor(q*float64(n)+0.5), 1)
	rank = min(rank, float64(n))
	level := rank / float64(n)
	atRisk := float64(n)
	surv := 1.0
	var last int64
	for _, st := range steps {
		if st.Seen+st.Censored == 0 {
			continue
		}
		last = st.Value
		if st.Seen > 0 {
			surv *= 1 - float64(st.Seen)/atRisk
			// 1e-9: the product of (r − d)/r telescopes to an exact share
			// only up to rounding.
			if 1-surv >= level-1e-9 {
				return st.Value, false
			}
		}
		atRisk -= float64(st.Seen + st.Censored)
	}
	return last, true
}

// TTFTAt reads quantile q of TTFT over every request the set counted, those
// without a first token censored at their wait (Quantile).
func (s *Set) TTFTAt(q float64) (d time.Duration, atLeast, ok bool) {
	return Quantile(s.TTFT, s.TTFTCensored, q)
}

// E2EAt reads quantile q of the end-to-end time over every request the set
// counted, those without an end censored at their wait (Quantile).
func (s *Set) E2EAt(q float64) (d time.Duration, atLeast, ok bool) {
	return Quantile(s.E2E, s.E2ECensored, q)
}

// RecordTTFTCensored records the wait of a request that had no first token
// when it was cut or ended: its TTFT is at least d.
func (s *Set) RecordTTFTCensored(d time.Duration) { s.recordLatency(s.TTFTCensored, d, 1) }

// RecordE2ECensored records the wait of a request that did not complete
// where it would have counted: its end-to-end time is at least d.
func (s *Set) RecordE2ECensored(d time.Duration) { s.recordLatency(s.E2ECensored, d, 1) }
