package replay

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Open is an open-loop schedule: request i is sent at offset At[i] from
// the loop's start, whatever is still running (arrivals do not wait for
// answers, as in vllm bench serve --request-rate), each on a connection of
// its own while it runs. Options.Window ends the sending: no request is
// sent at or after it; Requests limits how many are sent, and where it
// cuts the window's schedule short the loop ends once they have, before
// the window's end (whichever comes first).
type Open struct {
	Options
	// Bodies[i] is sent at At[i] (ascending offsets).
	Bodies []Body
	At     []time.Duration
	// Grace is how long the requests still running when the window closes
	// get to end (their latencies count); they are cancelled after it.
	Grace time.Duration
}

// PoissonArrivals returns the arrival offsets of requests at rate per
// second over window w: a Poisson process conditioned on its count, the
// expected round(rate × w) arrivals drawn uniformly over the window and
// sorted. Given its count, a Poisson process's arrival times are exactly
// such order statistics, so the gaps are as random as a Poisson process's
// (exponential, in the limit) while the count, and so the achieved rate,
// is the one asked for rather than off by ±√(rate × w). seed makes the
// schedule reproducible.
func PoissonArrivals(rate float64, w time.Duration, seed uint64) []time.Duration {
	n := int(math.Round(rate * w.Seconds()))
	if n < 1 || w <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = time.Duration(rng.Int64N(int64(w)))
	}
	slices.Sort(at)
	return at
}

// run runs the open loop. A cancelled ctx cancels everything and returns
// the records so far.
func (cfg Open) run(ctx context.Context) Result {
	ids := cfg.ids()
	jobs := make([]openJob, 0, len(cfg.At))
	countEnds := false // the count, not the window, ends the schedule
	for i, at := range cfg.At {
		if cfg.Window > 0 && at >= cfg.Window {
			break
		}
		if cfg.Requests > 0 && i >= cfg.Requests {
			countEnds = true
			break
		}
		if i >= len(cfg.Bodies) {
			break
		}
		jobs = append(jobs, openJob{at: at, target: cfg.Target, body: cfg.Bodies[i],
			rec: record.Record{ID: cfg.Tag + "#" + strconv.FormatInt(ids.Add(1), 10), Tag: cfg.Tag, MaxTokens: bodyMax(cfg.Bodies[i], cfg.MaxTokens), Stream: cfg.Stream}})
	}
	return runOpen(ctx, cfg.Clock, jobs, openOpts{window: cfg.Window, grace: cfg.Grace, stopOnFailure: cfg.StopOnFailure, ending: cfg.Ending,
		tokens: cfg.Tokens, dial: min(len(jobs), 16), countEnds: countEnds && cfg.Window > 0})
}

// openJob is one request of an open loop.
type openJob struct {
	at     time.Duration // offset from the loop's start
	target Target
	body   Body
	rec    record.Record
	// stopAfter tokens, or after stopIn when none came: where a replayed
	// request's client cancelled.
	stopAfter int
	stopIn    time.Duration
}

type openOpts struct {
	window, grace time.Duration // window 0: no window (send every job, wait for all)
	stopOnFailure bool
	ending        Ending
	tokens        *atomic.Int64
	dial          int // connections to dial before the start
	// countEnds: a request count cut the window's schedule short, so the
	// loop ends when those requests have, if before the window's end
	// (whichever comes first).
	countEnds bool
}

// runOpen sends each job at its offset from the start on a connection of
// its own (idle ones are reused, per target) and waits for them all.
func runOpen(parent context.Context, clock record.Clock, jobs []openJob, o openOpts) Result {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		poolMu sync.Mutex
		pool   = map[Target][]*Conn{}
	)
	get := func(t Target) *Conn {
		poolMu.Lock()
		defer poolMu.Unlock()
		if p := pool[t]; len(p) > 0 {
			c := p[len(p)-1]
			pool[t] = p[:len(p)-1]
			return c
		}
		c := NewConn(t, clock)
		c.Tokens = o.tokens
		return c
	}
	put := func(t Target, c *Conn) {
		poolMu.Lock()
		pool[t] = append(pool[t], c)
		poolMu.Unlock()
	}
	defer func() {
		for _, p := range pool {
			for _, c := range p {
				c.Close()
			}
		}
	}()
	// Connections first, so the first arrivals measure requests, not TCP
	// set-up.
	if o.dial > 0 && len(jobs) > 0 {
		var wg sync.WaitGroup
		conns := make([]*Conn, o.dial)
		for i := range conns {
			conns[i] = get(jobs[0].target)
			wg.Add(1)
			go func() { defer wg.Done(); _ = conns[i].Dial(ctx) }()
		}
		wg.Wait()
		for _, c := range conns {
			put(jobs[0].target, c)
		}
	}

	var (
		wg         sync.WaitGroup
		failed     atomic.Bool
		stopped    atomic.Int64 // the failure's end + 1, once it stopped the loop
		lates      = make([]time.Duration, 0, len(jobs))
		unsentLate time.Duration
		sent       = 0
		stopSend   = make(chan struct{})
		stopOnce   sync.Once
		err        error
		fl         = newFlights(o.ending)
	)
	start := clock.Now()
	if o.window > 0 && o.grace >= 0 {
		t := time.AfterFunc(o.window+o.grace, fl.stop) // what runs after the grace is cancelled
		defer t.Stop()
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
loop:
	for i := range jobs {
		j := &jobs[i]
		if wait := start + j.at - clock.Now(); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				break loop
			case <-stopSend:
				timer.Stop()
				break loop
			case <-timer.C:
			}
		} else {
			select {
			case <-ctx.Done():
				break loop
			case <-stopSend:
				break loop
			default:
			}
		}
		if now := clock.Now(); o.window > 0 && now-start >= o.window && now-(start+j.at) > SendLateTolerance(o.window) {
			// Due in the window but woken after its end, later than a
			// timer's wake-up can be (a stalled machine): not sent, and
			// counted (Result.Unsent), as are the rest. A request due in
			// the last instant of the window (bursty gaps put one there
			// often) and woken a little after its end is sent: the
			// window then ends at its send (below), so the cell counts
			// every request it sent.
			unsentLate = now - (start + j.at)
			break loop
		}
		lates = append(lates, clock.Now()-(start+j.at))
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := get(j.target)
			c.StopAfter = j.stopAfter
			rctx, done, ok := fl.begin(ctx, c)
			if !ok {
				// Stopped since the loop sent it: it ends cancelled,
				// as it did when the loop had one context.
				var cancelReq context.CancelFunc
				rctx, cancelReq = context.WithCancel(ctx)
				cancelReq()
				done = func() {}
			}
			if j.stopIn > 0 {
				// A cancel, not a deadline: a dial given the deadline
				// could time out before the context says it is done,
				// and read as the engine's failure.
				var cancelReq context.CancelFunc
				rctx, cancelReq = context.WithCancel(rctx)
				t := time.AfterFunc(j.stopIn, cancelReq)
				defer t.Stop()
				defer cancelReq()
			}
			c.Do(rctx, j.body, &j.rec)
			done() // before c can go back to the pool
			j.body = Body{}
			if j.rec.Outcome.Failed() {
				failed.Store(true)
				if o.stopOnFailure && stopped.CompareAndSwap(0, int64(j.rec.End)+1) {
					stopOnce.Do(func() { close(stopSend) })
					fl.stop()
				}
			}
			if j.rec.Outcome == record.OK {
				put(j.target, c)
			} else {
				c.Close()
			}
		}()
	}
	// The window is a fixed duration: its figures are per window second
	// even when every request ended before it closed.
	if o.window > 0 {
		var done chan struct{} // nil, never ready, unless the count ends the loop
		if o.countEnds {
			done = make(chan struct{})
			go func() { wg.Wait(); close(done) }()
		}
		if wait := start + o.window - clock.Now(); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-stopSend:
			case <-timer.C:
			case <-done:
			}
			timer.Stop()
		}
	}
	wg.Wait()
	err = parent.Err()
	out := make([]record.Record, 0, sent)
	for i := 0; i < sent; i++ {
		out = append(out, jobs[i].rec)
	}
	end := clock.Now()
	switch {
	case stopped.Load() > 0:
		end = time.Duration(stopped.Load() - 1)
	case o.window > 0:
		end = min(end, start+o.window)
		// A request due in the window but sent after its end (woken
		// late, or stamped by the kernel after it) stretches the window
		// to its send: every request sent is in the window it counts in.
		for i := range out {
			if s := out[i].Sent; s >= end {
				end = s + 1
			}
		}
	}
	var late Late
	if len(lates) > 0 {
		slices.Sort(lates)
		late = Late{Max: lates[len(lates)-1], Median: lates[len(lates)/2]}
	}
	return Result{Records: out, Start: start, End: end, Heard: end, Late: late, Failed: failed.Load(), Err: err, Unsent: len(jobs) - sent, UnsentLate: unsentLate}
}

// SendLateTolerance is how far after its time an open loop may send a
// request due in a window of length w once the window has closed: 1% of
// the window, at least 100 ms (as a sharded window may open late,
// shard.LateTolerance), far beyond a timer's usual wake-up of well under
// a millisecond; later than that, the machine stalled, and the request is
// not sent.
func SendLateTolerance(w time.Duration) time.Duration { return max(w/100, 100*time.Millisecond) }
