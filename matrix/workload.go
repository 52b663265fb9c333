package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/dataset"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// Workloads as users bring them (METHOD §3, workloads): the user's
// dataset in place of synthetic prompts, a request count ending a cell,
// bursty arrivals, and a sweep that finds its rates itself.

// ErrDataset is returned, with a nil result and before any load, when a
// dataset line cannot run on this engine (too long for its context).
var ErrDataset = errors.New("dataset")

// datasetSlack is the tokens a chat template may add around a dataset
// prompt: a prompt of B bytes has at most B tokens of text, so one whose
// bytes, this slack and its max_tokens fit the max model length fits, and
// only longer ones are counted.
const datasetSlack = 64

// datasetRun is a dataset run's sample, encoded once before any load.
type datasetRun struct {
	bodies []replay.Body // the shard's part of the sample, in order
	next   int           // the next body a cell takes
	taken  int           // bodies taken so far, wrapping included
}

// loadDataset encodes the shard's part of the dataset's sample as request
// bodies, sent as given (model, stream, usage and max_tokens set by
// tokentap; ignore_eos unless the line says), and checks every line fits
// the engine's max model length (maxLen; 0 unknown) before any load.
func (r *runner) loadDataset(ctx context.Context, d *dataset.Dataset, maxLen int) error {
	order := dataset.ShardOf(d.Order(r.sc.Seed), r.cfg.Shard.Index, max(r.cfg.Shard.Count, 1))
	ds := &datasetRun{}
	for _, idx := range order {
		e := d.Entries[idx]
		maxTokens := e.MaxTokens
		if maxTokens == 0 {
			maxTokens = r.sc.MaxOutput
		}
		if maxLen > 0 && len(e.Text)+datasetSlack+maxTokens > maxLen {
			n, err := r.info.CountTokens(ctx, string(r.tgt.API), e.Text)
			if err != nil {
				return fmt.Errorf("%w %s line %d: counting its prompt's tokens: %v", ErrDataset, d.Name, e.Line, err)
			}
			if n+maxTokens > maxLen {
				return fmt.Errorf("%w %s line %d: %d prompt tokens + max_tokens %d = %d is more than the engine's max model length %d: shorten or drop the line, or lower its max_tokens",
					ErrDataset, d.Name, e.Line, n, maxTokens, n+maxTokens, maxLen)
			}
		}
		b, err := r.datasetBody(e, maxTokens)
		if err != nil {
			return fmt.Errorf("%w %s line %d: %v", ErrDataset, d.Name, e.Line, err)
		}
		ds.bodies = append(ds.bodies, b)
	}
	r.ds = ds
	return nil
}

// datasetBody is one dataset line as a request body: its fields as given,
// with the model, streaming with usage, max_tokens and the scenario's
// sampling and extra fields (where the line does not set them) added.
func (r *runner) datasetBody(e dataset.Entry, maxTokens int) (replay.Body, error) {
	m := make(map[string]any, len(e.Fields)+8)
	for k, v := range r.sc.Extra {
		m[k] = v
	}
	for k, v := range r.sc.SamplingFields() {
		m[k] = v
	}
	for k, v := range e.Fields {
		m[k] = v
	}
	delete(m, "max_completion_tokens")
	m["model"] = r.tgt.Model
	m["max_tokens"] = maxTokens
	m["stream"] = true
	so, _ := m["stream_options"].(map[string]any)
	if so == nil {
		so = map[string]any{}
	}
	so["include_usage"] = true
	m["stream_options"] = so
	if _, ok := m["ignore_eos"]; !ok {
		m["ignore_eos"] = true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return replay.Body{}, err
	}
	return replay.Body{Head: b, MaxTokens: maxTokens}, nil
}

// take returns the next n bodies of the sample (n 0: all of it, from the
// next), wrapping to its start when a cell asks for more than is left.
func (ds *datasetRun) take(n int) []replay.Body {
	if n <= 0 {
		n = len(ds.bodies)
	}
	out := make([]replay.Body, n)
	for i := range out {
		out[i] = ds.bodies[(ds.next+i)%len(ds.bodies)]
	}
	return out
}

// used records that a cell sent k bodies of the sample.
func (ds *datasetRun) used(k int) {
	ds.next = (ds.next + k) % len(ds.bodies)
	ds.taken += k
}

// datasetSettings is the result's record of dataset d.
func datasetSettings(d *dataset.Dataset) *result.Dataset {
	out := &result.Dataset{Name: d.Name, Size: d.Size, SHA256: d.SHA256, Format: d.Format, Entries: len(d.Entries), Skipped: len(d.Skipped)}
	if len(d.Skipped) > 0 {
		out.SkippedWhy = d.SkipSummary()
	}
	return out
}

// arrivals is rate cell (c, rate)'s schedule: ArrivalTimes with the run's
// burstiness over the window, or, with a request count and no window,
// over the time the count takes at the rate; span is that time. The seed is the run's
// (--seed) and the cell's, so a rerun sends on the same schedule.
func (r *runner) arrivals(c int, rate float64) (at []time.Duration, span time.Duration) {
	w := r.sc.Window
	if w <= 0 {
		w = time.Duration(float64(r.sc.Requests) / rate * float64(time.Second))
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%d|%g", r.sc.Seed, c, rate)
	return replay.ArrivalTimes(rate, r.sc.Burstiness, w, h.Sum64()), w
}

// sweepRow runs context c as a sweep (GuideLLM's sweep profile,
// guidellm/benchmark/profiles/sweep.py): one request at a time (a closed
// loop of 1), then as many as the engine takes (a closed loop of the
// largest concurrency that fits), then rate cells at the rates spread
// evenly between their achieved rates, the last the throughput's. The
// row's cells end ordered by rate: synchronous, rates, throughput.
func (r *runner) sweepRow(ctx context.Context, c int) error {
	ns := r.plan.runnable(c)
	if len(ns) == 0 {
		return nil
	}
	ends := []int{ns[0]}
	if top := ns[len(ns)-1]; top != ns[0] {
		ends = append(ends, top)
	}
	if err := r.row(ctx, c, ends); err != nil {
		return err
	}
	var achieved []float64
	for _, n := range ends {
		out := r.res.Cell(c, n)
		if out == nil || !out.ShowsFigures() || out.AchievedRate <= 0 {
			r.note(fmt.Sprintf("Sweep of context %s: the %d-stream cell measured no rate (%s), so no rate cells were run.",
				TokenLabel(c), n, out.Status.Label()))
			r.dropSweepColumns(c, ends)
			r.prog.sweepRates(c, nil, r.sc.Window) // no rate cells: none left to wait for
			return nil
		}
		achieved = append(achieved, out.AchievedRate)
	}
	if len(achieved) < 2 {
		achieved = append(achieved, achieved[0])
	}
	rates := sweepRates(achieved[0], achieved[1], scenarios.SweepSize)
	if w := r.sc.Window; w > 0 && len(rates) > 0 && !sweepHears(rates, w) {
		r.prog.sweepRates(c, nil, w)
		r.dropSweepColumns(c, ends)
		r.note(fmt.Sprintf("Sweep of context %s: one request at a time achieved %s requests/s, so its fastest rate cell, %s/s, would send %.1f requests in a %s window: too few to measure, and no rate cells were run. Give outputs that end well inside the window (--max-output, now %d tokens) or a longer --window.",
			TokenLabel(c), strconv.FormatFloat(achieved[0], 'g', 3, 64), strconv.FormatFloat(rates[len(rates)-1], 'g', 3, 64),
			rates[len(rates)-1]*w.Seconds(), w, r.sc.MaxOutput))
		return nil
	}
	r.prog.sweepRates(c, rates, r.sc.Window)
	r.dropSweepColumns(c, ends)
	if len(rates) == 0 {
		r.note(fmt.Sprintf("Sweep of context %s: the %d-stream cell achieved %s requests/s, fewer than the %d-stream cell's %s, so no rate lies between them to sweep and no rate cells were run: the engine gained nothing from more streams, or the machine was busier during that window (run again, or with a longer --window).",
			TokenLabel(c), ends[len(ends)-1], strconv.FormatFloat(achieved[1], 'f', 2, 64), ends[0], strconv.FormatFloat(achieved[0], 'f', 2, 64)))
		return nil
	}
	for _, rate := range rates {
		r.res.Decode = append(r.res.Decode, result.Cell{Context: c, Rate: rate, Status: result.NotRun, MaxWaiting: -1})
	}
	r.res.Settings.Rates = slices.Compact(slices.Sorted(slices.Values(append(r.res.Settings.Rates, rates...))))
	err := r.rateRow(ctx, c, rates, true) // the closed cells sent the row's cold prefill
	r.orderSweep(c)
	return err
}

// sweepRates are the sweep's rate cells between the synchronous rate lo
// and the throughput hi: size − 2 of them, evenly spaced above lo up to
// hi (GuideLLM: linspace(lo, hi, size − 1) without its first), rounded
// down to 3 significant figures so none exceeds hi, and without
// duplicates. None when hi is below lo: no rate lies above the one and up
// to the other.
func sweepRates(lo, hi float64, size int) []float64 {
	if hi < lo {
		return nil
	}
	k := size - 2
	var out []float64
	for i := 1; i <= k; i++ {
		v := lo + (hi-lo)*float64(i)/float64(k)
		if v <= 0 {
			continue
		}
		mag := math.Pow(10, math.Floor(math.Log10(v))-2)
		v = math.Floor(v/mag) * mag
		v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
		if len(out) == 0 || v > out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// minSweepRequests is the fewest requests the fastest rate cell of a
// sweep must expect in its window for the sweep to run rate cells.
const minSweepRequests = 2

// sweepHears says whether a sweep's rate cells can measure anything in a
// window w: its fastest rate expects at least minSweepRequests in it. A
// new user's sweep with 8,192-token outputs reached 0.017 requests/s one
// at a time: every rate cell of a 5 s window heard no request, and each
// read Failed.
func sweepHears(rates []float64, w time.Duration) bool {
	return len(rates) > 0 && rates[len(rates)-1]*w.Seconds() >= minSweepRequests
}

// dropSweepColumns removes context c's concurrency cells a sweep does not
// measure (all but ends).
func (r *runner) dropSweepColumns(c int, ends []int) {
	r.res.Decode = slices.DeleteFunc(r.res.Decode, func(x result.Cell) bool {
		return x.Context == c && x.Rate == 0 && !slices.Contains(ends, x.Concurrency)
	})
}

// orderSweep orders context c's cells by rate: the synchronous cell, the
// rate cells, the throughput cell (a closed cell's rate is its achieved
// one).
func (r *runner) orderSweep(c int) {
	rate := func(x result.Cell) float64 {
		if x.Rate > 0 {
			return x.Rate
		}
		if x.Concurrency == 1 {
			return -1 // first, whatever it achieved
		}
		return math.Inf(1) // the throughput last
	}
	var row []result.Cell
	var others []result.Cell
	for _, x := range r.res.Decode {
		if x.Context == c {
			row = append(row, x)
		} else {
			others = append(others, x)
		}
	}
	slices.SortStableFunc(row, func(a, b result.Cell) int {
		switch ra, rb := rate(a), rate(b); {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	// Keep the rows in context order: this row after the earlier ones.
	var out []result.Cell
	placed := false
	for _, x := range others {
		if !placed && x.Context > c {
			out = append(out, row...)
			placed = true
		}
		out = append(out, x)
	}
	if !placed {
		out = append(out, row...)
	}
	r.res.Decode = out
}

// closedRate is a closed cell's request rate, the sweep's axis: its
// output tokens per second over the tokens a request gets (the mean of
// the requests that completed; where none did, of their max_tokens,
// which ignore_eos makes the engine send). A loop that keeps N requests
// in flight starts one as one ends, at the rate their tokens are served;
// counting the requests sent in the window instead counts the N sent at
// its start as a rate, double the engine's throughput or more when
// requests outlast the window.
func closedRate(tokPerSec float64, recs []record.Record) float64 {
	var sum, n int
	for i := range recs {
		if recs[i].Outcome == record.OK && recs[i].CompletionTokens > 0 {
			sum += recs[i].CompletionTokens
			n++
		}
	}
	if n == 0 {
		for i := range recs {
			if recs[i].MaxTokens > 0 {
				sum += recs[i].MaxTokens
				n++
			}
		}
	}
	if n == 0 || sum == 0 {
		return 0
	}
	return tokPerSec / (float64(sum) / float64(n))
}

// requests is this load generator's part of the run's request count (0:
// none): a shard's share, split as its streams are (METHOD §10).
func (r *runner) requests() int {
	if r.sc.Requests <= 0 {
		return 0
	}
	return max(r.share(r.sc.Requests), 1)
}

// workloadFigures adds what a workload changes to a judged closed cell: a
// dataset's prompts are cold (sent once, never warmed); a sweep's closed
// cells have the rate they achieved, the sweep's axis.
func (r *runner) workloadFigures(out *result.Cell, recs []record.Record) {
	if r.ds != nil {
		out.TTFTKind = result.TTFTCold
	}
	if r.sc.Sweep && out.ShowsFigures() {
		out.AchievedRate = closedRate(out.TotalTokPerSec, recs)
	}
}

// Drawn lengths (METHOD §3, workloads): a synthetic request's prompt
// length and max_tokens spread around its row's context and --max-output,
// drawn from the run's seed, the row and the request's global slot, so a
// rerun and every shard draw the same.

// drawKey is the seed of one draw.
func (r *runner) drawKey(what string, c, slot int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%d", what, r.sc.Seed, c, slot)
	return h.Sum64()
}

// promptLength is the length slot's prompt of row c aims at: drawn around
// c (prompts.Builder.Length). Context 0 (a minimal prompt), the prefill
// rows' and the estimate's throwaway prompts keep their length; a row
// longer than the shared prefix keeps every prompt longer than it, so
// each still starts with it.
func (r *runner) promptLength(c, slot int) int {
	if c == 0 || slot == coldSlot || slot == primeSlot {
		return c
	}
	n := r.sc.PromptLengths.Draw(c, r.drawKey("prompt", c, slot))
	if p := r.sc.SharedPrefix; p > 0 && c > p {
		n = max(n, p+1)
	}
	return max(n, 1)
}

// outputLength is the max_tokens of slot's requests in row c: drawn
// around --max-output, within the max model length (bodies).
func (r *runner) outputLength(c, slot int) int {
	if !r.sc.OutputLengths.Varies() || slot == coldSlot || slot == primeSlot {
		return r.sc.MaxOutput
	}
	return max(r.sc.OutputLengths.Draw(r.sc.MaxOutput, r.drawKey("output", c, slot)), 1)
}

// lengthSettings is the result's record of a spread; nil: none.
func lengthSettings(l scenarios.Lengths) *result.Lengths {
	if !l.Varies() {
		return nil
	}
	return &result.Lengths{Stdev: l.Stdev, Min: l.Min, Max: l.Max, RangeRatio: l.RangeRatio, Summary: l.String()}
}

// fewerRequests names the closed-loop columns of the cells planned to run
// (not judged over capacity before any load) that a request count cannot
// fill (--requests 3 with N=4 runs 3 streams), as "N=4" labels; of a
// sweep's, only the throughput's.
func fewerRequests(requests int, cells []result.Cell, sweep bool) []string {
	if requests <= 0 {
		return nil
	}
	var ns []int
	for _, c := range cells {
		if c.Rate == 0 && c.Concurrency > requests && c.Status != result.OverCapacity && !slices.Contains(ns, c.Concurrency) {
			ns = append(ns, c.Concurrency)
		}
	}
	slices.Sort(ns)
	if sweep && len(ns) > 0 {
		ns = ns[len(ns)-1:] // a sweep runs one at a time and its throughput's level, the largest
	}
	var out []string
	for _, n := range ns {
		out = append(out, "N="+strconv.Itoa(n))
	}
	return out
}
