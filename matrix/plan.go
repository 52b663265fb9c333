package matrix

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// plan is what a run will do, decided before any load is sent: which
// contexts are dropped, which cells are over capacity, which prefill rows are
// measured during warm-up and which need a cold request of their own.
type plan struct {
	contexts    []int // decode contexts kept, in order
	dropped     []int // decode contexts dropped (C + max output > max model length)
	concurrency []int
	rates       []float64     // an arrival-rate run's columns (then concurrency is empty)
	cells       []result.Cell // every (C, N) — or (C, rate) — of the kept contexts, Over capacity or NotRun
	prefill     []result.Prefill
	coldPrefill []int // prefill contexts needing separate cold requests
	// repeats is the cold requests each prefill row sends (0: one), for
	// the time estimate.
	repeats int
	notes   []string
}

// need is the KV cache a cell asks for: N × (C + max output) tokens.
func need(c, n, maxOutput int) int { return n * (c + maxOutput) }

// overCapacity is METHOD.md §3 rule 1 for an engine that reserves:
// N × (C + max output) > KV capacity. An unknown capacity (0) never rules
// a cell out.
func overCapacity(c, n, maxOutput, kv int) bool {
	return kv > 0 && need(c, n, maxOutput) > kv
}

// cellLoad is what the N requests of row c that can run together ask for
// (METHOD §3 rule 1): their prompts and max_tokens, slot by slot where
// lengths are drawn, the largest of a dataset's. n 0 asks for the largest
// one request of the row may be (an open loop's). nil: N × (C, max output).
type cellLoad func(c, n int) []reqLen

// constLoad is every request the row's context and max output.
func constLoad(maxOutput int) cellLoad {
	return func(c, n int) []reqLen {
		reqs := make([]reqLen, max(n, 1))
		for i := range reqs {
			reqs[i] = reqLen{c, maxOutput}
		}
		return reqs
	}
}

// makePlan lays out a run. maxLen is 0 when unknown; fit is what is known
// of the KV cache, load what a cell's requests ask for (nil: constant
// lengths). With rates the columns are request rates (arrival-rate cells)
// and concurrency is ignored.
func makePlan(contexts, concurrency []int, rates []float64, prefillAt []int, maxOutput, maxLen int, fit kvFit, load cellLoad) plan {
	if load == nil {
		load = constLoad(maxOutput)
	}
	var p plan
	if len(rates) > 0 {
		p.rates = append([]float64(nil), rates...)
	} else {
		p.concurrency = append([]int(nil), concurrency...)
	}
	for _, c := range contexts {
		if maxLen > 0 && c+maxOutput > maxLen {
			p.dropped = append(p.dropped, c)
			continue
		}
		p.contexts = append(p.contexts, c)
	}
	if len(p.dropped) > 0 {
		what := "Contexts"
		if len(p.dropped) == 1 {
			what = "Context"
		}
		p.notes = append(p.notes, fmt.Sprintf(
			"%s %s dropped: context + max output (%s) exceeds the engine's max model length (%s tokens).",
			what, joinTokens(p.dropped), strconv.Itoa(maxOutput), strconv.Itoa(maxLen)))
	}
	for _, c := range p.contexts {
		for _, rate := range p.rates {
			// An open loop's concurrency is not known beforehand; a single
			// request must fit at least (the largest it may draw).
			cell := result.Cell{Context: c, Rate: rate, Status: result.NotRun, MaxWaiting: -1}
			if over, why := fit.overOne(largest(load(c, 0))); over {
				cell.Status, cell.Reason = result.OverCapacity, why
			}
			p.cells = append(p.cells, cell)
		}
		for _, n := range p.concurrency {
			cell := result.Cell{Context: c, Concurrency: n, Status: result.NotRun, MaxWaiting: -1}
			if over, why := fit.over(load(c, n)); over {
				cell.Status, cell.Reason = result.OverCapacity, why
			}
			p.cells = append(p.cells, cell)
		}
	}
	var droppedPrefill []int
	for _, pc := range prefillAt {
		if maxLen > 0 && pc+1 > maxLen {
			droppedPrefill = append(droppedPrefill, pc)
			continue
		}
		row := result.Prefill{Context: pc, Status: result.NotRun}
		if p.rowRuns(pc) {
			row.DuringWarmup = true
		} else {
			p.coldPrefill = append(p.coldPrefill, pc)
		}
		p.prefill = append(p.prefill, row)
	}
	if len(droppedPrefill) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("Prefill contexts %s dropped: longer than the engine's max model length (%d tokens).",
			joinTokens(droppedPrefill), maxLen))
	}
	return p
}

// rowRuns reports whether decode context c is kept and has a cell to run,
// so its warm-up happens and its first warm-up request measures prefill.
func (p *plan) rowRuns(c int) bool {
	return len(p.runnable(c)) > 0 || len(p.runnableRates(c)) > 0
}

// runnable lists the concurrency levels of row c that are not over capacity.
func (p *plan) runnable(c int) []int {
	var ns []int
	for _, cell := range p.cells {
		if cell.Context == c && cell.Rate == 0 && cell.Status != result.OverCapacity {
			ns = append(ns, cell.Concurrency)
		}
	}
	return ns
}

// runnableRates lists the request rates of row c that are not over
// capacity (an arrival-rate run).
func (p *plan) runnableRates(c int) []float64 {
	var rs []float64
	for _, cell := range p.cells {
		if cell.Context == c && cell.Rate > 0 && cell.Status != result.OverCapacity {
			rs = append(rs, cell.Rate)
		}
	}
	return rs
}

// runnableCells counts cells that will be run.
func (p *plan) runnableCells() int {
	n := 0
	for _, c := range p.cells {
		if c.Status != result.OverCapacity {
			n++
		}
	}
	return n
}

// upTo labels the decode contexts kept that are at most n tokens.
func (p *plan) upTo(n int) []string {
	var l []string
	for _, c := range p.contexts {
		if c <= n {
			l = append(l, TokenLabel(c))
		}
	}
	return l
}

// whyNothing says why a plan has no cell to run: its notes on dropped
// contexts, and the Over capacity reasons of the cells it kept.
func (p *plan) whyNothing(fit kvFit) []string {
	var why []string
	for _, n := range p.notes {
		if strings.HasPrefix(n, "Context") {
			why = append(why, n)
		}
	}
	if len(p.cells) > 0 {
		why = append(why, fmt.Sprintf("Every cell of %s needs more KV cache than the engine's %s tokens (the smallest: %s).",
			joinTokens(p.contexts), strconv.Itoa(fit.limit()), p.cells[0].Reason))
	}
	return why
}

// prefillMode is the run setting the seed pages print.
func (p *plan) prefillMode() string {
	warm, cold := 0, 0
	for _, r := range p.prefill {
		if r.DuringWarmup {
			warm++
		} else {
			cold++
		}
	}
	switch {
	case warm > 0 && cold == 0:
		return "Measured during decode warm-up"
	case warm == 0:
		return "Separate cold requests"
	default:
		return "Measured during decode warm-up; separate cold requests where the context is not a decode row"
	}
}

// ColumnLabel names a cell's column in messages: "4" (requests at once)
// or "2/s" (requests per second).
func ColumnLabel(c result.Cell) string { return c.Column().Label() }

// TokenLabel shows a token count the way the seed pages do: 16384 → "16K",
// 0 → "0", 1500 → "1500".
func TokenLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + "K"
	}
	return strconv.Itoa(n)
}

func joinTokens(cs []int) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = TokenLabel(c)
	}
	return english.List(s)
}

// fmtInt writes n with thousands separators: 81920 → "81,920".
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
