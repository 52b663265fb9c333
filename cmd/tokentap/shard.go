package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/shard"
)

// applyShardFlags sets up a sharded run from --shard I/N, or --shards N
// with the shard from JOB_COMPLETION_INDEX (jobIndex), its start
// (--start-at, or --rendezvous and its settings) and --gap.
func applyShardFlags(cfg *matrix.Config, f matrixFlags, jobIndex string) error {
	var err error
	switch {
	case f.Shard != "" && f.Shards > 0:
		return errors.New("--shard and --shards: give one (--shards N takes the shard from JOB_COMPLETION_INDEX)")
	case f.Shard != "":
		if cfg.Shard, err = shard.Parse(f.Shard); err != nil {
			return fmt.Errorf("--shard: %w", err)
		}
	case f.Shards < 0:
		return fmt.Errorf("--shards %d: want the number of shards", f.Shards)
	case f.Shards > 0:
		if cfg.Shard, err = shard.FromIndex(jobIndex, f.Shards); err != nil {
			return fmt.Errorf("--shards: %w", err)
		}
	}
	rvGiven := f.RvResolve != "" || f.RvMargin != 0 || f.RvTimeout != 0
	if !cfg.Shard.Sharded() {
		if f.StartAt != "" || f.Gap != 0 || f.Rendezvous != "" || rvGiven {
			return errors.New("--start-at, --rendezvous and --gap schedule a sharded run: give --shard I/N (or --shards N) too")
		}
		return nil
	}
	if f.Target == "" {
		return errors.New("a sharded run needs --target: every shard must measure the same engine (the demo's fake runs inside each process)")
	}
	if f.Gap < 0 || (f.Gap > 0 && f.Gap < shard.MinGap) {
		return fmt.Errorf("--gap %s: at least %s between windows for drain and warm-up", f.Gap, shard.MinGap)
	}
	cfg.Gap = f.Gap
	switch {
	case f.Rendezvous != "" && f.StartAt != "":
		return errors.New("--start-at and --rendezvous: give one (--rendezvous fixes the start once every shard is ready; --start-at is a start on the wall clock, for machines without a rendezvous)")
	case f.Rendezvous != "":
		cfg.Rendezvous = &matrix.Rendezvous{Coordinator: f.Rendezvous, Resolve: f.RvResolve, Margin: f.RvMargin, Timeout: f.RvTimeout}
		if err := cfg.Rendezvous.Check(); err != nil {
			return fmt.Errorf("--rendezvous: %w", err)
		}
		return nil
	case rvGiven:
		return errors.New("--rendezvous-resolve, --rendezvous-margin and --rendezvous-timeout set up a rendezvous: give --rendezvous HOST:PORT too")
	case f.StartAt == "":
		return fmt.Errorf("shard %s: give every shard the same --start-at (RFC 3339, a little in the future, e.g. %s), or --rendezvous HOST:PORT (shard 0's) to start once every shard is ready",
			cfg.Shard, time.Now().Add(2*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if cfg.StartAt, err = time.Parse(time.RFC3339Nano, f.StartAt); err != nil {
		return fmt.Errorf("--start-at %q: want an RFC 3339 time such as %s", f.StartAt,
			time.Now().Add(2*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if ago := time.Since(cfg.StartAt); ago > 0 {
		return fmt.Errorf("--start-at %s passed %s ago: give every shard the same start a little in the future (or --rendezvous, which waits for every shard)", f.StartAt, ago.Round(time.Millisecond))
	}
	return nil
}
