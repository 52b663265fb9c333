package cell

import "github.com/tokentap/tokentap/result"

// EventCounts is what a cell's requests say of the tokens each stream
// event carried (METHOD §2). An engine that announces no per-event count
// (no continuous usage) is counted one token per event until the usage at
// a request's end says how many there were: a completed request is right,
// a request cut at the window's close (no usage) is short by every event
// that carried several.
type EventCounts struct {
	// CompletedTokens and CompletedEvents are the usage's completion tokens
	// and the token events of the requests that completed in the window.
	CompletedTokens, CompletedEvents int
	// OneEach is the window's tokens of requests without usage whose every
	// event was counted as one token (nothing announced more).
	OneEach int
	// Announced: a request without usage had an event that announced
	// several tokens, so the engine says per-event counts.
	Announced bool

	oneEachRate float64 // OneEach over each part's window seconds, summed
}

// Unannounced says whether the cell's output tokens are short: its
// completed requests carried more tokens (usage) than events, the engine
// announced no per-event count, and tokens were counted one per event in
// requests without usage. k is the completed requests' tokens per event;
// scaled is Total tok/s with those tokens counted k per event instead.
func (f Figures) Unannounced() (k, scaled float64, ok bool) {
	c := f.Counts
	if c.Announced || c.OneEach == 0 || c.CompletedEvents == 0 || c.CompletedTokens <= c.CompletedEvents {
		return 0, 0, false
	}
	k = float64(c.CompletedTokens) / float64(c.CompletedEvents)
	return k, f.TotalTokPerSec + (k-1)*c.oneEachRate, true
}

// UnannouncedResult is Unannounced as the result keeps it; nil when the
// counts are not short.
func (f Figures) UnannouncedResult() *result.Unannounced {
	k, scaled, ok := f.Unannounced()
	if !ok {
		return nil
	}
	return &result.Unannounced{TokensPerEvent: k, OneEachTokens: f.Counts.OneEach, ScaledTokPerSec: scaled}
}
