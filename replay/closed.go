package replay

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/tokentap/tokentap/record"
)

// Closed configures a closed loop: len(Bodies) streams, stream i sending
// Bodies[i] again the moment its last request ended.
type Closed struct {
	Target Target
	Clock  record.Clock
	// Bodies holds one encoded request body per stream (see Target.Body).
	Bodies [][]byte
	// MaxTokens and Stream describe what the bodies ask for; they are copied
	// into every record.
	MaxTokens int
	Stream    bool
	// Tag labels every record, e.g. "C=16384 N=4".
	Tag string
	// IDs gives every request a run-unique id; nil numbers them from 1 with
	// Tag as prefix.
	IDs *atomic.Int64
	// StopOnFailure ends the whole loop after the first failed request:
	// a cell with a failure is Failed whatever else happens (METHOD.md §3),
	// so hammering a broken engine for the rest of the window tells nothing.
	StopOnFailure bool
	// Tokens, when set, counts tokens as they arrive (live progress).
	Tokens *atomic.Int64
	// Once sends each body exactly once instead of looping (warm-up).
	Once bool
}

// RunClosed runs the loop until ctx is done (every stream's request in flight
// is then cancelled and recorded as cancelled) or, with Once, until every
// stream sent its body once. It returns the records of every request, in no
// particular order, and whether a request failed.
func RunClosed(ctx context.Context, cfg Closed) (recs []record.Record, failed bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := cfg.IDs
	if ids == nil {
		ids = new(atomic.Int64)
	}
	var (
		mu     sync.Mutex
		out    []record.Record
		failOn atomic.Bool
		wg     sync.WaitGroup
	)
	for _, body := range cfg.Bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := NewConn(cfg.Target, cfg.Clock)
			conn.Tokens = cfg.Tokens
			defer conn.Close()
			var mine []record.Record
			for ctx.Err() == nil {
				rec := record.Record{
					ID:        cfg.Tag + "#" + strconv.FormatInt(ids.Add(1), 10),
					Tag:       cfg.Tag,
					MaxTokens: cfg.MaxTokens,
					Stream:    cfg.Stream,
				}
				conn.Do(ctx, body, &rec)
				mine = append(mine, rec)
				if rec.Outcome.Failed() {
					failOn.Store(true)
					if cfg.StopOnFailure {
						cancel()
					}
				}
				if cfg.Once {
					break
				}
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, failOn.Load()
}
