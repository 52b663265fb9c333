package report

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// A board is many runs in one picture (METHOD §12): a leaderboard, one row
// per run, and per context the Pareto frontier of per-request against
// total tok/s over every Valid cell of the runs that can be compared.
// Runs that cannot be are still listed, with what differs named; a shard
// of a run is not a run; nothing given is left out without saying so.

// BoardRun is a run given to a board: its document and the file it came
// from (as given: the label is its base name where that tells it apart).
type BoardRun struct {
	File   string
	Result *result.Result
}

// BoardSkipped is a file the command found and could not put on the board
// (a directory's JSON file that is no result document), and why.
type BoardSkipped struct{ File, Why string }

// BoardOptions change what a board shows.
type BoardOptions struct {
	// Sort is the leaderboard's column (SortColumns); "" is best decode.
	Sort string
	// SLO, when set, keeps on the frontiers only cells that meet it and
	// adds the best decode within it to the leaderboard.
	SLO slo.Spec
	// Skipped are files found and not read as runs; the board lists them.
	Skipped []BoardSkipped
}

// boardRun is one run on the board, with its figures.
type boardRun struct {
	Index                   int // in the order given
	File, Label             string
	R                       *result.Result
	Engine, Model, Quant    string
	Hardware                string
	Settings                map[string]string // every setting, by "Section · Key"
	Best, BestSLO           *paretoPoint      // nil: no Valid cell (within the SLO)
	Counts                  cellCounts
	Rank                    int      // 1 for the leader; 0 for a run not ranked
	Apart                   []string // why the run is not ranked with the others
	LeftOut                 []string // why cells of the run are not on a frontier
	capacityByCtx           map[int]string
	sloText, launchDistinct string
}

// cellCounts counts a run's decode cells by status: Other holds Cache
// missed, Late window and Not run.
type cellCounts struct{ Valid, OverCapacity, Queued, Failed, Other int }

func (c cellCounts) String() string {
	return fmt.Sprintf("%d/%d/%d/%d", c.Valid, c.OverCapacity, c.Queued, c.Failed)
}

// ctxFrontier is the trade-off at one context: every point of every
// ranked run, the frontiers marked.
type ctxFrontier struct {
	Context int
	Points  []paretoPoint
}

// board is every run given, its leaderboard and its frontiers.
type board struct {
	Runs     []*boardRun // in leaderboard order: ranked, then apart
	Sort     sortColumn
	SortCtx  int
	SLO      slo.Spec
	Differs  []string // settings that differ between the runs, in section order
	Prefill  []int    // every prefill context of the runs
	Capacity []int    // every context with an SLO capacity
	Fronts   []ctxFrontier
	Skipped  []BoardSkipped
}

// ranked are the runs with a rank, in order.
func (b *board) ranked() []*boardRun {
	var l []*boardRun
	for _, r := range b.Runs {
		if r.Rank > 0 {
			l = append(l, r)
		}
	}
	return l
}

// byIndex is the run given at index i.
func (b *board) byIndex(i int) *boardRun {
	for _, r := range b.Runs {
		if r.Index == i {
			return r
		}
	}
	return nil
}

// comparableKeys are the settings two runs must share to be ranked
// together: they measured different things otherwise (the API, the loop,
// the window, the output asked for, what shaped every request).
var comparableKeys = []string{"Run · API", "Run · Decode test", "Run · Time per measurement", "Run · Max output",
	"Run · Columns", "Run · Shared prefix", "Run · Sampling", "Run · Request fields"}

// notSettings are view rows that say when or where a run ran, not what
// ran: they differ between any two runs.
var notSettings = []string{"Run · Started", "Run · Duration", "Engine · URL", "Hardware · Source"}

// inColumns are the settings the leaderboard shows in columns of their own.
var inColumns = []string{"Engine · Engine", "Engine · Version", "Engine · Quantization", "Model", "Hardware"}

func newBoard(runs []BoardRun, o BoardOptions) (*board, error) {
	if len(runs) == 0 {
		return nil, errors.New("report: a board needs at least one run")
	}
	sc, sortCtx, err := parseSort(o.Sort)
	if err != nil {
		return nil, err
	}
	if sc.slo && o.SLO.IsZero() {
		return nil, fmt.Errorf("--sort %s ranks by the best decode within an SLO: give --slo too", o.Sort)
	}
	b := &board{Sort: sc, SortCtx: sortCtx, SLO: o.SLO, Skipped: o.Skipped}
	labels := boardLabels(runs)
	var order []string // setting keys in section order
	seen := map[string]bool{}
	for i, in := range runs {
		if in.Result == nil {
			return nil, fmt.Errorf("report: run %d (%s) has no document", i+1, in.File)
		}
		r := in.Result
		br := &boardRun{Index: i, File: in.File, Label: labels[i], R: r, Engine: strings.TrimSpace(r.Engine.Name + " " + r.Engine.Version),
			Model: modelName(r), Quant: r.Engine.Quantization, Hardware: hardwareName(r), Settings: runSettings(r)}
		for _, k := range settingKeys(r) {
			if !seen[k] {
				seen[k] = true
				order = append(order, k)
			}
		}
		br.count()
		b.Runs = append(b.Runs, br)
	}
	b.shards()
	b.group()
	// What differs: every setting whose value is not the same in all runs.
	for _, k := range order {
		if slices.Contains(inColumns, k) {
			continue
		}
		for _, r := range b.Runs[1:] {
			if r.Settings[k] != b.Runs[0].Settings[k] {
				b.Differs = append(b.Differs, k)
				break
			}
		}
	}
	b.launchDiff()
	for _, r := range b.Runs {
		for _, p := range r.R.Prefill {
			if !slices.Contains(b.Prefill, p.Context) {
				b.Prefill = append(b.Prefill, p.Context)
			}
		}
		r.capacityByCtx = map[int]string{}
		if s := r.R.SLO; s != nil {
			r.sloText = s.Spec.Text
			for _, c := range s.Capacity {
				r.capacityByCtx[c.Context] = capacityText(c, r.R.RateRun())
				if !slices.Contains(b.Capacity, c.Context) {
					b.Capacity = append(b.Capacity, c.Context)
				}
			}
		}
	}
	slices.Sort(b.Prefill)
	slices.Sort(b.Capacity)
	b.frontiers()
	b.rank()
	return b, nil
}

// boardLabels names each run by its file's base name; runs whose base
// names are alike by the path given; the same path given twice by a
// number after it.
func boardLabels(runs []BoardRun) []string {
	base := make([]string, len(runs))
	n := map[string]int{}
	for i, r := range runs {
		base[i] = filepath.Base(r.File)
		if r.File == "" {
			base[i] = "run " + strconv.Itoa(i+1)
		}
		n[base[i]]++
	}
	labels := make([]string, len(runs))
	used := map[string]int{}
	for i, r := range runs {
		l := base[i]
		if n[l] > 1 && r.File != "" {
			l = filepath.Clean(r.File) // "./runs/a.json" is runs/a.json
		}
		used[l]++
		if used[l] > 1 {
			l += " (" + strconv.Itoa(used[l]) + ")"
		}
		labels[i] = l
	}
	return labels
}

// modelName is the model's display name, else the served name.
func modelName(r *result.Result) string {
	if r.Model.Name != "" {
		return r.Model.Name
	}
	if r.Model.Served != "" {
		return r.Model.Served
	}
	return dash
}

// settingKeys are a run's settings' keys in section order.
func settingKeys(r *result.Result) []string {
	keys := []string{"Model"}
	for _, s := range newView(r).Sections {
		for _, row := range s.Rows {
			keys = append(keys, s.Title+" · "+row.Key)
		}
	}
	return append(keys, "Run · Columns", columnsKey(r), "Run · Decode contexts", "Run · Prefill at", "Run · SLO", "Hardware")
}

// runSettings are a run's settings as its report shows them, by "Section ·
// Key", with the grid's axes and the SLO.
func runSettings(r *result.Result) map[string]string {
	m := map[string]string{"Model": modelName(r), "Hardware": hardwareName(r)}
	for _, s := range newView(r).Sections {
		for _, row := range s.Rows {
			m[s.Title+" · "+row.Key] = row.Value
		}
	}
	for _, k := range notSettings {
		delete(m, k)
	}
	ctx, cols := axes(r)
	m["Run · Columns"] = "concurrency levels"
	if r.RateRun() {
		m["Run · Columns"] = "request rates"
	}
	m["Run · Decode contexts"] = ctxList(ctx)
	var l []string
	for _, c := range cols {
		l = append(l, colHead(c))
	}
	m[columnsKey(r)] = strings.Join(l, ", ")
	m["Run · Prefill at"] = ctxList(r.Settings.PrefillAt)
	if r.SLO != nil {
		m["Run · SLO"] = r.SLO.Spec.Text
	}
	return m
}

// columnsKey names the grid's columns' values for a run.
func columnsKey(r *result.Result) string {
	if r.RateRun() {
		return "Run · Request rates"
	}
	return "Run · Concurrency levels"
}

// count tallies the run's decode cells by status.
func (br *boardRun) count() {
	for _, c := range br.R.Decode {
		switch c.Status {
		case result.Valid:
			br.Counts.Valid++
		case result.OverCapacity:
			br.Counts.OverCapacity++
		case result.RequestsQueued:
			br.Counts.Queued++
		case result.Failed:
			br.Counts.Failed++
		default:
			br.Counts.Other++
		}
	}
}

// shards sets apart a shard's own document: one load generator's part is
// not a run. Where the run its shards were merged into is on the board,
// the shard is in it; else merging makes the run.
func (b *board) shards() {
	merged := map[string]string{}
	for _, r := range b.Runs {
		if s := r.R.Sharding; s != nil && len(s.Shards) > 1 {
			merged[s.Run] = r.Label
		}
	}
	for _, r := range b.Runs {
		s := r.R.Sharding
		if s == nil || len(s.Shards) != 1 || s.Count <= 1 {
			continue
		}
		if m, ok := merged[s.Run]; ok {
			r.Apart = append(r.Apart, fmt.Sprintf("shard %d of %d of the run %s holds merged: counted there", s.Shards[0].Index+1, s.Count, m))
		} else {
			r.Apart = append(r.Apart, fmt.Sprintf("shard %d of %d of run %s, not a whole run: merge the shards with tokentap merge and give the merged run", s.Shards[0].Index+1, s.Count, s.Run))
		}
	}
}

// group ranks together the runs that agree on every comparable setting
// with the most runs (per setting, the value most runs have, ties to the
// run given first); a setting a document does not record (older ones, the
// seeds) agrees with any. The others are listed apart with what differs
// named. A ranked run with no decode context in common with any other
// ranked run is set apart too.
func (b *board) group() {
	ref := map[string]string{}
	for _, k := range comparableKeys {
		n := map[string]int{}
		for _, r := range b.Runs {
			if v := r.Settings[k]; len(r.Apart) == 0 && v != "" {
				n[v]++
				if n[v] > n[ref[k]] {
					ref[k] = v
				}
			}
		}
	}
	for _, r := range b.Runs {
		if len(r.Apart) > 0 {
			continue
		}
		for _, k := range comparableKeys {
			if v := r.Settings[k]; v != "" && ref[k] != "" && v != ref[k] {
				r.Apart = append(r.Apart, fmt.Sprintf("%s %s where the ranked runs have %s", strings.TrimPrefix(k, "Run · "), v, ref[k]))
			}
		}
	}
	var g []*boardRun
	for _, r := range b.Runs {
		if len(r.Apart) == 0 {
			g = append(g, r)
		}
	}
	if len(g) < 2 {
		return
	}
	for _, r := range g {
		own, _ := axes(r.R)
		shared := false
		for _, o := range g {
			oc, _ := axes(o.R)
			shared = shared || o != r && slices.ContainsFunc(own, func(c int) bool { return slices.Contains(oc, c) })
		}
		if !shared && len(r.R.Decode) > 0 {
			r.Apart = append(r.Apart, "no decode context in common with the other runs (it ran "+orDash(ctxList(own))+")")
		}
	}
}

// launchDiff names, for runs whose launch commands differ, the words of
// each that not every run's command has (flags and their values): the
// settings that made the difference, where a command line says them.
func (b *board) launchDiff() {
	words := func(cmd string) []string {
		var l []string
		for _, line := range strings.Split(cmd, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				f := strings.Fields(strings.TrimSuffix(t, "\\"))
				for i := 0; i < len(f); i++ {
					// A flag and its value are one setting.
					if strings.HasPrefix(f[i], "-") && i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
						l = append(l, f[i]+" "+f[i+1])
						i++
						continue
					}
					l = append(l, f[i])
				}
			}
		}
		return l
	}
	all := map[string]int{}
	for _, r := range b.Runs {
		for _, w := range slices.Compact(slices.Sorted(slices.Values(words(r.R.Engine.LaunchCommand)))) {
			all[w]++
		}
	}
	differ := false
	for _, r := range b.Runs {
		var own []string
		for _, w := range words(r.R.Engine.LaunchCommand) {
			if all[w] < len(b.Runs) {
				own = append(own, w)
			}
		}
		r.launchDistinct = strings.Join(own, " ")
		differ = differ || r.launchDistinct != ""
	}
	if differ {
		b.Differs = append(b.Differs, launchKey)
		for _, r := range b.Runs {
			r.Settings[launchKey] = r.launchDistinct
		}
	}
}

// launchKey names the words of the launch command not every run shares.
const launchKey = "Launch command (words not in every run's)"

// capacityText is an SLO capacity: "4 at once", "2 requests/s", "none".
func capacityText(c result.SLOCapacity, rate bool) string {
	switch {
	case rate && c.Rate > 0:
		return strconv.FormatFloat(c.Rate, 'f', -1, 64) + "/s"
	case !rate && c.Concurrency > 0:
		return strconv.Itoa(c.Concurrency)
	}
	return "none"
}

// frontiers lays out the points of every ranked run, per context, and
// marks the frontiers; each run's best decode (within the SLO) is its
// Valid cell with the highest total tok/s.
func (b *board) frontiers() {
	byCtx := map[int][]paretoPoint{}
	for _, r := range b.Runs {
		var missed, noRate, noHist int
		for i := range r.R.Decode {
			c := &r.R.Decode[i]
			if c.Status != result.Valid || !c.ShowsFigures() {
				continue
			}
			p := paretoPoint{Run: r.Index, Context: c.Context, Col: c.Column(), PerRequest: c.PerRequestTokPerSec,
				Total: c.TotalTokPerSec, TTFTms: c.TTFTms, TBTms: c.TBTms}
			if r.Best == nil || p.Total > r.Best.Total {
				r.Best = &p
			}
			if !b.SLO.IsZero() {
				ok, how := meetsSLO(r.R, c, b.SLO)
				if how == verdictNone {
					noHist++
					continue
				}
				if !ok {
					missed++
					continue
				}
				if r.BestSLO == nil || p.Total > r.BestSLO.Total {
					q := p
					r.BestSLO = &q
				}
			}
			if p.PerRequest <= 0 {
				noRate++
				continue
			}
			if len(r.Apart) == 0 {
				byCtx[c.Context] = append(byCtx[c.Context], p)
			}
		}
		if missed > 0 {
			r.LeftOut = append(r.LeftOut, english.Count(missed, "Valid cell misses", "Valid cells miss")+" the SLO")
		}
		if noHist > 0 {
			r.LeftOut = append(r.LeftOut, english.Count(noHist, "Valid cell", "Valid cells")+" kept no histograms to judge against the SLO")
		}
		if noRate > 0 {
			r.LeftOut = append(r.LeftOut, english.Count(noRate, "Valid cell has", "Valid cells have")+" no per-request tok/s")
		}
	}
	for _, c := range slices.Sorted(func(yield func(int) bool) {
		for k := range byCtx {
			if !yield(k) {
				return
			}
		}
	}) {
		pts := byCtx[c]
		markFrontiers(pts)
		b.Fronts = append(b.Fronts, ctxFrontier{Context: c, Points: pts})
	}
}

// rank sorts the ranked runs by the sort column (a run without the
// figure last, ties in the order given) and lists the runs apart after.
func (b *board) rank() {
	var in, apart []*boardRun
	for _, r := range b.Runs {
		if len(r.Apart) == 0 {
			in = append(in, r)
		} else {
			apart = append(apart, r)
		}
	}
	slices.SortStableFunc(in, func(x, y *boardRun) int { return b.Sort.compare(b, x, y) })
	for i, r := range in {
		r.Rank = i + 1
	}
	slices.SortStableFunc(apart, func(x, y *boardRun) int { return b.Sort.compare(b, x, y) })
	b.Runs = append(in, apart...)
}

// boardWriters write a board in each format.
var boardWriters = writers[*board]{
	Text: boardText, Markdown: boardMarkdown, CSV: boardCSV, JSON: boardJSON, HTML: boardHTML,
}

// NewBoardReporter is the board of runs in format f: the leaderboard, what
// differs between the runs, their prefill and SLO capacities, and per
// context the Pareto frontier of per-request against total tok/s.
func NewBoardReporter(runs []BoardRun, f Format, o BoardOptions) (Reporter, error) {
	if _, err := ParseFormat(string(f)); err != nil {
		return nil, err
	}
	b, err := newBoard(runs, o)
	if err != nil {
		return nil, err
	}
	return boardWriters.reporter(f, b)
}

// RenderBoard writes the board of runs in format f.
func RenderBoard(w io.Writer, runs []BoardRun, f Format, o BoardOptions) error {
	rep, err := NewBoardReporter(runs, f, o)
	if err != nil {
		return err
	}
	return rep(w)
}
