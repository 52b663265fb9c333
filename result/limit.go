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
type Bandwidth struct {
	GBPerSec        float64  `json:"gpu_bandwidth_gb_s,omitempty"`
	GBPerSecSource  string   `json:"gpu_bandwidth_source,omitempty"`
	WeightBytes     int64    `json:"weight_bytes,omitempty"`
	WeightSource    string   `json:"weight_bytes_source,omitempty"`
	Layers          int      `json:"layers,omitempty"`
	KVHeads         int      `json:"kv_heads,omitempty"`
	HeadDim         int      `json:"head_dim,omitempty"`
	ShapeSource     string   `json:"shape_source,omitempty"`
	KVDType         string   `json:"kv_dtype,omitempty"`
	KVBytesPerElem  float64  `json:"kv_bytes_per_element,omitempty"`
	KVDTypeSource   string   `json:"kv_dtype_source,omitempty"`
	KVBytesPerToken float64  `json:"kv_bytes_per_token,omitempty"`
	Missing         []string `json:"missing,omitempty"`
	Note            string   `json:"note,omitempty"`
}
