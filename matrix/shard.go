package matrix

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/shard"
)

// A sharded run (METHOD §10): Config.Shard names this load generator's
// shard, Config.StartAt the common start and Config.Gap the gap before each
// window. Every shard computes the same plan from the same facts, so cell
// slot k (the k-th cell that is run, in plan order) is the same cell on
// every shard, and its window opens at the same instant on all of them.

// DefaultGap is the gap before each window of a sharded run when none is
// given: as long as the seed matrix's window. Long contexts on slow engines
// need more (their warm-up is N prefills); a window opened late says so.
const DefaultGap = 30 * time.Second

func (r *runner) sharded() bool { return r.cfg.Shard.Sharded() }

// checkShard validates the sharded run's settings before anything is sent.
func (r *runner) checkShard() error {
	if !r.sharded() {
		return nil
	}
	if err := r.cfg.Shard.Validate(); err != nil {
		return err
	}
	rv := r.cfg.Rendezvous
	switch {
	case rv != nil && !r.cfg.StartAt.IsZero():
		return fmt.Errorf("shard %s: a start time and a rendezvous: give one (the rendezvous fixes the start once every shard is ready)", r.cfg.Shard)
	case rv != nil:
		if err := rv.Check(); err != nil {
			return fmt.Errorf("shard %s: %w", r.cfg.Shard, err)
		}
	case r.cfg.StartAt.IsZero():
		return fmt.Errorf("shard %s: a sharded run needs a common start time (--start-at) or a rendezvous (--rendezvous) for its shards to open their windows together", r.cfg.Shard)
	}
	if late := time.Since(r.cfg.StartAt); rv == nil && late > 0 {
		return fmt.Errorf("shard %s: the start time %s passed %s ago: give every shard the same start a little in the future",
			r.cfg.Shard, r.cfg.StartAt.UTC().Format(time.RFC3339), late.Round(time.Millisecond))
	}
	if r.cfg.Gap <= 0 {
		r.cfg.Gap = DefaultGap
	}
	if r.cfg.Gap < shard.MinGap {
		return fmt.Errorf("shard %s: gap %s: at least %s between windows for drain and warm-up", r.cfg.Shard, r.cfg.Gap, shard.MinGap)
	}
	return nil
}

// rendezvous fixes the common start with the other shards, when the run
// has a rendezvous rather than a start time; stop ends shard 0's service.
func (r *runner) rendezvous(ctx context.Context) (stop func(), err error) {
	rv := r.cfg.Rendezvous
	if !r.sharded() || rv == nil {
		return func() {}, nil
	}
	host := r.cfg.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	self := shard.CheckIn{Index: r.cfg.Shard.Index, Count: r.cfg.Shard.Count, Plan: r.planDigest(), Token: newToken(), Host: host}
	role := "checking in with shard 0 at " + rv.Coordinator
	if self.Index == 0 {
		role = "coordinating at " + rv.Coordinator
	}
	r.prog.begin(stepWait, 0, result.Column{}, "rendezvous: "+role)
	r.log.Info().Str("coordinator", rv.Coordinator).Int("shard", self.Index).Str("plan", self.Plan).Msg("matrix: rendezvous")
	began := time.Now()
	start, stop, err := rv.meet(ctx, self, func(state string) {
		r.log.Info().Str("state", state).Msg("matrix: rendezvous")
		r.prog.note(fmt.Sprintf("shard %s: rendezvous: %s", r.cfg.Shard, state))
	})
	if err != nil {
		return nil, err
	}
	r.cfg.StartAt = start
	r.log.Info().Str("start", start.UTC().Format(time.RFC3339Nano)).Dur("waited", time.Since(began)).Msg("matrix: rendezvous: the start is fixed")
	r.note(fmt.Sprintf(
		"The common start, %s, was fixed by rendezvous: shard 0 (%s) set it once all %d shards had probed the engine and made the same plan.",
		start.UTC().Format(time.RFC3339Nano), rv.Coordinator, self.Count))
	return stop, nil
}

// planDigest names what this shard will run: its settings, gap and the
// cells of its plan, in order. Shards whose digests differ would not open
// the same cell's windows together; the rendezvous refuses them.
func (r *runner) planDigest() string {
	var cells []string
	for _, c := range r.plan.cells {
		if c.Status != result.OverCapacity {
			cells = append(cells, fmt.Sprintf("%d×%d", c.Context, c.Concurrency))
		}
	}
	b, _ := json.Marshal(struct {
		Settings result.Settings
		Model    string
		Gap      time.Duration
		Cells    []string
		Cold     int
	}{r.res.Settings, r.tgt.Model, r.cfg.Gap, cells, len(r.plan.coldPrefill)})
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// startShard sets up what a shard's result and run clock need once the
// plan is made: the schedule, the clock started at the common start (so all
// shards' records share one clock), the clock offset against the engine,
// and the shard's description.
func (r *runner) startShard(ctx context.Context, salt string) {
	if !r.sharded() {
		return
	}
	sp := r.cfg.Shard
	r.sched = shard.Schedule{Start: r.cfg.StartAt, Window: r.sc.Window, Gap: r.cfg.Gap}
	now := time.Now()
	r.clock = record.ClockAt(now.Add(r.cfg.StartAt.Sub(now))) // monotonic, its wall time the common start
	info := result.ShardInfo{Index: sp.Index, Host: r.cfg.Host, Started: r.res.Started, ToolVersion: r.res.Tool.Version}
	if info.Host == "" {
		info.Host, _ = os.Hostname()
	}
	// The clock probe takes about two seconds; skip it when the start is
	// nearer than that, rather than make this shard late.
	if time.Until(r.cfg.StartAt) > 2500*time.Millisecond {
		if off, err := r.info.ClockOffset(ctx); err != nil {
			r.log.Warn().Err(err).Msg("matrix: the engine's clock could not be read; this shard's clock offset is unknown")
			r.note(fmt.Sprintf("Shard %d: its clock offset against the engine is unknown: %v.", sp.Index, err))
		} else {
			info.ClockOffsetMs = millis(off.Offset)
			info.ClockUncertaintyMs = millis(off.Uncertainty)
			info.ClockSource = off.Source
			r.log.Info().Float64("offset_ms", info.ClockOffsetMs).Float64("uncertainty_ms", info.ClockUncertaintyMs).Msg("matrix: clock offset against the engine")
		}
	} else {
		r.note(fmt.Sprintf("Shard %d: started too close to the start time to read the engine's clock; its clock offset is unknown.", sp.Index))
	}
	r.res.Sharding = &result.Sharding{Run: salt, Count: sp.Count, StartAt: r.cfg.StartAt.UTC(), GapSeconds: r.cfg.Gap.Seconds(),
		Shards: []result.ShardInfo{info}}
	r.note(fmt.Sprintf(
		"Shard %d of %d of run %s: each cell's N requests are split over the shards (N/%d each, one more on the first N mod %d), and each shard's figures are its own share's. Merge the shards' results with tokentap merge.",
		sp.Index, sp.Count, salt, sp.Count, sp.Count))
	if sp.Index > 0 {
		// Shard 0 alone measures prefill, cold and alone on the engine.
		r.res.Prefill = nil
		r.plan.coldPrefill = nil
	}
	r.prog.note(fmt.Sprintf("shard %s: the first window opens at %s (%s from now)", sp,
		r.sched.Open(0).Local().Format("15:04:05.000"), time.Until(r.sched.Open(0)).Round(100*time.Millisecond)))
}

// endShard completes the shard's description at the run's end.
func (r *runner) endShard() {
	if r.res.Sharding == nil {
		return
	}
	r.res.Sharding.Shards[0].Ended = r.res.Ended
	r.res.Sharding.Shards[0].Interrupted = r.res.Interrupted
}

// slotOf is cell (c, n)'s place in the schedule: its index among the cells
// the plan runs, in the order they run.
func (r *runner) slotOf(c, n int) int {
	k := 0
	for _, cl := range r.plan.cells {
		if cl.Status == result.OverCapacity {
			continue
		}
		if cl.Context == c && cl.Concurrency == n {
			return k
		}
		k++
	}
	return k
}

// rowFirst reports whether (c, n) is the first cell its row runs: its
// preparation holds the row's prompts and shard 0's cold prefill.
func (r *runner) rowFirst(c, n int) bool {
	ns := r.plan.runnable(c)
	return len(ns) > 0 && ns[0] == n
}

// share is how many of a cell's n requests this load generator sends.
func (r *runner) share(n int) int { return r.cfg.Shard.Share(n) }

// waitUntil sleeps until t, or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// noShare marks cell (c, n) for a shard whose share of it is 0: it sends
// nothing, and keeps the schedule.
func (r *runner) noShare(c, n int) {
	out := r.res.Cell(c, n)
	k := r.slotOf(c, n)
	out.Status = result.NotRun
	out.Reason = fmt.Sprintf("shard %d of %d has no share of %d requests: they run on the first %d shards", r.cfg.Shard.Index, r.cfg.Shard.Count, n, n)
	out.Shards = []result.CellShard{{Index: r.cfg.Shard.Index, Share: 0, ScheduledAt: r.sched.Open(k).UTC()}}
	r.prog.cellDone(c, result.Column{N: n}, cellLabel(c, result.Column{N: n}), "no share on this shard")
}

// shardSeen is when this shard's window of cell slot k (measured as w) was
// scheduled and opened, for judge.
func (r *runner) shardSeen(k int, w cell.Window) *shardSeen {
	sched := r.sched.Open(k)
	return &shardSeen{Index: r.cfg.Shard.Index, Scheduled: sched, Opened: r.clock.Wall(w.Start),
		Late: w.Start - sched.Sub(r.sched.Start), Window: r.sc.Window}
}

// ownIDs makes record ids unique across the shards of a run: each shard's
// start with its index, so the shards' records concatenate into one file.
func (r *runner) ownIDs(recs []record.Record) {
	if !r.sharded() {
		return
	}
	p := fmt.Sprintf("s%d/", r.cfg.Shard.Index)
	for i := range recs {
		recs[i].ID = p + recs[i].ID
	}
}

// prepareEnd is when row c's preparation must end: in a sharded run, when
// its first cell's warm-up starts; otherwise 10 s from now (drain's own
// bound).
func (r *runner) prepareEnd(c int, ns []int) time.Time {
	if !r.sharded() || len(ns) == 0 {
		return time.Now().Add(10 * time.Second)
	}
	return r.sched.Warm(r.slotOf(c, ns[0]), true)
}

// openMargin is how long before a window opens a shard stops draining, for
// what it does before the window (a /metrics reading, dialling the
// connections): a quarter of the gap, at most a second.
func (r *runner) openMargin() time.Duration { return min(r.cfg.Gap/4, time.Second) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
