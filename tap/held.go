package tap

import (
	"container/heap"
	"time"

	"github.com/tokentap/tokentap/record"
)

// heldBack gives n tokens that the engine's usage counted but no event
// announced to the events that most likely carried them, so every rate and
// gap is computed from the engine's own token count (METHOD.md §2).
//
// Engines hold a token back and send it with the next one without saying
// so: Ollama holds back a token that could begin a stop sequence (one
// starting with "<") until the next token shows it does not. The event that
// carries both then follows a gap about twice the usual one, because the
// held token's own event never came. So each extra token goes to the event
// whose gap per token is the longest at that moment; a stream with a single
// event gets them on that event.
func heldBack(r *record.Record, n int) {
	if n <= 0 || len(r.Arrivals) == 0 {
		return
	}
	if r.Tokens == nil {
		r.Tokens = make([]int32, len(r.Arrivals))
		for i := range r.Tokens {
			r.Tokens[i] = 1
		}
	}
	if len(r.Arrivals) == 1 {
		r.Tokens[0] += int32(n)
		return
	}
	h := make(gapHeap, 0, len(r.Arrivals)-1)
	for j := 1; j < len(r.Arrivals); j++ {
		h = append(h, gapItem{event: j, gap: r.Arrivals[j] - r.Arrivals[j-1], tokens: r.Tokens[j]})
	}
	heap.Init(&h)
	for ; n > 0; n-- {
		top := &h[0]
		top.tokens++
		r.Tokens[top.event] = top.tokens
		heap.Fix(&h, 0)
	}
}

type gapItem struct {
	event  int
	gap    time.Duration
	tokens int32
}

// gapHeap orders events by gap per token, longest first; among equal ones
// the earlier event first, so the result does not depend on heap order.
type gapHeap []gapItem

func (h gapHeap) Len() int { return len(h) }
func (h gapHeap) Less(i, j int) bool {
	// gap_i/tokens_i > gap_j/tokens_j without division.
	a := int64(h[i].gap) * int64(h[j].tokens)
	b := int64(h[j].gap) * int64(h[i].tokens)
	if a != b {
		return a > b
	}
	return h[i].event < h[j].event
}
func (h gapHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *gapHeap) Push(x any)   { *h = append(*h, x.(gapItem)) }
func (h *gapHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
