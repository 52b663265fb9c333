package matrix

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rendezvousState is the coordinator's state, as GET shows it.
func rendezvousState(t *testing.T, rv *Rendezvous) answer {
	t.Helper()
	resp, err := http.Get("http://" + rv.Resolve + rendezvousPath)
	if err != nil {
		return answer{Error: err.Error()}
	}
	defer resp.Body.Close()
	var a answer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return a
}

// waitState polls the coordinator until its state contains want.
func waitState(t *testing.T, rv *Rendezvous, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if a := rendezvousState(t, rv); strings.Contains(a.Waiting, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the coordinator never said %q (last: %+v)", want, rendezvousState(t, rv))
}

// TestRendezvousShardThatLeftIsForgotten: a shard whose process dies
// after checking in (OOM-killed, evicted, Ctrl-C on a hand-started
// machine) closes its held check-in. The coordinator must not count it
// as ready: otherwise the start is fixed with a shard that will never
// run (the others measure the whole schedule for a run the merge
// refuses), and the same index started again (the Job controller's
// replacement pod, a person restarting it) is refused for good as
// "two processes run it". Found by review-30: with real processes,
// kill -9 of shard 1 after its check-in, a new shard 1 exited 2 with
// "shard 1 checked in already … two processes run it", and shards 0
// and 2 then started together and exited 0.
func TestRendezvousShardThatLeftIsForgotten(t *testing.T) {
	rv := testRendezvous(t)
	const count = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	starts := make([]time.Time, count+1)
	errs := make([]error, count+1)
	var stop func()
	wg.Add(1)
	go func() {
		defer wg.Done()
		starts[0], stop, errs[0] = rv.meet(ctx, checkIn(0, count, "p"), nil)
	}()
	// Shard 1's first process checks in, then dies.
	dying, die := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := rv.meet(dying, checkIn(1, count, "p"), nil)
		first <- err
	}()
	waitState(t, rv, "2 of 3 shards ready; waiting for shard 2")
	die()
	<-first
	waitState(t, rv, "1 of 3 shards ready; waiting for shards 1, 2")

	// Shard 2 comes: the start must wait for shard 1.
	wg.Add(1)
	go func() {
		defer wg.Done()
		starts[2], _, errs[2] = rv.meet(ctx, checkIn(2, count, "p"), nil)
	}()
	waitState(t, rv, "2 of 3 shards ready; waiting for shard 1")
	if a := rendezvousState(t, rv); !a.Start.IsZero() {
		t.Fatalf("the start was fixed at %s with shard 1 gone", a.Start)
	}
	// Shard 1 again, a new process: it joins, and all start together.
	wg.Add(1)
	go func() {
		defer wg.Done()
		starts[1], _, errs[1] = rv.meet(ctx, checkIn(1, count, "p"), nil)
	}()
	wg.Wait()
	if stop != nil {
		defer stop()
	}
	for i := range count {
		if errs[i] != nil {
			t.Errorf("shard %d: %v", i, errs[i])
		} else if !starts[i].Equal(starts[0]) {
			t.Errorf("shard %d starts at %s, shard 0 at %s", i, starts[i], starts[0])
		}
	}
}

// TestRendezvousSaysWhyItWaits: a shard that cannot reach shard 0 yet
// (its name not in DNS, its pod not running, a NetworkPolicy in the way)
// retries for up to --rendezvous-timeout, 10 minutes in the Job. Its log
// must say what it is waiting on while it waits, not only when it gives
// up: a person watching kubectl logs otherwise sees one "matrix:
// rendezvous" line and then ten silent minutes.
func TestRendezvousSaysWhyItWaits(t *testing.T) {
	rv := testRendezvous(t) // nothing listens: connection refused
	rv.Timeout = 2 * time.Second
	var mu sync.Mutex
	var said []string
	_, _, err := rv.meet(context.Background(), checkIn(1, 2, "p"), func(s string) {
		mu.Lock()
		said = append(said, s)
		mu.Unlock()
	})
	if err == nil {
		t.Fatal("no coordinator, yet a start")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) == 0 || !strings.Contains(strings.Join(said, "\n"), "refused") {
		t.Errorf("while it retried, the shard said %q; want the reason it cannot reach shard 0 (connection refused)", said)
	}
}
