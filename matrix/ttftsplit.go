package matrix

import (
	"context"

	"github.com/tokentap/tokentap/engines"
)

// This file reads the engine's TTFT figures around a window (METHOD.md §7).

// beyondStart reads the engine's TTFT-part figures before a window; nil
// when it keeps none.
func (r *runner) beyondStart(ctx context.Context) engines.Timings {
	if !r.bey.timed {
		return nil
	}
	t, err := r.info.Timings(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("matrix: reading the engine's TTFT figures failed; this cell gets no TTFT split")
		return nil
	}
	return t
}
