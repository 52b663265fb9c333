package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/shard"
)

// applyShardFlags sets up a sharded run from --shard I/N, or --shards N
// with the shard from JOB_COMPLETION_INDEX (jobIndex), --start-at and --gap.
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
	if !cfg.Shard.Sharded() {
		if f.StartAt != "" || f.Gap != 0 {
			return errors.New("--start-at and --gap schedule a sharded run: give --shard I/N (or --shards N) too")
		}
		return nil
	}
	if f.Target == "" {
		return errors.New("a sharded run needs --target: every shard must measure the same engine (the demo's fake runs inside each process)")
	}
	if f.StartAt == "" {
		return fmt.Errorf("shard %s: give every shard the same --start-at (RFC 3339, a little in the future, e.g. %s)",
			cfg.Shard, time.Now().Add(2*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if cfg.StartAt, err = time.Parse(time.RFC3339Nano, f.StartAt); err != nil {
		return fmt.Errorf("--start-at %q: want an RFC 3339 time such as %s", f.StartAt,
			time.Now().Add(2*time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	if ago := time.Since(cfg.StartAt); ago > 0 {
		return fmt.Errorf("--start-at %s passed %s ago: give every shard the same start a little in the future", f.StartAt, ago.Round(time.Millisecond))
	}
	if f.Gap < 0 || (f.Gap > 0 && f.Gap < shard.MinGap) {
		return fmt.Errorf("--gap %s: at least %s between windows for drain and warm-up", f.Gap, shard.MinGap)
	}
	cfg.Gap = f.Gap
	return nil
}
