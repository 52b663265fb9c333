package report

import "github.com/tokentap/tokentap/result"

// This file offers the peers' definitions of the time between tokens
// beside tokentap's (METHOD §3), so a user can compare with the tool they
// came from: vLLM's ITL per chunk, and GuideLLM's and AIPerf's ITL per
// request (vLLM's TPOT).

// The All measurements heads: tokentap's column names its definition, and
// the peers' columns follow, where the run has them (documents from
// before them render as they were, seeds included).
const (
	tbtPerTokenHead = "Time between tokens (per token)"
	itlChunkHead    = "ITL per chunk (vLLM)"
	tpotRequestHead = "TPOT per request (GuideLLM, AIPerf)"
)

// tbtDefsNote explains the three under the table.
const tbtDefsNote = "Time between tokens is per token: the gap before an event of k tokens counts k times as gap/k. " +
	"ITL per chunk is every gap between events whole, as vllm bench serve's ITL; TPOT per request is each request's mean time per token after the first, (e2e − TTFT)/(n − 1), as GuideLLM's and AIPerf's ITL and vLLM's TPOT, over the window's gaps (1000 / per request tok/s). " +
	"Where events carry k tokens (speculative decoding, a stream interval), ITL per chunk is k times the others."

// hasTBTDefs reports whether a decode cell has the peers' figures.
func hasTBTDefs(r *result.Result) bool {
	for i := range r.Decode {
		if r.Decode[i].ITLChunkMs > 0 {
			return true
		}
	}
	return false
}

// tbtDefsColumns are a cell's peers' figures, dashes where it shows none.
func tbtDefsColumns(c *result.Cell) []string {
	if !c.ShowsFigures() {
		return []string{dash, dash}
	}
	return []string{fmtTBT(c.ITLChunkMs), fmtTBT(c.TPOTRequestMs)}
}
