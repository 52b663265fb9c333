package replay

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Closed is a closed-loop schedule: len(Bodies) streams, stream i sending
// Bodies[i] again the moment its last request ended. Window, Requests and
// StopOnFailure (Options) stop it.
type Closed struct {
	Options
	// Bodies holds one encoded request body per stream (see Target.Body).
	Bodies []Body
	// Queue, when set, gives every request the next body of a shared
	// queue (a dataset's prompts) instead of its stream's own; Streams
	// says how many streams then run (Bodies is unused).
	Queue   *Queue
	Streams int
	// HearFor, when > 0 with a Window, keeps the loop going after its window
	// closes until the engine has answered every stream (each has had a
	// token event, or a request failed: with StopOnFailure that stops the
	// loop), for at most HearFor: an engine that finds it cannot fit a cell
	// only when its KV cache fills says so when the cache fills, however
	// slow the machine (METHOD.md §3, hearing the engine). The loop's
	// figures are still the window's (Result.End); Result.Heard is when it
	// stopped.
	HearFor time.Duration
	// OnWindow, when set, is called when the window closes, before any
	// hearing.
	OnWindow func()
	// Once sends each body exactly once instead of looping (warm-up).
	Once bool
	// StartAt, when set, is when the streams start (a sharded run's
	// schedule): the connections are dialled first, then the loop waits
	// for it. A StartAt already past starts at once; Result.Start says
	// when the streams really started.
	StartAt time.Time
}

// run dials one connection per stream, then starts every stream at once
// and keeps them going until the window closes, ctx is done or, with Once,
// every stream sent its body once. Requests still running at the end are
// cancelled and recorded as cancelled, or end as cfg.Ending says.
func (cfg Closed) run(parent context.Context) Result {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	ids := cfg.ids()

	// Connections first, so the window measures requests, not TCP set-up.
	streams := len(cfg.Bodies)
	if cfg.Queue != nil {
		streams = cfg.Streams
	}
	conns := make([]*Conn, streams)
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
		begun    atomic.Int64 // requests begun, against Requests
		windowed bool
		fl       = newFlights(cfg.Ending)
	)
	// answered[i]: stream i has had a token event or a failed request.
	answered := make([]atomic.Bool, streams)
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
	for i := range streams {
		conn := conns[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []record.Record
			for ctx.Err() == nil {
				if cfg.Requests > 0 && begun.Add(1) > int64(cfg.Requests) {
					break
				}
				var body Body
				if cfg.Queue != nil {
					var more bool
					if body, more = cfg.Queue.take(); !more {
						break
					}
				} else {
					body = cfg.Bodies[i]
				}
				rctx, done, ok := fl.begin(ctx, conn)
				if !ok {
					break
				}
				rec := record.Record{
					ID:        cfg.Tag + "#" + strconv.FormatInt(ids.Add(1), 10),
					Tag:       cfg.Tag,
					MaxTokens: bodyMax(body, cfg.MaxTokens),
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
	return Result{Records: out, Failed: failOn.Load(), Start: start, End: end, Heard: max(heard, end), Err: parent.Err()}
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
