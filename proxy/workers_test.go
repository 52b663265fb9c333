package proxy

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWorkers: work runs on a worker kept from the work before it (its
// goroutine, with the stack it grew), every piece of work runs however many
// come at once, and a worker left idle ends.
func TestWorkers(t *testing.T) {
	w := newWorkers(200 * time.Millisecond)
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

	// Many at once: each runs, on as many workers as it takes.
	const n = 50
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(n)
	for range n {
		w.run(func() { wg.Done(); <-release })
	}
	wg.Wait() // all 50 started: none waited for another
	close(release)
	waitIdle(t, w, n)

	// Idle workers end after the idle time.
	g := runtime.NumGoroutine()
	waitIdle(t, w, 0)
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > g-n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > g-n {
		t.Errorf("goroutines: %d with %d workers idle, %d after they ended; want at most %d", g, n, got, g-n)
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
