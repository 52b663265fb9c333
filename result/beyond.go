package result

// The figures beyond the seed pages' columns (METHOD.md §6–§8): how much of
// the load met the run's latency targets, where the engine says TTFT went,
// and how close decode came to the limit the GPU's memory bandwidth sets.
// Every one is optional: a document without them (the seeds) renders as it
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
	// Judged are the requests the objectives were checked on (ended
	// inside the window, OK or failed); Good those that met every one.
	Judged int `json:"judged"`
	Good   int `json:"good"`
	// Attainment is Good / Judged, 0 to 1; absent when nothing was judged.
	Attainment *float64 `json:"attainment,omitempty"`
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
	// Excluded are requests sent in the window but cut by its end: not
	// judged.
	Excluded int `json:"excluded,omitempty"`
}

// SLORun is the run's objectives and how the whole run met them.
type SLORun struct {
	Spec SLOSpec `json:"spec"`
	// Overall sums every measured cell: judged and good requests over all
	// cells, goodput over the cells' windows together.
	Overall SLO `json:"overall"`
	// Capacity is, per context, the highest concurrency whose cell met
	// Spec.Target (0: none did; only cells that show figures count).
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

// TTFT parts, as TTFTPart.Name spells them.
const (
	PartQueue      = "queue"
	PartPrefill    = "prefill"
	PartEngineTTFT = "engine_ttft"
)

// TTFTPart is one part of time to first token as the engine measured it:
// the mean over the requests it counted, and where the figure came from.
type TTFTPart struct {
	Ms       float64 `json:"ms"`
	Requests int     `json:"requests"`
	// Source names the engine's figure, e.g. "GET /metrics
	// vllm:request_queue_time_seconds _sum/_count growth over the window".
	Source string `json:"source"`
}

// TTFTSplit is where a cell's time to first token went (METHOD.md §7): the
// engine's own queue, prefill and TTFT figures beside the mean TTFT
// tokentap measured, the difference being time outside the engine.
type TTFTSplit struct {
	// ClientMs is the mean TTFT tokentap measured over ClientRequests
	// requests (the ones the engine's figures cover).
	ClientMs       float64 `json:"client_ttft_ms"`
	ClientRequests int     `json:"client_requests"`
	// Queue, Prefill and EngineTTFT are the engine's figures; nil where it
	// gives none.
	Queue      *TTFTPart `json:"queue,omitempty"`
	Prefill    *TTFTPart `json:"prefill,omitempty"`
	EngineTTFT *TTFTPart `json:"engine_ttft,omitempty"`
	// OutsideMs is ClientMs − EngineTTFT: network, HTTP, the client's side
	// (and tokentap's proxy, when measured through one); nil without an
	// engine TTFT.
	OutsideMs *float64 `json:"outside_engine_ms,omitempty"`
	// UnaccountedMs, where the engine gives parts but not its TTFT, is
	// ClientMs − (queue + prefill): time outside the engine and inside it
	// that it does not report.
	UnaccountedMs *float64 `json:"unaccounted_ms,omitempty"`
	// Note says what limits the figures (e.g. counts that differ).
	Note string `json:"note,omitempty"`
}

// DecodeLimit is a decode cell against the limit the GPU's memory
// bandwidth sets (METHOD.md §8).
type DecodeLimit struct {
	// BandwidthLimitTokPerSec is the most total tok/s the bandwidth allows
	// at this cell's batch and sequence length.
	BandwidthLimitTokPerSec float64 `json:"bandwidth_limit_tok_s"`
	// ShareOfBandwidthLimit is the cell's total tok/s over the limit.
	ShareOfBandwidthLimit float64 `json:"share_of_bandwidth_limit"`
	// Batch is the cell's average active requests; SeqTokens the mean
	// context (prompt and output so far) of a sequence at its decode steps
	// in the window.
	Batch     float64 `json:"batch"`
	SeqTokens float64 `json:"seq_tokens"`
}

// Bandwidth is what the decode limit was computed from, each input with
// where it came from; Missing names the inputs that were not known, in
// which case no cell has a limit.
//
// A decode step of batch b reads WeightBytes − InputEmbeddingBytes −
// MoE.ExpertBytes of weights, plus MoE.ExpertBytes / MoE.Experts for each
// distinct expert the batch touches per MoE layer; and per sequence of s
// tokens s × KVBytesPerToken + min(s, SlidingWindow) ×
// WindowKVBytesPerToken + StateBytesPerSequence (METHOD §8).
type Bandwidth struct {
	GBPerSec       float64 `json:"gpu_bandwidth_gb_s,omitempty"`
	GBPerSecSource string  `json:"gpu_bandwidth_source,omitempty"`
	// WeightBytes are all the model's weights.
	WeightBytes  int64  `json:"weight_bytes,omitempty"`
	WeightSource string `json:"weight_bytes_source,omitempty"`
	// InputEmbeddingBytes are the untied input token-embedding table's,
	// which a step does not read (only the batch's rows).
	InputEmbeddingBytes int64 `json:"input_embedding_bytes,omitempty"`
	// MoE are a mixture of experts' routed experts.
	MoE *MoELimit `json:"moe,omitempty"`
	// Layers, KVHeads and HeadDim describe a uniform KV layout; KVLayout
	// says any layout in words.
	Layers          int     `json:"layers,omitempty"`
	KVHeads         int     `json:"kv_heads,omitempty"`
	HeadDim         int     `json:"head_dim,omitempty"`
	KVLayout        string  `json:"kv_layout,omitempty"`
	ShapeSource     string  `json:"shape_source,omitempty"`
	KVDType         string  `json:"kv_dtype,omitempty"`
	KVBytesPerElem  float64 `json:"kv_bytes_per_element,omitempty"`
	KVDTypeSource   string  `json:"kv_dtype_source,omitempty"`
	KVBytesPerToken float64 `json:"kv_bytes_per_token,omitempty"`
	// SlidingWindow is the window in tokens of the sliding-window layers,
	// and WindowKVBytesPerToken what a token within it costs on them.
	SlidingWindow         int     `json:"sliding_window,omitempty"`
	WindowKVBytesPerToken float64 `json:"window_kv_bytes_per_token,omitempty"`
	// StateBytesPerSequence is linear-attention or state-space layers'
	// constant state per sequence.
	StateBytesPerSequence float64  `json:"state_bytes_per_sequence,omitempty"`
	Missing               []string `json:"missing,omitempty"`
	Note                  string   `json:"note,omitempty"`
}

// MoELimit are a mixture of experts' routed experts as the decode limit
// counts them: each token is routed to ExpertsPerToken of Experts in each
// of Layers; ExpertBytes are all the routed experts' weights.
type MoELimit struct {
	Experts         int   `json:"experts"`
	ExpertsPerToken int   `json:"experts_per_token"`
	Layers          int   `json:"layers"`
	ExpertBytes     int64 `json:"expert_bytes"`
}
