package result

// Where the engine says TTFT went (METHOD.md §7). Optional, as every
// figure beyond the seed pages' columns.

// TTFT parts, as TTFTPart.Name spells them.
const (
	PartQueue      = "queue"
	PartValidation = "validation" // TGI: the router's validation (tokenizing) before the queue
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
// tokentap measured over the same requests, the difference being time
// outside the engine.
type TTFTSplit struct {
	// ClientMs is the mean TTFT tokentap measured over ClientRequests
	// requests: the ones the engine's figures cover (Over says which).
	ClientMs       float64 `json:"client_ttft_ms"`
	ClientRequests int     `json:"client_requests"`
	// Over names the requests: OverFirstToken, OverFinished or OverTimed.
	Over string `json:"over,omitempty"`
	// Queue, Validation, Prefill and EngineTTFT are the engine's figures;
	// nil where it gives none (or none over these requests).
	Queue      *TTFTPart `json:"queue,omitempty"`
	Validation *TTFTPart `json:"validation,omitempty"`
	Prefill    *TTFTPart `json:"prefill,omitempty"`
	EngineTTFT *TTFTPart `json:"engine_ttft,omitempty"`
	// OutsideMs is ClientMs − EngineTTFT: network, HTTP, the client's side
	// (and tokentap's proxy, when measured through one); nil without an
	// engine TTFT.
	OutsideMs *float64 `json:"outside_engine_ms,omitempty"`
	// UnaccountedMs, where the engine gives parts but not its TTFT, is
	// ClientMs − (its parts): time outside the engine and inside it that
	// it does not report.
	UnaccountedMs *float64 `json:"unaccounted_ms,omitempty"`
	// Note says what limits the figures (parts not shown and why).
	Note string `json:"note,omitempty"`
}

// Which requests a TTFT split is over.
const (
	OverFirstToken = "first_token" // the window's requests that got a first token
	OverFinished   = "finished"    // those of them that finished normally
	OverTimed      = "timed"       // those whose responses gave their own timings
)

// Finish sets OutsideMs or UnaccountedMs from the figures, and returns s.
func (s *TTFTSplit) Finish() *TTFTSplit {
	s.OutsideMs, s.UnaccountedMs = nil, nil
	switch {
	case s.EngineTTFT != nil:
		d := s.ClientMs - s.EngineTTFT.Ms
		s.OutsideMs = &d
	case s.Queue != nil || s.Validation != nil || s.Prefill != nil:
		d := s.ClientMs
		for _, p := range []*TTFTPart{s.Queue, s.Validation, s.Prefill} {
			if p != nil {
				d -= p.Ms
			}
		}
		s.UnaccountedMs = &d
	}
	return s
}
