package engines

import "context"

// The prefix-cache figures llama-server's GET /slots gives of the requests
// it runs, and how to tell a request's own from a slot's leftovers.

// SlotCache is what llama-server's GET /slots says of one slot and the
// request it runs (Busy) or ran last: its task id, the tokens the slot
// holds (-1: not said), how many of the request's prompt tokens it
// computed and found in the slot's cache, and how many it generated.
type SlotCache struct {
	Slot, Task int
	Busy       bool
	Held       int
	Processed  int
	Cached     int
	Decoded    int
}

// SlotWatch tells, across readings of llama-server's GET /slots, a running
// request's own prefix-cache figures from a slot's leftovers. llama-server
// marks a slot busy as soon as a request takes it, before the request's
// prompt is matched against the slot's cache at its next step; until then
// the slot shows the previous request's figures with no cached tokens
// (zeroed at that request's end). A busy reading with cached tokens is the
// request's own (they are set only when its prompt starts). One without is
// leftovers where the slot holds more tokens than it computed and
// generated (the previous request found some of its prompt cached), or
// where its figures are those the slot last showed for an earlier request;
// otherwise it is a cold prompt's own. Read the slots once before the
// requests go out (Seed), so the figures they will take over are known.
type SlotWatch struct {
	last map[int]SlotCache // per slot, the last figures it showed idle or as a request's own
}

// Seed notes the slots' figures before the requests to be judged are sent.
func (w *SlotWatch) Seed(readings []SlotCache) {
	for _, r := range readings {
		w.note(r)
	}
}

func (w *SlotWatch) note(r SlotCache) {
	if w.last == nil {
		w.last = map[int]SlotCache{}
	}
	w.last[r.Slot] = r
}

// Own returns the busy readings that are their requests' own figures.
func (w *SlotWatch) Own(readings []SlotCache) []SlotCache {
	var out []SlotCache
	for _, r := range readings {
		prev, seen := w.last[r.Slot]
		switch {
		case !r.Busy:
			w.note(r) // the figures a request taking it will show first
			continue
		case r.Cached > 0:
		case r.Held < 0 || r.Held > r.Processed+r.Decoded:
			continue // leftovers of a request that found some of its prompt cached, or cannot tell
		case seen && prev.Task != r.Task && prev.Held == r.Held && prev.Processed == r.Processed && prev.Decoded == r.Decoded:
			continue // the slot's earlier request's figures
		}
		w.note(r)
		out = append(out, r)
	}
	return out
}

// SlotCaches reads llama-server's GET /slots (on by default, --no-slots
// turns it off): the prefix-cache figures of the requests it runs, which
// say whether the cache served a request while it still runs (its usage
// says so only at its end: a request cut at a window's close never
// reports), and of the requests its idle slots ran last. A SlotWatch
// tells which busy readings are their requests' own. ok is false where
// the engine has no such endpoint.
func (in *Info) SlotCaches(ctx context.Context) ([]SlotCache, bool, error) {
	if in.Kind != KindLlamaCpp || in.c == nil {
		return nil, false, nil
	}
	r, err := in.c.get(ctx, "/slots")
	if err != nil {
		return nil, false, err
	}
	if !r.ok() {
		return nil, false, nil
	}
	out, ok := parseSlotCaches(r.body)
	return out, ok, nil
}
