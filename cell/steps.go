package cell

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Step is one change of a step function of time: from At on (until the
// next step) N requests were decoding.
type Step struct {
	At time.Duration
	N  int
}

// Steps is how many requests decoded over a window, as the instants where
// that number changed; it starts at the first request's start and ends with
// a step to 0. Several load generators' Steps on one clock add up to theirs
// together (Sum), so the most requests decoding at once over all of them
// (Peak) is exact, where adding each one's peak would not be.
type Steps []Step

// edge is a request starting (+1) or ending (-1) its decoding at an instant.
type edge struct {
	at    time.Duration
	delta int
}

// steps turns [from, to) intervals, given as edges, into a step function:
// one step per instant where the count changed, read after all of that
// instant's edges (so an interval ending where another starts does not
// overlap it).
func steps(edges []edge) Steps {
	slices.SortStableFunc(edges, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
	var out Steps
	cur := 0
	for i, e := range edges {
		cur += e.delta
		if i+1 < len(edges) && edges[i+1].at == e.at {
			continue
		}
		if len(out) > 0 && out[len(out)-1].N == cur {
			continue
		}
		out = append(out, Step{At: e.at, N: cur})
	}
	return out
}

// Peak is the highest step.
func (s Steps) Peak() int {
	top := 0
	for _, st := range s {
		top = max(top, st.N)
	}
	return top
}

// Shift moves every step by d (another clock's view of the same steps).
func (s Steps) Shift(d time.Duration) Steps {
	out := make(Steps, len(s))
	for i, st := range s {
		out[i] = Step{At: st.At + d, N: st.N}
	}
	return out
}

// Sum adds step functions: at every instant, the requests decoding in all
// of them. Each must be well formed (instants increasing, starting from 0
// requests before its first step).
func Sum(all ...Steps) Steps {
	var edges []edge
	for _, s := range all {
		prev := 0
		for _, st := range s {
			edges = append(edges, edge{st.At, st.N - prev})
			prev = st.N
		}
	}
	return steps(edges)
}

// Encode writes the steps compactly, relative to origin: for each step, the
// nanoseconds since the previous one (since origin for the first; zigzag
// varint, so a step before origin is fine) and its count (varint), all
// base64. A window of short requests has a few thousand steps.
func (s Steps) Encode(origin time.Duration) string {
	buf := make([]byte, 0, len(s)*6)
	prev := origin
	for _, st := range s {
		buf = binary.AppendVarint(buf, int64(st.At-prev))
		buf = binary.AppendUvarint(buf, uint64(st.N))
		prev = st.At
	}
	return base64.RawStdEncoding.EncodeToString(buf)
}

// maxSteps bounds what DecodeSteps accepts: two steps per request, and no
// window sees a million requests.
const maxSteps = 1 << 21

// DecodeSteps reads what Encode wrote, relative to origin. It refuses
// (with an error, never a panic) anything Encode could not have written:
// instants that go backwards, a count that does not fit, trailing bytes.
func DecodeSteps(v string, origin time.Duration) (Steps, error) {
	if v == "" {
		return nil, nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("decoding steps: not base64: %w", err)
	}
	var out Steps
	at := origin
	for len(raw) > 0 {
		if len(out) >= maxSteps {
			return nil, fmt.Errorf("decoding steps: more than %d steps", maxSteps)
		}
		d, n := binary.Varint(raw)
		if n <= 0 {
			return nil, errors.New("decoding steps: truncated instant")
		}
		raw = raw[n:]
		c, n := binary.Uvarint(raw)
		if n <= 0 {
			return nil, errors.New("decoding steps: truncated count")
		}
		raw = raw[n:]
		if len(out) > 0 && d <= 0 {
			return nil, fmt.Errorf("decoding steps: step %d does not come after the one before", len(out))
		}
		if c > 1<<30 {
			return nil, fmt.Errorf("decoding steps: count %d", c)
		}
		next := at + time.Duration(d)
		if (d > 0 && next < at) || (d < 0 && next > at) {
			return nil, errors.New("decoding steps: instant out of range")
		}
		at = next
		out = append(out, Step{At: at, N: int(c)})
	}
	return out, nil
}
