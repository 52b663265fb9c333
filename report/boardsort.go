package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// sortColumn is a leaderboard column runs can be sorted by: a figure
// (higher first where higher is better) or a name (A to Z).
type sortColumn struct {
	Name string
	What string
	// Figure reads the run's figure; ok is false where it has none (it
	// sorts last). Lower says a lower figure ranks first.
	Figure func(b *board, r *boardRun) (v float64, ok bool)
	Lower  bool
	// Text reads a name column.
	Text func(r *boardRun) string
	// AtContext: the column takes "@CONTEXT" (prefill, capacity).
	AtContext bool
	slo       bool
}

// sortColumns are the leaderboard's sortable columns, in help order.
var sortColumns = []sortColumn{
	{Name: "decode", What: "best sustained decode, total tok/s (the default)", Figure: func(_ *board, r *boardRun) (float64, bool) {
		return best(r.Best, func(p *paretoPoint) float64 { return p.Total })
	}},
	{Name: "slo-decode", What: "best decode within --slo", slo: true, Figure: func(_ *board, r *boardRun) (float64, bool) {
		return best(r.BestSLO, func(p *paretoPoint) float64 { return p.Total })
	}},
	{Name: "per-request", What: "per-request tok/s at the best decode", Figure: func(_ *board, r *boardRun) (float64, bool) {
		return best(r.Best, func(p *paretoPoint) float64 { return p.PerRequest })
	}},
	{Name: "ttft", What: "TTFT at the best decode, lowest first", Lower: true, Figure: func(_ *board, r *boardRun) (float64, bool) {
		return best(r.Best, func(p *paretoPoint) float64 { return p.TTFTms })
	}},
	{Name: "tbt", What: "time between tokens at the best decode, lowest first", Lower: true, Figure: func(_ *board, r *boardRun) (float64, bool) {
		return best(r.Best, func(p *paretoPoint) float64 { return p.TBTms })
	}},
	{Name: "prefill", What: "prompt tok/s at a context (prefill@16K; plain: the smallest prefill context)", AtContext: true, Figure: func(b *board, r *boardRun) (float64, bool) {
		c, ok := b.sortContext(b.Prefill)
		if !ok {
			return 0, false
		}
		for _, p := range r.R.Prefill {
			if p.Context == c && p.Status.ShowsFigures() && p.TokPerSec > 0 {
				return p.TokPerSec, true
			}
		}
		return 0, false
	}},
	{Name: "capacity", What: "serving capacity under the run's SLO at a context (capacity@0; plain: the smallest)", AtContext: true, Figure: func(b *board, r *boardRun) (float64, bool) {
		c, ok := b.sortContext(b.Capacity)
		if !ok || r.R.SLO == nil {
			return 0, false
		}
		for _, x := range r.R.SLO.Capacity {
			if x.Context == c {
				return float64(x.Concurrency) + x.Rate, true
			}
		}
		return 0, false
	}},
	{Name: "valid", What: "Valid cells", Figure: func(_ *board, r *boardRun) (float64, bool) { return float64(r.Counts.Valid), true }},
	{Name: "failed", What: "Failed cells, fewest first", Lower: true, Figure: func(_ *board, r *boardRun) (float64, bool) {
		// A run that measured no cell (it broke off before the first) has
		// no count of failures to lead with.
		return float64(r.Counts.Failed), slices.ContainsFunc(r.R.Decode, func(c result.Cell) bool { return c.Status != result.NotRun })
	}},
	{Name: "run", What: "the run's label", Text: func(r *boardRun) string { return r.Label }},
	{Name: "engine", What: "engine and version", Text: func(r *boardRun) string { return r.Engine }},
	{Name: "model", What: "model", Text: func(r *boardRun) string { return r.Model }},
	{Name: "quantization", What: "quantization", Text: func(r *boardRun) string { return r.Quant }},
	{Name: "hardware", What: "hardware", Text: func(r *boardRun) string { return r.Hardware }},
}

// SortColumns lists the leaderboard's sort columns with what each sorts
// by, for a command's help.
func SortColumns() string {
	var l []string
	for _, c := range sortColumns {
		l = append(l, c.Name+" ("+c.What+")")
	}
	return strings.Join(l, ", ")
}

func best(p *paretoPoint, f func(*paretoPoint) float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	v := f(p)
	return v, v > 0
}

// parseSort reads --sort: a column's name, "prefill@16K" for one that
// takes a context (context -1: the board's smallest).
func parseSort(s string) (sortColumn, int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return sortColumns[0], -1, nil
	}
	name, at, hasAt := strings.Cut(s, "@")
	for _, c := range sortColumns {
		if c.Name != name {
			continue
		}
		if !hasAt {
			return c, -1, nil
		}
		if !c.AtContext {
			return sortColumn{}, 0, fmt.Errorf("--sort %s: %s takes no @context", s, name)
		}
		ctx, err := parseContext(at)
		if err != nil {
			return sortColumn{}, 0, fmt.Errorf("--sort %s: %v", s, err)
		}
		return c, ctx, nil
	}
	var names []string
	for _, c := range sortColumns {
		names = append(names, c.Name)
	}
	return sortColumn{}, 0, fmt.Errorf("--sort %q is no leaderboard column (use %s)", s, strings.Join(names, ", "))
}

// parseContext reads a context as reports write it: "16K", "0", "8192".
func parseContext(s string) (int, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, ",", ""))
	mul := 1
	if rest, ok := strings.CutSuffix(strings.ToUpper(s), "K"); ok {
		s, mul = rest, 1024
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("context %q is not a token count such as 0, 8192 or 16K", s)
	}
	return n * mul, nil
}

// sortContext is the context the sort column reads: the one asked for,
// else the smallest of have.
func (b *board) sortContext(have []int) (int, bool) {
	if b.SortCtx >= 0 {
		return b.SortCtx, true
	}
	if len(have) == 0 {
		return 0, false
	}
	return have[0], true
}

// compare orders two runs by the column: a run without the figure after
// one with it; equal figures keep the order given (the sort is stable).
func (c sortColumn) compare(b *board, x, y *boardRun) int {
	if c.Text != nil {
		return cmp.Compare(strings.ToLower(c.Text(x)), strings.ToLower(c.Text(y)))
	}
	vx, okx := c.Figure(b, x)
	vy, oky := c.Figure(b, y)
	switch {
	case okx != oky:
		if okx {
			return -1
		}
		return 1
	case !okx:
		return 0
	case c.Lower:
		return cmp.Compare(vx, vy)
	}
	return cmp.Compare(vy, vx)
}
