package replay

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Closed configures a closed loop: len(Bodies) streams, stream i sending
// Bodies[i] again the moment its last request ended.
type Closed struct {
	Target Target
	Clock  record.Clock
	// Bodies holds one encoded request body per stream (see Target.Body).
	Bodies []Body
	// MaxTokens and Stream describe what the bodies ask for; they are copied
	// into every record.
	MaxTokens int
	Stream    bool
	// Tag labels every record, e.g. "C=16384 N=4".
	Tag string
	// IDs gives every request a run-unique id (Tag#n); nil numbers them
	// from 1.
	IDs *atomic.Int64
	// Window, when > 0, ends the loop that long after the streams start:
	// whatever still runs then is cancelled (and recorded as cancelled),
	// or left to end as Ending says.
	Window time.Duration
	// StopOnFailure ends the whole loop after the first failed request:
	// a cell with a failure is Failed whatever else happens (METHOD.md §3),
	// so hammering a broken engine for the rest of the window tells nothing.
	StopOnFailure bool
	// Ending is how the requests still running when the loop stops end.
	Ending Ending
	// HearFor, when > 0 with a Window, keeps the loop going after its window
	// closes until the engine has answered every stream (each has had a
	// token event, or a request failed: with StopOnFailure that stops the
	// loop), for at most HearFor: an engine that finds it cannot fit a cell
	// only when its KV cache fills says so when the cache fills, however
	// slow the machine (METHOD.md §3, hearing the engine). The loop's
	// figures are still the window's (Run.End); Run.Heard is when it
	// stopped.
	HearFor time.Duration
	// OnWindow, when set, is called when the window closes, before any
	// hearing.
	OnWindow func()
	// Tokens, when set, counts tokens as they arrive (live progress).
	Tokens *atomic.Int64
	// Once sends each body exactly once instead of looping (warm-up).
	Once bool
	// StartAt, when set, is when the streams start (a sharded run's
	// schedule): the connections are dialled first, then the loop waits
	// for it. A StartAt already past starts at once; Run.Start says when
	// the streams really started.
	StartAt time.Time
}

// Run is what a closed loop did.
type Run struct {
	// Records of every request, in no particular order.
	Records []record.Record
	// Failed is true when a request failed (record.Outcome.Failed).
	Failed bool
	// Start is when the streams were started, after their connections were
	// dialled: no request was sent before it. End is Start + Window for a
	// loop that ran its window, else when the loop stopped.
	Start, End time.Duration
	// Heard is when the loop stopped: after End when it kept going to
	// hear the engine's answer (Closed.HearFor), else End.
	Heard time.Duration
}

// RunClosed dials one connection per stream, then starts every stream at
// once and keeps them going until the window closes, ctx is done or, with
// Once, every stream sent its body once. Requests still running at the end
// are cancelled and recorded as cancelled, or end as cfg.Ending says.
func RunClosed(ctx context.Context, cfg Closed) Run {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := cfg.IDs
	if ids == nil {
		ids = new(atomic.Int64)
	}

	// Connections first, so the window measures requests, not TCP set-up.
	conns := make([]*Conn, len(cfg.Bodies))
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = NewConn(cfg.Target, cfg.Clock)
		conns[i].Tokens = cfg.Tokens
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = conns[i].Dial(ctx)
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	if !cfg.StartAt.IsZero() {
		if d := time.Until(cfg.StartAt); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	var (
		mu       sync.Mutex
		out      []record.Record
		failOn   atomic.Bool
		stopped  atomic.Int64 // when StopOnFailure stopped the loop, +1
		windowed bool
		fl       = newFlights(cfg.Ending)
	)
	// answered[i]: stream i has had a token event or a failed request.
	answered := make([]atomic.Bool, len(cfg.Bodies))
	start := cfg.Clock.Now()
	if cfg.Window > 0 {
		windowed = true
		t := time.AfterFunc(cfg.Window, func() {
			if cfg.OnWindow != nil {
				cfg.OnWindow()
			}
			if cfg.HearFor <= 0 {
				fl.stop()
				return
			}
			go hear(ctx, fl, cfg.HearFor, func() bool {
				for i := range answered {
					if !answered[i].Load() && !conns[i].streaming.Load() {
						return false
					}
				}
				return true
			})
		})
		defer t.Stop()
	}
	for i, body := range cfg.Bodies {
		conn := conns[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []record.Record
			for ctx.Err() == nil {
				rctx, done, ok := fl.begin(ctx, conn)
				if !ok {
					break
				}
				rec := record.Record{
					ID:        cfg.Tag + "#" + strconv.FormatInt(ids.Add(1), 10),
					Tag:       cfg.Tag,
					MaxTokens: cfg.MaxTokens,
					Stream:    cfg.Stream,
				}
				conn.Do(rctx, body, &rec)
				done()
				mine = append(mine, rec)
				if len(rec.Arrivals) > 0 || rec.Outcome.Failed() {
					answered[i].Store(true)
				}
				if rec.Outcome.Failed() {
					failOn.Store(true)
					if cfg.StopOnFailure && stopped.CompareAndSwap(0, int64(rec.End)+1) {
						fl.stop()
					}
				}
				if cfg.Once {
					break
				}
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	end := cfg.Clock.Now()
	heard := end
	if s := stopped.Load(); s > 0 {
		end = time.Duration(s - 1)
		heard = end
	}
	if windowed && end >= start+cfg.Window {
		end = start + cfg.Window
	}
	if cfg.HearFor <= 0 {
		heard = end
	}
	return Run{Records: out, Failed: failOn.Load(), Start: start, End: end, Heard: max(heard, end)}
}

// hear stops the loop once every stream has been answered (answered), or
// after d, or when ctx ends.
func hear(ctx context.Context, fl *flights, d time.Duration, answered func() bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !answered() {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			fl.stop()
			return
		case <-tick.C:
		}
	}
	fl.stop()
}
