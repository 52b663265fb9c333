package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers runs what follows a stream passed on from the loop (resume, and
// the client's connection handed back to the server: keepAlive, then
// Server.ServeConn with the next request's handler) on goroutines kept
// between uses, as fasthttp's worker pool does for the connections it
// accepts. That work runs deep: a goroutine started for it grew its stack
// (copied it, at least once) for every request and gave the grown stack
// back at its end, 6% of the proxy's CPU time at one-token streams
// (`runtime.morestack` in a perf profile under BenchmarkPassThrough's
// requests load; 0.7% with workers), where a kept goroutine's stack has
// grown already (until the collector shrinks an idle one's).
//
// Idle workers wait in a stack, the last to go idle on top (its stack is
// the warmest, and the ones at the bottom are the ones to end). One sweep
// every wait ends those idle for longer, in one cut; a worker itself has
// no timer. The sweeper runs only while workers are idle, so a proxy at
// rest is back to the goroutines it started with (the fault suite checks
// that). After close, work runs on a goroutine of its own and no worker
// stays idle.
type workers struct {
	wait time.Duration
	stop chan struct{} // closed by close: the sweeper ends

	mu       sync.Mutex
	idle     []*worker
	closed   bool
	sweeping bool // a sweeper runs
}

type worker struct {
	work  chan func() // one slot: run never waits; nil ends the worker
	since time.Time   // idle since
}

// idleWorkers counts the idle workers of every pool in the process, for
// tests that count goroutines.
var idleWorkers atomic.Int64

// workerWait is how long an idle worker waits for work before it ends
// (fasthttp's MaxIdleWorkerDuration is 10 s).
const workerWait = 2 * time.Second

func newWorkers(wait time.Duration) *workers {
	return &workers{wait: wait, stop: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one when none is idle. It
// never waits: the event loop's goroutine calls it.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		idleWorkers.Add(-1)
		w.mu.Unlock()
		k.work <- f
		return
	}
	closed := w.closed
	w.mu.Unlock()
	if closed {
		go f()
		return
	}
	go w.serve(&worker{work: make(chan func(), 1)}, f)
}

func (w *workers) serve(k *worker, f func()) {
	for f != nil {
		f()
		k.since = time.Now()
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, k)
		idleWorkers.Add(1)
		if !w.sweeping {
			w.sweeping = true
			go w.sweeper()
		}
		w.mu.Unlock()
		f = <-k.work
	}
}

// sweeper ends, every wait, the workers idle for longer than wait: the
// bottom of the stack, cut in one pass. It ends when none is left idle.
func (w *workers) sweeper() {
	t := time.NewTicker(w.wait)
	defer t.Stop()
	var ending []*worker
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			w.mu.Lock()
			n := 0
			for n < len(w.idle) && now.Sub(w.idle[n].since) > w.wait {
				n++
			}
			ending = append(ending[:0], w.idle[:n]...)
			m := copy(w.idle, w.idle[n:])
			clear(w.idle[m:])
			w.idle = w.idle[:m]
			idleWorkers.Add(-int64(n))
			done := len(w.idle) == 0
			if done {
				w.sweeping = false
			}
			w.mu.Unlock()
			for i, k := range ending {
				k.work <- nil
				ending[i] = nil
			}
			if done {
				return
			}
		}
	}
}

// close ends the idle workers and the sweep; work given to run after it
// still runs, each on a goroutine of its own.
func (w *workers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	close(w.stop)
	for i, k := range w.idle {
		k.work <- nil
		w.idle[i] = nil
	}
	idleWorkers.Add(-int64(len(w.idle)))
	w.idle = nil
}

// idleCount is the number of this pool's workers waiting for work.
func (w *workers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}
