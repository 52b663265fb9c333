package proxy

import (
	"slices"
	"sync"
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
// grown already.
type workers struct {
	mu   sync.Mutex
	idle []*worker // the last to go idle last: its stack is the warmest
	wait time.Duration
}

type worker struct{ work chan func() }

// workerWait is how long an idle worker waits for work before it ends
// (fasthttp's MaxIdleWorkerDuration is 10 s).
const workerWait = 2 * time.Second

func newWorkers(wait time.Duration) *workers { return &workers{wait: wait} }

// run runs f on an idle worker, or on a new one when none is idle.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		k.work <- f // buffered: the worker may not be waiting yet
		return
	}
	w.mu.Unlock()
	go w.serve(&worker{work: make(chan func(), 1)}, f)
}

func (w *workers) serve(k *worker, f func()) {
	t := time.NewTimer(w.wait)
	defer t.Stop()
	for {
		f()
		f = nil // what f held is not kept while the worker waits
		w.mu.Lock()
		w.idle = append(w.idle, k)
		w.mu.Unlock()
		t.Reset(w.wait)
		select {
		case f = <-k.work:
		case <-t.C:
			w.mu.Lock()
			i := slices.Index(w.idle, k)
			if i >= 0 {
				w.idle = slices.Delete(w.idle, i, i+1)
			}
			w.mu.Unlock()
			if i >= 0 {
				return
			}
			f = <-k.work // run took it as its wait ended: the work is coming
		}
	}
}

// idleCount is the number of workers waiting for work.
func (w *workers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}
