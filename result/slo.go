package result

// How much of a load met the run's latency targets (METHOD.md §6). Every
// figure is optional: a document without them (the seeds) renders as it
// always did.

// SLO names, as the --slo flag spells them.
const (
	SLOTTFT = "ttft" // time to first token
	SLOTBT  = "tbt"  // every time between tokens of the request
	SLOTPOT = "tpot" // the request's mean time per output token after the first
	SLOE2E  = "e2e"  // end-to-end time
)

// SLOSpec is the run's service-level objectives: a request is good when it
// meets every one that is set (0: not set).
type SLOSpec struct {
	// Text is the objectives as given, e.g. "ttft=500ms,tbt=50ms".
	Text   string  `json:"text"`
	TTFTms float64 `json:"ttft_ms,omitempty"`
	TBTms  float64 `json:"tbt_ms,omitempty"`
	TPOTms float64 `json:"tpot_ms,omitempty"`
	E2Ems  float64 `json:"e2e_ms,omitempty"`
	// Target is the share of requests that must meet every objective for
	// a concurrency to count as served (DistServe's attainment target),
	// 0 to 1.
	Target float64 `json:"target"`
}

// SLO is how one cell's (or the run's, or a proxy period's) requests met
// the objectives (METHOD.md §6).
type SLO struct {
	// Judged are the requests the objectives were checked on: those that
	// ended, OK or failed, and those cut before their end whose result was
	// already decided; Good those that met every one.
	Judged int `json:"judged"`
	Good   int `json:"good"`
	// Attainment is the share of the requests that met every objective, 0
	// to 1: in a matrix cell, the Aalen–Johansen estimate over every
	// request sent in the window, cut ones censored at the cut (METHOD §6;
	// Good / Judged when nothing was undecided); elsewhere Good / Judged.
	// Absent when nothing was judged. Where requests were undecided past
	// the last result decided, nothing observed tells their result:
	// AttainmentAtLeast and AttainmentAtMost bound it (had they all missed,
	// had they all been good), and Attainment splits them as the decided
	// results split.
	Attainment        *float64 `json:"attainment,omitempty"`
	AttainmentAtLeast *float64 `json:"attainment_at_least,omitempty"`
	AttainmentAtMost  *float64 `json:"attainment_at_most,omitempty"`
	// GoodputReqPerSec and GoodputTokPerSec are the good requests and
	// their output tokens per second of the window.
	GoodputReqPerSec float64 `json:"goodput_req_s"`
	GoodputTokPerSec float64 `json:"goodput_tok_s"`
	// Failed are judged requests that failed (never good); Missed counts,
	// per objective, the judged requests that missed it.
	Failed int            `json:"failed_requests,omitempty"`
	Missed map[string]int `json:"missed,omitempty"`
	// MostMissed is the objective most requests missed ("" when none was).
	MostMissed string `json:"most_missed,omitempty"`
	// Undecided are requests cut before their end (the window's close, a
	// client that left) whose result was still open: not judged.
	Undecided int `json:"undecided"`
	// JudgedCut are the judged requests that had been cut before their
	// end: a miss already certain (or, with a TTFT objective alone, a
	// first token in time).
	JudgedCut int `json:"judged_cut,omitempty"`
	// Excluded is what documents written before cut requests were judged
	// kept (every request cut, none judged); Read moves it to Undecided.
	Excluded int `json:"excluded,omitempty"`
}

// SLORun is the run's objectives and how the whole run met them.
type SLORun struct {
	Spec SLOSpec `json:"spec"`
	// Overall sums the cells that show figures (Valid, Requests queued,
	// Cache missed, Late window): judged and good requests over them,
	// goodput over their windows together. OverallCells is how many.
	Overall      SLO `json:"overall"`
	OverallCells int `json:"overall_cells"`
	// FailedCells sums, apart, the requests of the cells that failed
	// (FailedCellCount of them); nil when none did.
	FailedCells     *SLO `json:"failed_cells,omitempty"`
	FailedCellCount int  `json:"failed_cell_count,omitempty"`
	// Capacity is, per context, the highest level such that it and every
	// lower level met Spec.Target (0: the lowest did not).
	Capacity []SLOCapacity `json:"capacity,omitempty"`
}

// SLOCapacity is the serving capacity at one context: the most requests at
// once with at least the target share of requests meeting every objective.
type SLOCapacity struct {
	Context     int `json:"context"`
	Concurrency int `json:"concurrency"`
	// Rate is, in a run of arrival-rate cells, the highest request rate
	// whose cell met the target (0: none did).
	Rate float64 `json:"rate,omitempty"`
}
