package wire

import (
	"math"
	"slices"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Pair is one of tokentap's records beside the wire's measurement of the
// same exchange (matched by the engine's response id).
type Pair struct {
	Rec  *record.Record
	Wire *Exchange
}

// Match pairs records with exchanges by response id. Records without a
// response id or without an exchange are counted in unmatched; an id two
// exchanges share (a capture holding both sides of a proxy: split them by
// port first) pairs with the first.
func Match(recs []record.Record, xs []Exchange) (pairs []Pair, unmatched int) {
	byID := make(map[string]*Exchange, len(xs))
	for i := range xs {
		if id := xs[i].Wire.ResponseID; id != "" {
			if _, dup := byID[id]; !dup {
				byID[id] = &xs[i]
			}
		}
	}
	for i := range recs {
		x := byID[recs[i].ResponseID]
		if recs[i].ResponseID == "" || x == nil {
			unmatched++
			continue
		}
		pairs = append(pairs, Pair{&recs[i], x})
	}
	return pairs, unmatched
}

// Errors are tokentap's errors against the wire, one value per request
// (or per gap between token events), in the order of the pairs.
type Errors struct {
	TTFTRel []float64       // record TTFT / wire TTFT − 1
	TTFTAbs []time.Duration // record TTFT − wire TTFT
	Gap     []time.Duration // each gap between token events: record − wire
	WireGap []time.Duration // the wire's gaps themselves
	E2E     []time.Duration // end to end (Sent to End), record − wire, of requests both saw end with [DONE]
	// Offset is the record's Sent as wall time (Wall) − the wire's Sent: how
	// far tokentap's wall clock and the capture's disagree, plus how early or
	// late tokentap took its Sent. It moves throughput's interval only.
	Offset []time.Duration
	// EventsDiffer counts pairs whose token event counts differ (a request
	// cut at the window's end can lose its last event on either side);
	// their gaps are compared up to the shorter.
	EventsDiffer int
}

// Compare computes the errors of every pair.
func Compare(pairs []Pair) Errors {
	var e Errors
	for _, p := range pairs {
		r, w := p.Rec, &p.Wire.Wire
		if !p.Wire.ReqDone {
			continue
		}
		e.Offset = append(e.Offset, time.Duration(r.Wall.UnixNano())-w.Sent)
		if rt, ok := r.TTFT(); ok {
			if wt, ok := w.TTFT(); ok && wt > 0 {
				e.TTFTRel = append(e.TTFTRel, float64(rt)/float64(wt)-1)
				e.TTFTAbs = append(e.TTFTAbs, rt-wt)
			}
		}
		n := min(len(r.Arrivals), len(w.Arrivals))
		if len(r.Arrivals) != len(w.Arrivals) {
			e.EventsDiffer++
		}
		for i := 1; i < n; i++ {
			rg, wg := r.Arrivals[i]-r.Arrivals[i-1], w.Arrivals[i]-w.Arrivals[i-1]
			e.Gap = append(e.Gap, rg-wg)
			e.WireGap = append(e.WireGap, wg)
		}
		if r.Outcome == record.OK && w.Outcome == record.OK {
			e.E2E = append(e.E2E, (r.End-r.Sent)-(w.End-w.Sent))
		}
	}
	return e
}

// Wall is a record's offset at as wall time: the record's Wall is its Sent.
func Wall(r *record.Record, at time.Duration) time.Duration {
	return time.Duration(r.Wall.UnixNano()) + at - r.Sent
}

// Tokens counts the tokens that arrived in [from, to) (wall times, as
// offsets from the Unix epoch) by the records and by the wire's exchanges.
func Tokens(recs []record.Record, xs []Exchange, from, to time.Duration) (byRecords, byWire int) {
	for i := range recs {
		r := &recs[i]
		for j, a := range r.Arrivals {
			if at := Wall(r, a); at >= from && at < to {
				byRecords += r.EventTokens(j)
			}
		}
	}
	for i := range xs {
		w := &xs[i].Wire
		for j, a := range w.Arrivals {
			if a >= from && a < to {
				byWire += w.EventTokens(j)
			}
		}
	}
	return byRecords, byWire
}

// Hop is what one hop (a proxy) added, measured on the wire on both its
// sides: the exchanges clients had with it (front) and those it had with
// the engine (back), matched by response id.
type Hop struct {
	Matched int
	// Event is each token event's delay: its first byte reaching the client
	// leg − its first byte on the engine leg, matched by index.
	Event []time.Duration
	// Request is each request's delay: its last byte on the engine leg −
	// its last byte on the client leg.
	Request []time.Duration
	// TTFT is what the hop added to each request's time to first token:
	// the client leg's (request's last byte to the first event's first
	// byte) − the engine leg's. It is the way in (Request) and the first
	// event's way out together, as a client's figure holds both.
	TTFT []time.Duration
}

// MeasureHop matches front and back exchanges by response id.
func MeasureHop(front, back []Exchange) Hop {
	byID := make(map[string]*Exchange, len(back))
	for i := range back {
		if id := back[i].Wire.ResponseID; id != "" {
			if _, dup := byID[id]; !dup {
				byID[id] = &back[i]
			}
		}
	}
	var h Hop
	for i := range front {
		f := &front[i]
		b := byID[f.Wire.ResponseID]
		if f.Wire.ResponseID == "" || b == nil {
			continue
		}
		h.Matched++
		if f.ReqDone && b.ReqDone {
			h.Request = append(h.Request, b.Wire.Sent-f.Wire.Sent)
			if len(f.Wire.Arrivals) > 0 && len(b.Wire.Arrivals) > 0 {
				h.TTFT = append(h.TTFT, (f.Wire.Arrivals[0]-f.Wire.Sent)-(b.Wire.Arrivals[0]-b.Wire.Sent))
			}
		}
		n := min(len(f.Wire.Arrivals), len(b.Wire.Arrivals))
		for j := 0; j < n; j++ {
			h.Event = append(h.Event, f.Wire.Arrivals[j]-b.Wire.Arrivals[j])
		}
	}
	return h
}

// Through is the exchange a client had with a proxy as the proxy saw it:
// the request as it reached the proxy (front's Sent) and the events as
// they left the engine (back's). Matched with the proxy's own records, it
// gives the proxy's errors as Compare does the load generator's.
func Through(front, back []Exchange) []Exchange {
	byID := make(map[string]*Exchange, len(back))
	for i := range back {
		if id := back[i].Wire.ResponseID; id != "" {
			byID[id] = &back[i]
		}
	}
	var out []Exchange
	for i := range front {
		f := &front[i]
		b := byID[f.Wire.ResponseID]
		if f.Wire.ResponseID == "" || b == nil {
			continue
		}
		x := *b
		x.ReqDone = f.ReqDone
		x.Wire.Sent, x.Wire.Wall = f.Wire.Sent, f.Wire.Wall
		out = append(out, x)
	}
	return out
}

// Quantile is the q-quantile (0..1) of xs by nearest rank; NaN for none.
// xs is sorted in place.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// Millis turns durations into milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}
