package cell

import (
	"fmt"
	"slices"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// ColdCached reports whether a prefill repeat that should be cold found
// its prompt in the engine's prefix cache (METHOD §3): more of its prompt
// tokens cached than tol, the prompt-length tolerance of METHOD §4. A cold
// prompt shares its first line (chat template and the run's salt) with the
// others, which an engine caching single tokens (llama.cpp) or whole
// blocks may find: a few tokens, never more than the tolerance.
func ColdCached(cached, tol int) bool { return cached > tol }

// SummarizePrefill sets a prefill row's figures from its repeats (Each,
// METHOD §3): Requests is the repeats sent, Measured those that gave a
// figure, TokPerSec and TTFTms the medians of the measured repeats (a
// median, not a mean: one slow repeat, a stall or a first-use compile,
// cannot move it), TokPerSecMin and TokPerSecMax their spread, and
// PromptTokens the median repeat's. A row none of whose repeats was
// measured is Failed, with the first repeat's error; one with a figure is
// Valid, and its Error says how many repeats failed and why the first did:
// a failed repeat is counted, never dropped.
func SummarizePrefill(row *result.Prefill) {
	row.Requests = len(row.Each)
	var tps, ttft []float64
	var prompts []int
	failed, why := 0, ""
	for _, e := range row.Each {
		if !e.Measured() {
			failed++
			if why == "" {
				why = e.Error
			}
			continue
		}
		tps, ttft, prompts = append(tps, e.TokPerSec), append(ttft, e.TTFTms), append(prompts, e.PromptTokens)
	}
	row.Measured = len(tps)
	row.TokPerSec, row.TTFTms, row.TokPerSecMin, row.TokPerSecMax = 0, 0, 0, 0
	if len(tps) == 0 {
		row.Status, row.Error = result.Failed, why
		if row.Error == "" {
			row.Error = "no repeat was sent"
		}
		if len(row.Each) > 0 {
			row.PromptTokens = row.Each[0].PromptTokens
		}
		return
	}
	row.Status = result.Valid
	row.TokPerSec, row.TTFTms = Median(tps), Median(ttft)
	row.TokPerSecMin, row.TokPerSecMax = slices.Min(tps), slices.Max(tps)
	slices.Sort(prompts)
	row.PromptTokens = prompts[(len(prompts)-1)/2]
	row.Error = ""
	if failed > 0 {
		row.Error = fmt.Sprintf("%s of %d gave no figure (the first: %s)", english.Count(failed, "repeat", "repeats"), len(row.Each), why)
	}
}

// Median is the middle of v, or the mean of its two middle values when v
// has an even count; 0 for none. v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
