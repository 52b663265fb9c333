// Package merge turns the result documents of a sharded run's shards into
// one run of the same schema (METHOD.md §10), a pure function of the
// documents: no engine, no clock. Histograms merge exactly (HDR histograms
// of one geometry add bucket by bucket), counters add, and a cell's status
// is the worst of its shards' unless the shards together say worse (fewer
// than N decoding at once, windows opened apart). Shards of different runs,
// with different settings or facts, or whose windows do not overlap are
// refused with the reason.
package merge

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/shard"
)

// Input is one shard's document and the name to call it by in messages
// (its file name).
type Input struct {
	Name string
	Doc  *result.Result
}

// Summary is what a merge did besides the document: values the histogram
// merge dropped (0 unless geometries differ, which Runs refuses) and what
// the shards' clocks said.
type Summary struct {
	Shards  int
	Dropped int64
	// ClockSpreadMs is the largest difference between two shards' clock
	// offsets against the engine (0 when fewer than two were read).
	ClockSpreadMs float64
}

// Runs merges the documents of every shard of one sharded run. The order
// of ins does not matter.
func Runs(ins []Input) (*result.Result, Summary, error) {
	var sum Summary
	if len(ins) == 0 {
		return nil, sum, fmt.Errorf("no shard results to merge")
	}
	ins = slices.Clone(ins)
	if err := check(ins); err != nil {
		return nil, sum, err
	}
	sort.Slice(ins, func(a, b int) bool { return ins[a].Doc.Sharding.Shards[0].Index < ins[b].Doc.Sharding.Shards[0].Index })
	first := ins[0].Doc
	sh := first.Sharding
	sum.Shards = sh.Count

	out := *first // shard 0: engine, model, settings, probes, prefill rows
	out.Sharding = &result.Sharding{Run: sh.Run, Count: sh.Count, StartAt: sh.StartAt, GapSeconds: sh.GapSeconds}
	out.Decode = make([]result.Cell, len(first.Decode))
	out.Notes = nil
	for _, in := range ins {
		d := in.Doc
		out.Sharding.Shards = append(out.Sharding.Shards, d.Sharding.Shards[0])
		if d.Started.Before(out.Started) {
			out.Started = d.Started
		}
		if d.Ended.After(out.Ended) {
			out.Ended = d.Ended
		}
		out.Interrupted = out.Interrupted || d.Interrupted
	}
	corr, spread := corrections(out.Sharding.Shards)
	sum.ClockSpreadMs = spread
	out.Notes = mergeNotes(ins, spread)

	window := time.Duration(first.Settings.WindowSeconds * float64(time.Second))
	for i := range first.Decode {
		cells := make([]*result.Cell, len(ins))
		for s, in := range ins {
			cells[s] = &in.Doc.Decode[i]
		}
		c, dropped, err := mergeCell(cells, sh, corr, window, first.Bandwidth)
		if err != nil {
			return nil, sum, err
		}
		sum.Dropped += dropped
		out.Decode[i] = c
	}
	if sum.Dropped > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("Merging the shards' histograms dropped %d values outside their range.", sum.Dropped))
	}
	mergeRunSLO(&out)
	out.SetPercentiles(first.Settings.Percentiles)
	return &out, sum, nil
}

// check refuses inputs that are not all the shards of one run.
func check(ins []Input) error {
	for _, in := range ins {
		sh := in.Doc.Sharding
		switch {
		case sh == nil:
			return fmt.Errorf("%s is not a shard of a sharded run (it was not run with tokentap matrix --shard): only a sharded run's shards merge, since only they split every cell's requests and opened their windows together", in.Name)
		case len(sh.Shards) != 1:
			return fmt.Errorf("%s is already a merged run of %d shards; merge the shards' own results", in.Name, len(sh.Shards))
		case sh.Count < 1 || sh.Shards[0].Index < 0 || sh.Shards[0].Index >= sh.Count:
			return fmt.Errorf("%s: shard %d of %d is not a shard", in.Name, sh.Shards[0].Index, sh.Count)
		}
	}
	a := ins[0]
	sa := a.Doc.Sharding
	seen := map[int]string{}
	for _, b := range ins {
		sb := b.Doc.Sharding
		idx := sb.Shards[0].Index
		switch {
		case sb.Run != sa.Run:
			return fmt.Errorf("%s is a shard of run %q and %s of run %q: shards of different runs do not merge (each run's shards share one salt)", a.Name, sa.Run, b.Name, sb.Run)
		case sb.Count != sa.Count:
			return fmt.Errorf("%s is a shard of %d and %s a shard of %d: one run's shards agree on their number", a.Name, sa.Count, b.Name, sb.Count)
		case !sb.StartAt.Equal(sa.StartAt) || sb.GapSeconds != sa.GapSeconds:
			return fmt.Errorf("%s started at %s with %gs gaps and %s at %s with %gs gaps: shards of one run share one schedule",
				a.Name, sa.StartAt.Format(time.RFC3339Nano), sa.GapSeconds, b.Name, sb.StartAt.Format(time.RFC3339Nano), sb.GapSeconds)
		case b.Doc.Schema != a.Doc.Schema:
			return fmt.Errorf("%s has result schema %d and %s schema %d", a.Name, a.Doc.Schema, b.Name, b.Doc.Schema)
		}
		if prev, dup := seen[idx]; dup {
			return fmt.Errorf("%s and %s are both shard %d of run %q", prev, b.Name, idx, sa.Run)
		}
		seen[idx] = b.Name
		if err := sameSettings(a, b); err != nil {
			return err
		}
		if err := sameFacts(a, b); err != nil {
			return err
		}
		if a.Doc.Model.Served != b.Doc.Model.Served {
			return fmt.Errorf("%s asked model %q and %s model %q", a.Name, a.Doc.Model.Served, b.Name, b.Doc.Model.Served)
		}
		if len(a.Doc.Decode) != len(b.Doc.Decode) {
			return fmt.Errorf("%s has %d decode cells and %s %d", a.Name, len(a.Doc.Decode), b.Name, len(b.Doc.Decode))
		}
		for i := range a.Doc.Decode {
			ca, cb := &a.Doc.Decode[i], &b.Doc.Decode[i]
			if ca.Context != cb.Context || ca.Concurrency != cb.Concurrency {
				return fmt.Errorf("%s's cell %d is %d × %d and %s's %d × %d", a.Name, i, ca.Context, ca.Concurrency, b.Name, cb.Context, cb.Concurrency)
			}
		}
	}
	var missing []string
	for i := range sa.Count {
		if _, ok := seen[i]; !ok {
			missing = append(missing, fmt.Sprint(i))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("run %q has %d shards; shard %s missing: a merge needs every shard, since each sent only its share of every cell",
			sa.Run, sa.Count, strings.Join(missing, ", "))
	}
	return nil
}

// sameSettings refuses shards run with different settings, naming them.
func sameSettings(a, b Input) error {
	ma, mb := asMap(a.Doc.Settings), asMap(b.Doc.Settings)
	keys := map[string]bool{}
	for k := range ma {
		keys[k] = true
	}
	for k := range mb {
		keys[k] = true
	}
	var diff []string
	for k := range keys {
		va, _ := json.Marshal(ma[k])
		vb, _ := json.Marshal(mb[k])
		if string(va) != string(vb) {
			diff = append(diff, fmt.Sprintf("%s %s against %s", k, va, vb))
		}
	}
	if len(diff) == 0 {
		return nil
	}
	sort.Strings(diff)
	return fmt.Errorf("%s and %s were run with different settings (%s): shards of one run share them", a.Name, b.Name, strings.Join(diff, "; "))
}

func asMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// sameFacts refuses shards whose probes saw different engines: every shard
// probes the engine, and a merge of shards that measured different
// capacities or versions is not one run.
func sameFacts(a, b Input) error {
	fa, fb := facts(a.Doc), facts(b.Doc)
	for k, va := range fa {
		vb, ok := fb[k]
		switch {
		case !ok:
			return fmt.Errorf("%s's probe found %s = %s and %s's found none: every shard must see the same engine", a.Name, k, va, b.Name)
		case va != vb:
			return fmt.Errorf("%s's probe found %s = %s and %s's %s: every shard must see the same engine", a.Name, k, va, b.Name, vb)
		}
	}
	for k, vb := range fb {
		if _, ok := fa[k]; !ok {
			return fmt.Errorf("%s's probe found %s = %s and %s's found none: every shard must see the same engine", b.Name, k, vb, a.Name)
		}
	}
	return nil
}

func facts(r *result.Result) map[string]string {
	m := map[string]string{}
	for _, f := range r.Probes {
		k := f.Name
		if f.Source != "" {
			k += " (" + f.Source + ")"
		}
		if v, ok := m[k]; ok {
			m[k] = v + ", " + f.Value
			continue
		}
		m[k] = f.Value
	}
	return m
}

// corrections are what each shard's wall clock is ahead of the shards'
// middle one, as their offsets against the engine say, where that is more
// than the offsets' uncertainty (0 otherwise, and for a shard whose offset
// is unknown); spread is the largest difference between two known offsets.
func corrections(shards []result.ShardInfo) (corr map[int]time.Duration, spreadMs float64) {
	corr = map[int]time.Duration{}
	var known []result.ShardInfo
	for _, s := range shards {
		if s.ClockSource != "" {
			known = append(known, s)
		}
	}
	if len(known) < 2 {
		return corr, 0
	}
	sort.Slice(known, func(i, j int) bool { return known[i].ClockOffsetMs < known[j].ClockOffsetMs })
	spreadMs = known[len(known)-1].ClockOffsetMs - known[0].ClockOffsetMs
	mid := known[(len(known)-1)/2]
	for _, s := range known {
		d := s.ClockOffsetMs - mid.ClockOffsetMs
		if math.Abs(d) > s.ClockUncertaintyMs+mid.ClockUncertaintyMs {
			corr[s.Index] = time.Duration(d * float64(time.Millisecond))
		}
	}
	return corr, spreadMs
}

// mergeNotes keeps each note once: a note every shard made as it is, one
// only some made with the shards named; the shards' own "this is shard I"
// notes give way to the merged run's.
func mergeNotes(ins []Input, spreadMs float64) []string {
	sh := ins[0].Doc.Sharding
	out := []string{fmt.Sprintf(
		"Merged from %d shards of run %s (tokentap merge): every cell's requests were split over the shards, which opened their windows together on one schedule; the figures are those of all shards' requests together: histograms merged exactly, counts and tok/s added, average active requests added (each shard's own requests decoding).",
		sh.Count, sh.Run)}
	if spreadMs > 0 {
		out = append(out, fmt.Sprintf("The shards' clocks differed by up to %.1f ms against the engine's.", spreadMs))
	}
	type seen struct {
		shards []int
	}
	var order []string
	by := map[string]*seen{}
	for _, in := range ins {
		idx := in.Doc.Sharding.Shards[0].Index
		own := fmt.Sprintf("Shard %d of %d of run ", idx, sh.Count)
		for _, n := range in.Doc.Notes {
			if strings.HasPrefix(n, own) {
				continue
			}
			n = strings.TrimPrefix(n, fmt.Sprintf("Shard %d: ", idx))
			s, ok := by[n]
			if !ok {
				s = &seen{}
				by[n] = s
				order = append(order, n)
			}
			if !slices.Contains(s.shards, idx) {
				s.shards = append(s.shards, idx)
			}
		}
	}
	for _, n := range order {
		s := by[n]
		if len(s.shards) == len(ins) {
			out = append(out, n)
			continue
		}
		names := make([]string, len(s.shards))
		for i, x := range s.shards {
			names[i] = fmt.Sprint(x)
		}
		label := "Shard "
		if len(names) > 1 {
			label = "Shards "
		}
		out = append(out, label+strings.Join(names, ", ")+": "+n)
	}
	return out
}

// mergeCell merges one decode cell of every shard (cells[i] is shard i's).
func mergeCell(cells []*result.Cell, sh *result.Sharding, corr map[int]time.Duration, window time.Duration, bw *result.Bandwidth) (result.Cell, int64, error) {
	n := cells[0].Concurrency
	out := result.Cell{Context: cells[0].Context, Concurrency: n, MaxWaiting: -1}
	label := fmt.Sprintf("cell %d × %d", out.Context, n)

	// The shards that sent some of the cell's requests.
	var parts []int
	for i := range cells {
		if (shard.Spec{Index: i, Count: sh.Count}).Share(n) > 0 {
			parts = append(parts, i)
		}
	}
	worst := cells[parts[0]]
	worstShard := parts[0]
	measured := true
	for _, i := range parts {
		c := cells[i]
		if c.Status.Severity() > worst.Status.Severity() {
			worst, worstShard = c, i
		}
		measured = measured && c.Measured && c.Histograms != nil
	}
	out.Status, out.Reason = worst.Status, worst.Reason
	for _, i := range parts {
		if cells[i].Reason != worst.Reason {
			// Not every shard's: say whose.
			out.Reason = fmt.Sprintf("shard %d: %s", worstShard, worst.Reason)
			break
		}
	}

	// Each shard's part, for the report and the checks below.
	var steps []cell.Steps
	var opens, ends []time.Time
	for _, i := range parts {
		c := cells[i]
		cs := result.CellShard{Index: i, Share: (shard.Spec{Index: i, Count: sh.Count}).Share(n), Status: c.Status, Reason: c.Reason,
			TotalTokPerSec: c.TotalTokPerSec, OutputTokens: c.OutputTokens}
		if len(c.Shards) == 1 {
			own := c.Shards[0]
			cs.ScheduledAt, cs.Opened = own.ScheduledAt, own.Opened
			cs.LateMs = own.LateMs - millis(corr[i]) // against the middle shard's clock
			if !own.Opened.IsZero() && c.Measured {
				open := own.Opened.Add(-corr[i])
				opens = append(opens, open)
				ends = append(ends, open.Add(time.Duration(c.MeasuredForSeconds*float64(time.Second))))
				st, err := cell.DecodeSteps(own.Decoding, open.Sub(sh.StartAt))
				if err != nil {
					return out, 0, fmt.Errorf("%s, shard %d: %w", label, i, err)
				}
				steps = append(steps, st)
			}
		}
		out.Shards = append(out.Shards, cs)
	}
	if !measured {
		return out, 0, nil
	}

	// Windows must overlap: the shards measured the same interval, or the
	// merged figures describe no instant at which N requests ran. A Failed
	// cell is no measurement: its windows ended when its requests failed,
	// each shard's at its own instant, and the cell is Failed whatever
	// they overlap.
	if len(opens) > 1 && out.Status != result.Failed {
		lo, hi := slices.MaxFunc(opens, time.Time.Compare), slices.MinFunc(ends, time.Time.Compare)
		if !lo.Before(hi) {
			return out, 0, fmt.Errorf("%s: the shards' windows do not overlap (the latest opened at %s, the earliest closed at %s): they did not run together, so they are not one measurement",
				label, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
		}
	}

	// Figures: exact where they add up, as METHOD §10 says where not.
	out.Measured = true
	out.Histograms = histo.New()
	var dropped int64
	var (
		prompts         []int
		engine          []float64
		counterRates    []float64
		cacheSrc        string
		cacheReq, cMiss int
		cached, prompt  int64
	)
	for _, i := range parts {
		c := cells[i]
		d, err := out.Histograms.MergeExact(c.Histograms)
		if err != nil {
			return out, 0, fmt.Errorf("%s, shard %d: %w", label, i, err)
		}
		dropped += d
		out.TotalTokPerSec += c.TotalTokPerSec
		out.AvgActive += c.AvgActive
		out.Completed += c.Completed
		out.OutputTokens += c.OutputTokens
		out.Sent += c.Sent
		out.FailedReqs += c.FailedReqs
		out.MeasuredForSeconds = max(out.MeasuredForSeconds, c.MeasuredForSeconds)
		out.MaxWaiting = max(out.MaxWaiting, c.MaxWaiting)
		if c.PromptTokens > 0 {
			prompts = append(prompts, c.PromptTokens)
		}
		if c.EngineRunning > 0 {
			engine = append(engine, c.EngineRunning)
		}
		if c.AvgActiveSource != "" {
			out.AvgActiveSource = c.AvgActiveSource
		}
		if k := c.Cache; k != nil {
			switch k.Source {
			case result.CacheCounters:
				counterRates = append(counterRates, k.HitRate)
			default:
				// Per request (usage or the engine's word while it ran):
				// add. A shard reading the engine's slots sees every
				// shard's requests: keep the one that saw most.
				if k.Source == result.CacheRunning {
					if k.Requests > cacheReq {
						cacheSrc, cacheReq, cMiss, cached, prompt = k.Source, k.Requests, k.Misses, k.CachedTokens, k.PromptTokens
					}
					continue
				}
				cacheSrc = k.Source
				cacheReq += k.Requests
				cMiss += k.Misses
				cached += k.CachedTokens
				prompt += k.PromptTokens
			}
		}
	}
	out.SubWindows = mergeSubWindows(cells, parts)
	out.Unannounced = mergeUnannounced(cells, parts)
	ttft, atLeast, ok := out.Histograms.TTFTAt(0.5)
	out.TTFTms, out.TTFTAtLeast = msOf(ttft, ok), atLeast
	out.TBTms = msOf(histo.Latency(out.Histograms.TBT, 0.5))
	out.ITLChunkMs = msOf(histo.Latency(out.Histograms.ITL, 0.5))
	out.PerRequestTokPerSec, _ = out.Histograms.RateAt(0.5)
	out.TPOTRequestMs = msOf(out.Histograms.TPOTAt(0.5))
	if len(prompts) > 0 {
		slices.Sort(prompts)
		out.PromptTokens = prompts[(len(prompts)-1)/2]
	}
	if len(engine) > 0 {
		var s float64
		for _, v := range engine {
			s += v
		}
		out.EngineRunning = s / float64(len(engine))
	}
	switch {
	case cacheSrc != "" && prompt > 0:
		out.Cache = &result.Cache{HitRate: float64(cached) / float64(prompt), Requests: cacheReq, Misses: cMiss,
			CachedTokens: cached, PromptTokens: prompt, Source: cacheSrc}
	case len(counterRates) > 0:
		// Every shard read the engine's own counters over the same window.
		var s float64
		for _, v := range counterRates {
			s += v
		}
		out.Cache = &result.Cache{HitRate: s / float64(len(counterRates)), Source: result.CacheCounters}
	}
	out.PeakDecoding = cell.Sum(steps...).Peak()

	// What only the shards together can say.
	if out.Status.Severity() < result.RequestsQueued.Severity() {
		switch {
		case out.MaxWaiting > 0:
			out.Status = result.RequestsQueued
			out.Reason = fmt.Sprintf("the engine reported up to %d waiting requests during the window", out.MaxWaiting)
		case out.MaxWaiting < 0 && len(steps) == len(parts) && out.PeakDecoding < n:
			out.Status = result.RequestsQueued
			out.Reason = fmt.Sprintf("at most %d of the %d requests, over all shards, were decoding at the same time", out.PeakDecoding, n)
		}
	}
	if out.Status.Severity() < result.LateWindow.Severity() && len(opens) > 1 {
		lo, hi := slices.MinFunc(opens, time.Time.Compare), slices.MaxFunc(opens, time.Time.Compare)
		if tol := shard.LateTolerance(window); hi.Sub(lo) > tol {
			out.Status = result.LateWindow
			out.Reason = fmt.Sprintf("the shards opened the window %s apart (more than %s), clocks corrected: fewer than N requests ran at its start",
				hi.Sub(lo).Round(time.Millisecond), tol)
		}
	}
	// What a run adds beyond the seeds' columns (figures.go), and what
	// the TTFT holds: the same on every shard of a closed-loop cell.
	mine := make([]*result.Cell, len(parts))
	for k, i := range parts {
		mine[k] = cells[i]
	}
	out.SLO = mergeSLO(mine)
	out.TTFTSplit = mergeSplit(mine)
	if out.ShowsFigures() {
		out.DecodeLimit = mergeLimit(bw, &out, mine)
	}
	out.TTFTKind = worst.TTFTKind
	if out.Status == result.CacheMissed {
		out.TTFTKind = result.TTFTCacheMissed
	}
	return out, dropped, nil
}

func msOf(d time.Duration, ok bool) float64 {
	if !ok {
		return 0
	}
	return millis(d)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// mergeSubWindows sums the shards' tok/s part by part, as Total tok/s is
// summed (the shards' windows are one schedule's); their medians of time
// between tokens do not merge, and are left out (METHOD §9: a merged
// cell's TBT change gets no noise verdict). Nil unless every shard has
// them, in as many parts.
func mergeSubWindows(cells []*result.Cell, parts []int) *result.SubWindows {
	var out *result.SubWindows
	for _, i := range parts {
		sw := cells[i].SubWindows
		if sw == nil || out != nil && len(sw.TokS) != len(out.TokS) {
			return nil
		}
		if out == nil {
			out = &result.SubWindows{TokS: make([]float64, len(sw.TokS))}
		}
		for k, v := range sw.TokS {
			out.TokS[k] += v
		}
	}
	if out != nil && len(parts) == 1 {
		out.TBTms = cells[parts[0]].SubWindows.TBTms
	}
	return out
}

// mergeUnannounced: where a shard's tokens were counted short (its
// completed requests carried several tokens an event the engine did not
// announce), the merged cell is too. Its tokens per event are the shards'
// weighted by the tokens counted one an event; its scaled tok/s is the sum
// of each shard's scaled figure, or its tok/s where it had nothing short.
func mergeUnannounced(cells []*result.Cell, parts []int) *result.Unannounced {
	var out result.Unannounced
	var weighted float64
	short := false
	for _, i := range parts {
		c := cells[i]
		u := c.Unannounced
		if u == nil {
			out.ScaledTokPerSec += c.TotalTokPerSec
			continue
		}
		short = true
		out.OneEachTokens += u.OneEachTokens
		weighted += u.TokensPerEvent * float64(u.OneEachTokens)
		out.ScaledTokPerSec += u.ScaledTokPerSec
	}
	if !short || out.OneEachTokens == 0 {
		return nil
	}
	out.TokensPerEvent = weighted / float64(out.OneEachTokens)
	return &out
}
