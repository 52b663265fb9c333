package result

// How close decode came to the limit the GPU's memory bandwidth sets
// (METHOD.md §8), and the limit's inputs. Optional, as every figure beyond
// the seed pages' columns.

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
