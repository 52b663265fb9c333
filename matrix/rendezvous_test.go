package matrix

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/merge"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/shard"
)

// freeAddr is a loopback address with a port nothing listens on now,
// below the ephemeral range (32768 and up on Linux), so no process's
// outgoing connection takes it before the test's server listens there.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 200 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000))))
		if err != nil {
			continue
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

// testRendezvous is a rendezvous whose coordinator's name is not in any
// DNS: Resolve maps it to loopback, as the deploy simulation does.
func testRendezvous(t *testing.T) *Rendezvous {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	return &Rendezvous{Coordinator: "tokentap-matrix-test-0.tokentap-matrix:" + port, Resolve: addr,
		Margin: time.Second, Timeout: 20 * time.Second, Poll: 200 * time.Millisecond}
}

func checkIn(i, count int, plan string) shard.CheckIn {
	return shard.CheckIn{Index: i, Count: count, Plan: plan, Token: newToken(), Host: "host-" + strconv.Itoa(i)}
}

// TestRendezvousStartsTogether: shard 0 coordinates, the others check in
// (one late, one before shard 0 listens); every shard gets the same start,
// a margin after the last check-in. A latecomer after that is refused,
// and says why; the state is readable with a GET.
func TestRendezvousStartsTogether(t *testing.T) {
	rv := testRendezvous(t)
	const count = 3
	starts := make([]time.Time, count)
	errs := make([]error, count)
	var lastIn time.Time
	var wg sync.WaitGroup
	var stop func()
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i {
			case 0:
				time.Sleep(300 * time.Millisecond) // shard 1 tries before anyone listens
				starts[i], stop, errs[i] = rv.meet(context.Background(), checkIn(0, count, "p"), nil)
			case 1:
				starts[i], _, errs[i] = rv.meet(context.Background(), checkIn(1, count, "p"), nil)
			case 2:
				time.Sleep(800 * time.Millisecond) // a slow image pull
				lastIn = time.Now()
				starts[i], _, errs[i] = rv.meet(context.Background(), checkIn(2, count, "p"), nil)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	defer stop()
	for i := range starts {
		if !starts[i].Equal(starts[0]) {
			t.Errorf("shard %d starts at %v, shard 0 at %v", i, starts[i], starts[0])
		}
	}
	if !starts[0].After(lastIn) {
		t.Errorf("start %v is not after the last shard checked in (%v)", starts[0], lastIn)
	}

	// The run is fixed: another process with shard 2's index is turned away.
	_, _, err := rv.meet(context.Background(), checkIn(2, count, "p"), nil)
	var ref *shard.Refusal
	if !errors.As(err, &ref) || !strings.Contains(err.Error(), "shard 2 checked in already from host-2") {
		t.Errorf("a second shard 2: %v; want a refusal naming the first", err)
	}
	resp, err := http.Get("http://" + rv.Resolve + rendezvousPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET the state: HTTP %d", resp.StatusCode)
	}
}

// TestRendezvousRefusals: a shard of another run (shard count, plan) is
// refused at once, and the start passing before a shard hears of it is
// its own refusal.
func TestRendezvousRefusals(t *testing.T) {
	rv := testRendezvous(t)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _, err := rv.meet(ctx, checkIn(0, 3, "p"), nil)
		done <- err
	}()
	for _, tc := range []struct {
		c    shard.CheckIn
		want string
	}{
		{checkIn(1, 4, "p"), "runs with 4 shards; the coordinator's run has 3"},
		{checkIn(1, 3, "q"), "planned another run than shard 0"},
	} {
		_, _, err := rv.meet(context.Background(), tc.c, nil)
		var ref *shard.Refusal
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want a refusal saying %q", tc.c, err, tc.want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the coordinator, cancelled: %v", err)
	}
}

// TestRendezvousTimeouts: shard 0 gives up when a shard never checks in,
// and tells the shards waiting why; a shard with no coordinator gives up
// at its own timeout, with the last error.
func TestRendezvousTimeouts(t *testing.T) {
	rv := testRendezvous(t)
	rv.Timeout = 4 * time.Second // room for shard 1 to check in on a busy machine
	var coordErr, shardErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _, coordErr = rv.meet(context.Background(), checkIn(0, 3, "p"), nil)
	}()
	go func() {
		defer wg.Done()
		client := *rv
		client.Timeout = time.Minute // it hears from the coordinator first
		_, _, shardErr = client.meet(context.Background(), checkIn(1, 3, "p"), nil)
	}()
	wg.Wait()
	if coordErr == nil || !strings.Contains(coordErr.Error(), "gave up after 4s: 2 of 3 shards ready; waiting for shard 2") {
		t.Errorf("coordinator: %v", coordErr)
	}
	if shardErr == nil || !strings.Contains(shardErr.Error(), "waiting for shard 2") {
		t.Errorf("shard 1: %v; want the coordinator's reason", shardErr)
	}

	alone := testRendezvous(t)
	alone.Timeout = 700 * time.Millisecond
	_, _, err := alone.meet(context.Background(), checkIn(1, 2, "p"), nil)
	if err == nil || !strings.Contains(err.Error(), "had no start from shard 0") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("no coordinator: %v; want the timeout with the connection refused", err)
	}
}

func TestRendezvousCheck(t *testing.T) {
	for _, tc := range []struct {
		rv   Rendezvous
		want string
	}{
		{Rendezvous{Coordinator: "job-0.svc:7070"}, ""},
		{Rendezvous{Coordinator: "job-0.svc:7070", Resolve: "127.0.0.1"}, ""},
		{Rendezvous{Coordinator: "job-0.svc:7070", Resolve: "127.0.0.1:9"}, ""},
		{Rendezvous{Coordinator: "job-0.svc"}, "want host:port"},
		{Rendezvous{Coordinator: ":7070"}, "want host:port"},
		{Rendezvous{Coordinator: "job-0.svc:http"}, "not a port number"},
		{Rendezvous{Coordinator: "job-0.svc:7070", Resolve: "localhost"}, "want an IP address"},
		{Rendezvous{Coordinator: "job-0.svc:7070", Margin: time.Millisecond}, "at least 500ms"},
		{Rendezvous{Coordinator: "job-0.svc:7070", Timeout: -time.Second}, "positive"},
	} {
		err := tc.rv.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v; want %q", tc.rv, err, tc.want)
		}
	}
	l, d, _ := (&Rendezvous{Coordinator: "job-0.svc:7070"}).addresses()
	if l != ":7070" || d != "job-0.svc:7070" {
		t.Errorf("listen %q, dial %q", l, d)
	}
	l, d, _ = (&Rendezvous{Coordinator: "job-0.svc:7070", Resolve: "127.0.0.1"}).addresses()
	if l != "127.0.0.1:7070" || d != l {
		t.Errorf("resolved: listen %q, dial %q", l, d)
	}
}

// TestRunByRendezvous: two shards of one matrix meet instead of sharing a
// start time, the second started after the first had probed, planned and
// waited; both run from the one start shard 0 fixed after the second was
// ready, with the salt derived from it, and their documents merge.
func TestRunByRendezvous(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	sc := scenarios.Scenario{Name: "rendezvous", Contexts: []int{0}, Concurrency: []int{2}, Prefill: []int{},
		Window: time.Second, MaxOutput: 64, API: "chat"}
	rv := testRendezvous(t)
	rv.Margin = 3 * time.Second // the clock probe (2 s) and a busy machine
	const count = 2
	res := make([]*result.Result, count)
	errs := make([]error, count)
	var lateLaunch time.Time
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(2 * time.Second) // later than shard 0's whole preparation
				lateLaunch = time.Now()
			}
			res[i], errs[i] = Run(context.Background(), Config{
				Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
				Shard: shard.Spec{Index: i, Count: count}, Rendezvous: rv, Gap: time.Second,
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	a, b := res[0].Sharding, res[1].Sharding
	if !a.StartAt.Equal(b.StartAt) || a.Run != b.Run {
		t.Fatalf("shards started at %v and %v, runs %s and %s: want one start and one run", a.StartAt, b.StartAt, a.Run, b.Run)
	}
	if !a.StartAt.After(lateLaunch) {
		t.Errorf("start %v before the late shard was launched (%v)", a.StartAt, lateLaunch)
	}
	if a.Run != shard.RunID(a.StartAt) {
		t.Errorf("run %s, want the salt derived from the start, %s", a.Run, shard.RunID(a.StartAt))
	}
	if !strings.Contains(strings.Join(res[1].Notes, " "), "fixed by rendezvous") {
		t.Errorf("shard 1's notes do not say how its start was fixed: %q", res[1].Notes)
	}
	m, _, err := merge.Runs([]merge.Input{{Name: "0", Doc: roundTrip(t, res[0])}, {Name: "1", Doc: roundTrip(t, res[1])}})
	if err != nil {
		t.Fatalf("merge: %v", err)
	}
	// What the cell's status is depends on the machine's load (a window
	// opened late on a busy one is Late window, and says so); that both
	// shards measured it from the one start is what this test is about.
	c := m.Cell(0, 2)
	if c == nil || !c.Measured || len(c.Shards) != count {
		t.Fatalf("merged cell %+v: want it measured by both shards", c)
	}
	for _, s := range c.Shards {
		if s.OutputTokens == 0 || !s.ScheduledAt.Equal(c.Shards[0].ScheduledAt) {
			t.Errorf("shard %d: %d tokens, window scheduled at %v (shard 0's at %v)", s.Index, s.OutputTokens, s.ScheduledAt, c.Shards[0].ScheduledAt)
		}
	}
	if c.Status != result.Valid && c.Status != result.LateWindow {
		t.Errorf("merged cell %s: %s", c.Status, c.Reason)
	}
}
