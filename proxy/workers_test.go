package proxy

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkers: work runs on the worker the work before it left idle (its
// goroutine, with the stack it grew); work given at once runs at once, on
// as many workers as it takes; idle workers end after their wait, and the
// sweeper with the last of them (a proxy at rest has the goroutines it
// started with), and at close, after which work still runs.
func TestWorkers(t *testing.T) {
	g0 := runtime.NumGoroutine()
	w := newWorkers(time.Hour)
	ids := make(chan uint64, 1)
	deep := func() {
		grow(64) // a few KiB of stack, as serving a request takes
		ids <- goid()
	}
	w.run(deep)
	first := <-ids
	for i := range 20 {
		waitIdle(t, w, 1)
		w.run(deep)
		if id := <-ids; id != first {
			t.Fatalf("work %d ran on goroutine %d, not on the idle worker %d", i+2, id, first)
		}
	}

	const n = 50
	var started sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	for range n {
		w.run(func() { started.Done(); <-release })
	}
	started.Wait() // all 50 run at once: none waited for another
	close(release)
	waitIdle(t, w, n)

	w.close()
	if got := w.idleCount(); got != 0 {
		t.Errorf("%d workers idle after close", got)
	}
	done := make(chan struct{})
	w.run(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("work given after close did not run")
	}
	waitGoroutines(t, g0)

	// Idle for longer than their wait, workers end at the next sweep.
	w = newWorkers(20 * time.Millisecond)
	release = make(chan struct{})
	started.Add(5)
	for range 5 {
		w.run(func() { started.Done(); <-release })
	}
	started.Wait()
	close(release)
	for deadline := time.Now().Add(10 * time.Second); w.idleCount() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still idle long after their wait", w.idleCount())
		}
	}
	waitGoroutines(t, g0) // the sweeper too, with nothing left to sweep
	w.close()
}

// TestWorkersUnderLoad: work given from many goroutines at once, as
// workers go idle, end (a wait of microseconds) and are taken, runs once
// each.
func TestWorkersUnderLoad(t *testing.T) {
	for _, wait := range []time.Duration{time.Microsecond, 50 * time.Microsecond, time.Millisecond} {
		w := newWorkers(wait)
		const senders, each = 8, 2000
		var ran [senders * each]atomic.Int32
		var all sync.WaitGroup
		all.Add(senders * each)
		for s := range senders {
			go func() {
				for i := range each {
					k := s*each + i
					w.run(func() { ran[k].Add(1); all.Done() })
				}
			}()
		}
		all.Wait()
		w.close()
		for k := range ran {
			if n := ran[k].Load(); n != 1 {
				t.Fatalf("wait %v: work %d ran %d times", wait, k, n)
			}
		}
	}
}

// waitIdle waits until w counts n idle workers.
func waitIdle(t *testing.T, w *workers, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); w.idleCount() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers idle, want %d", w.idleCount(), n)
		}
	}
}

// waitGoroutines waits until no more goroutines run than g.
func waitGoroutines(t *testing.T, g int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, want at most %d\n%s", runtime.NumGoroutine(), g, buf[:runtime.Stack(buf, true)])
		}
	}
}

//go:noinline
func grow(n int) int {
	var pad [64]byte
	pad[n%64] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return grow(n-1) + int(pad[n%64])
}

// goid is the calling goroutine's id, from its stack trace's first line
// ("goroutine 18 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	var id uint64
	for _, c := range b[len("goroutine "):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
