package replay

import (
	"context"
	"slices"
	"sync"
)

// Ending is how a loop ends the requests still running when it stops: its
// window closes (an open loop's after the grace), or StopOnFailure stops
// it. A cancelled ctx cancels every request whatever the Ending.
type Ending struct {
	// LetRun leaves the requests the engine is running to end by
	// themselves, for an engine that a cut stream can leave stuck
	// (engines.Info.CutStreamsStick: Ollama). Those that have had a token
	// event run to their end, and so do the Slots earliest sent of the
	// others: one may be in prefill, or about to take a slot a stream that
	// is sending its last chunks has just given back, and its first token
	// may be on its way. Only the rest, waiting in the engine's queue
	// behind them, are cancelled. Without LetRun every request still
	// running is cancelled at once.
	LetRun bool
	// Slots is how many requests the engine runs at once; 0 (unknown)
	// lets every request run to its end.
	Slots int
	// OnStop, when set, is called when the loop stops with the number of
	// requests left to end by themselves (0 without LetRun).
	OnStop func(running int)
}

// flights are a loop's requests in flight, so that stopping the loop ends
// them as its Ending says.
type flights struct {
	end     Ending
	mu      sync.Mutex
	stopped bool
	seq     uint64
	m       map[uint64]flight
}

type flight struct {
	conn   *Conn
	cancel context.CancelFunc
}

func newFlights(end Ending) *flights {
	return &flights{end: end, m: map[uint64]flight{}}
}

// begin registers a request about to be sent on c and returns its context
// (a child of ctx) and the function to call when it is over. ok is false,
// and nothing is registered, once the loop has stopped.
func (f *flights) begin(ctx context.Context, c *Conn) (rctx context.Context, done func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, nil, false
	}
	rctx, cancel := context.WithCancel(ctx)
	f.seq++
	id := f.seq
	f.m[id] = flight{conn: c, cancel: cancel}
	return rctx, func() {
		cancel()
		f.mu.Lock()
		delete(f.m, id)
		f.mu.Unlock()
	}, true
}

// stop ends the loop: no request begins after it, and those in flight are
// cancelled or left to run as the Ending says. Only the first call acts.
func (f *flights) stop() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	var waiting []uint64 // no token event yet, in the order sent
	running := 0
	for id, fl := range f.m {
		switch {
		case !f.end.LetRun:
			fl.cancel()
		case fl.conn.streaming.Load():
			running++
		default:
			waiting = append(waiting, id)
		}
	}
	if f.end.LetRun {
		slices.Sort(waiting)
		keep := len(waiting)
		if f.end.Slots > 0 {
			keep = min(keep, f.end.Slots)
		}
		for _, id := range waiting[keep:] {
			f.m[id].cancel()
		}
		running += keep
	}
	f.mu.Unlock()
	if f.end.OnStop != nil {
		f.end.OnStop(running)
	}
}
