package result

import "time"

// Sharding describes a sharded run (METHOD.md §10): several load generators,
// each running its share of every cell on one schedule, merged afterwards
// by tokentap merge. A shard's own document lists itself in Shards; the
// merged run lists every shard.
type Sharding struct {
	// Run identifies the run: the prompt salt every shard shares. Shards
	// of different runs are never merged.
	Run string `json:"run"`
	// Count is how many shards the run has.
	Count int `json:"count"`
	// StartAt is the common start every phase is scheduled from, and
	// GapSeconds the gap before each window (drain, then warm-up).
	StartAt    time.Time   `json:"start_at"`
	GapSeconds float64     `json:"gap_s"`
	Shards     []ShardInfo `json:"shards"`
}

// ShardInfo is one shard's load generator.
type ShardInfo struct {
	Index int    `json:"index"`
	Host  string `json:"host,omitempty"` // where it ran (the pod's name in Kubernetes)
	// ClockOffsetMs is how far this shard's wall clock was ahead of the
	// engine's (negative: behind), read from the engine's HTTP Date
	// header, ± ClockUncertaintyMs. ClockSource says where it was read;
	// empty when it could not be.
	ClockOffsetMs      float64   `json:"clock_offset_ms"`
	ClockUncertaintyMs float64   `json:"clock_uncertainty_ms,omitempty"`
	ClockSource        string    `json:"clock_source,omitempty"`
	Started            time.Time `json:"started"`
	Ended              time.Time `json:"ended"`
	ToolVersion        string    `json:"tool_version,omitempty"`
	Interrupted        bool      `json:"interrupted,omitempty"`
}

// CellShard is one shard's part of a decode cell.
type CellShard struct {
	Index int `json:"index"`
	// Share is how many of the cell's N requests this shard kept in
	// flight (0: none; the shard kept the schedule and sent nothing).
	Share int `json:"share"`
	// Status and Reason are the shard's own verdict on its part (in a
	// merged run; a shard's own document has them on the cell).
	Status Status `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ScheduledAt is when the window was to open, Opened when this shard
	// opened it (its wall clock), LateMs the difference in milliseconds.
	ScheduledAt time.Time `json:"scheduled_at"`
	Opened      time.Time `json:"opened,omitzero"`
	LateMs      float64   `json:"late_ms"`
	// TotalTokPerSec and OutputTokens are the shard's own figures.
	TotalTokPerSec float64 `json:"total_tok_s,omitempty"`
	OutputTokens   int     `json:"output_tokens,omitempty"`
	// Decoding is how many of the shard's requests decoded, instant by
	// instant, over its window (cell.Steps, encoded relative to Opened),
	// so a merge finds the most requests of all shards decoding at once.
	// Only a shard's own document carries it.
	Decoding string `json:"decoding,omitempty"`
}

// Severity orders statuses from the best (Valid, 0) to the worst (Failed):
// a merged cell takes the worst of its shards' (METHOD §10).
func (s Status) Severity() int {
	switch s {
	case Valid:
		return 0
	case CacheMissed:
		return 1
	case LateWindow:
		return 2
	case RequestsQueued:
		return 3
	case NotRun:
		return 4
	case OverCapacity:
		return 5
	case Failed:
		return 6
	}
	return 7 // unknown: worse than anything this tokentap knows
}
