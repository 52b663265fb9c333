package wire

import (
	"slices"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Reported is one request as another load generator (a peer: vLLM's bench
// serve, aiperf, GuideLLM, genai-bench) reports it, read from its output:
// what names the request, where the peer keeps it, and its figures.
type Reported struct {
	ResponseID string // the engine's response id, where the peer keeps it
	RequestID  string // the X-Request-Id the peer sent, where it names its requests
	TTFT       time.Duration
	// ITL is the peer's own per-request time between tokens (its Span
	// says what it spans); 0 when it gives none.
	ITL time.Duration
	// Gaps are the times between its token events, where it gives each.
	Gaps []time.Duration
}

// Key is what pairs a peer's reports with the wire's exchanges.
type Key int

const (
	ByResponseID Key = iota // the engine's response id
	ByRequestID             // the X-Request-Id header the peer sent
	// ByEndOrder: the peer lists the requests it completed in the order
	// they ended, and the wire's streams that completed (package tap's
	// outcome OK) are taken in the order their last bytes came. Requests
	// that end within a millisecond of each other can trade places;
	// Matched.Close counts those pairs.
	ByEndOrder
)

// Span is what a peer's per-request inter-token latency spans; either is
// divided by the request's output tokens less one.
type Span int

const (
	FirstToLast Span = iota // the first token event to the last
	FirstToEnd              // the first token event to the response's end ([DONE], else its last byte)
)

// PeerPair is a peer's report beside the wire's exchange of the same
// request.
type PeerPair struct {
	Rep  *Reported
	Wire *Exchange
}

// Matched is what MatchReported paired and what it could not.
type Matched struct {
	Pairs     []PeerPair
	Unmatched int // reports without an exchange
	Left      int // streamed exchanges no report names: a peer's probe or warm-up requests, or ones it did not report
	Close     int // ByEndOrder: pairs whose exchange ended within a millisecond of another's
}

// closeEnds is how near two ends are for ByEndOrder to be unsure of their
// order.
const closeEnds = time.Millisecond

// MatchReported pairs reports with the streamed exchanges (Wire.Stream)
// among xs.
func MatchReported(rs []Reported, xs []Exchange, key Key) Matched {
	var streams []*Exchange
	for i := range xs {
		if xs[i].Wire.Stream {
			streams = append(streams, &xs[i])
		}
	}
	var m Matched
	used := make(map[*Exchange]bool, len(streams))
	switch key {
	case ByEndOrder:
		all := len(streams)
		streams = slices.DeleteFunc(streams, func(x *Exchange) bool { return x.Wire.Outcome != record.OK })
		slices.SortStableFunc(streams, func(a, b *Exchange) int { return compareDur(endOf(a), endOf(b)) })
		n := min(len(rs), len(streams))
		for i := 0; i < n; i++ {
			m.Pairs = append(m.Pairs, PeerPair{&rs[i], streams[i]})
			used[streams[i]] = true
			e := endOf(streams[i])
			if (i > 0 && e-endOf(streams[i-1]) <= closeEnds) || (i+1 < len(streams) && endOf(streams[i+1])-e <= closeEnds) {
				m.Close++
			}
		}
		m.Unmatched = len(rs) - n
		m.Left = all - n
		return m
	default:
		name := func(x *Exchange) string {
			if key == ByRequestID {
				return x.RequestID
			}
			return x.Wire.ResponseID
		}
		by := make(map[string]*Exchange, len(streams))
		for _, x := range streams {
			if id := name(x); id != "" {
				if _, dup := by[id]; !dup {
					by[id] = x
				}
			}
		}
		for i := range rs {
			id := rs[i].ResponseID
			if key == ByRequestID {
				id = rs[i].RequestID
			}
			x := by[id]
			if id == "" || x == nil || used[x] {
				m.Unmatched++
				continue
			}
			used[x] = true
			m.Pairs = append(m.Pairs, PeerPair{&rs[i], x})
		}
	}
	m.Left = len(streams) - len(used)
	return m
}

// endOf is when an exchange's response ended on the wire: its last byte,
// or its last token event when it did not end.
func endOf(x *Exchange) time.Duration {
	if x.Last != 0 {
		return x.Last
	}
	if n := len(x.Wire.Arrivals); n > 0 {
		return x.Wire.Arrivals[n-1]
	}
	return x.Wire.Sent
}

func compareDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PeerErrors are a peer's errors against the wire, peer − wire, one value
// per request (or per gap), in the order of the pairs.
type PeerErrors struct {
	TTFT    []time.Duration
	TTFTRel []float64 // peer TTFT / wire TTFT − 1
	ITL     []time.Duration
	Gap     []time.Duration // by event index, up to the shorter of the two
	// GapsDiffer counts pairs whose numbers of gaps differ (the peer's and
	// the wire's token events); their gaps are compared up to the shorter.
	GapsDiffer int
}

// CompareReported computes the errors of every pair. The wire's TTFT is
// its first token event's first byte − the request's last byte; its ITL
// WireITL's over the peer's span.
func CompareReported(pairs []PeerPair, span Span) PeerErrors {
	var e PeerErrors
	for _, p := range pairs {
		r, w := p.Rep, &p.Wire.Wire
		if !p.Wire.ReqDone {
			continue
		}
		if wt, ok := w.TTFT(); ok && wt > 0 && r.TTFT > 0 {
			e.TTFT = append(e.TTFT, r.TTFT-wt)
			e.TTFTRel = append(e.TTFTRel, float64(r.TTFT)/float64(wt)-1)
		}
		if wi, ok := WireITL(p.Wire, span); ok && r.ITL > 0 {
			e.ITL = append(e.ITL, r.ITL-wi)
		}
		if r.Gaps == nil {
			continue
		}
		if len(r.Gaps) != len(w.Arrivals)-1 {
			e.GapsDiffer++
		}
		for i := 1; i < len(w.Arrivals) && i-1 < len(r.Gaps); i++ {
			e.Gap = append(e.Gap, r.Gaps[i-1]-(w.Arrivals[i]-w.Arrivals[i-1]))
		}
	}
	return e
}

// WireITL is a stream's time between tokens as the wire saw it, over the
// given span and divided by its output tokens (its token events') less
// one; ok is false with fewer than two.
func WireITL(x *Exchange, span Span) (time.Duration, bool) {
	w := &x.Wire
	n := w.ArrivedTokens()
	if len(w.Arrivals) == 0 || n < 2 {
		return 0, false
	}
	end := w.Arrivals[len(w.Arrivals)-1]
	if span == FirstToEnd {
		switch {
		case w.End != 0:
			end = w.End
		case x.Last != 0:
			end = x.Last
		}
	}
	return (end - w.Arrivals[0]) / time.Duration(n-1), true
}

// PeerTokens is the wire's view of the pairs' run: their output tokens
// (token events') and the time from the first request's last byte to the
// last token event.
func PeerTokens(pairs []PeerPair) (tokens int, from, to time.Duration) {
	for i, p := range pairs {
		w := &p.Wire.Wire
		tokens += w.ArrivedTokens()
		if i == 0 || w.Sent < from {
			from = w.Sent
		}
		if last, ok := w.Last(); ok && last > to {
			to = last
		}
	}
	return tokens, from, to
}
