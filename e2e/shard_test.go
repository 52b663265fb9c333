//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// TestShardedMatrixMatchesOneProcess runs a matrix as three shard processes
// with one --start-at against one fake engine (the third as a Kubernetes
// Indexed Job's pod runs it: --shards 3 and JOB_COMPLETION_INDEX), merges
// them with tokentap merge, and runs the same matrix from one process: a
// 1K row (prefix cache warmed) at 4 requests (2 + 1 + 1 over the shards)
// and 6 (2 + 2 + 2).
//
// Every time: the merged run has every cell's N, sent and streaming at
// once, histogram counts that are the shards' sums, and the shards' records
// merged into one file the record tools read.
//
// Its figures must match the single run within the fake's own jitter:
// TTFT and TBT medians within 2%, total tok/s within 1%, plus however much
// the fake's ledger (what it really wrote, and when) says it did
// differently in the two runs; and each run's tok/s must be within 1% of
// what the ledger says the fake wrote in its windows. The machine is shared:
// when other work stalls the load generators themselves (the ledger cannot
// see that), an attempt misses; up to three attempts are made, each one
// logged, and one must hold.
//
// The fake is set up so its timing dominates: a 200 ms first token, 10 ms
// between tokens plus 0.5 ms per running request, and outputs longer than
// a window, so every request decodes throughout it and tok/s is N streams'
// rate, not where request boundaries fall.
func TestShardedMatrixMatchesOneProcess(t *testing.T) {
	url, _ := startFake(t, "--ledger", "--first-event-delay", "200ms", "--tbt-base", "10ms", "--tbt-per-running", "500us",
		"--tbt-per-ktokens", "0", "--prefill-tok-per-sec", "100000", "--prefill-slowdown", "0")
	var misses []string
	for attempt := 1; attempt <= 3; attempt++ {
		problems := shardedAttempt(t, url, fmt.Sprint(attempt))
		if len(problems) == 0 {
			t.Logf("attempt %d: the merged run matches the single run", attempt)
			return
		}
		t.Logf("attempt %d missed:\n  %s", attempt, strings.Join(problems, "\n  "))
		misses = append(misses, fmt.Sprintf("attempt %d: %s", attempt, strings.Join(problems, "; ")))
	}
	t.Errorf("no attempt matched:\n%s", strings.Join(misses, "\n"))
}

// shardedAttempt runs the single and the sharded matrix once, fails the
// test on what must hold every time, and returns the comparisons that
// missed.
func shardedAttempt(t *testing.T, url, attempt string) (problems []string) {
	t.Helper()
	dir := t.TempDir()
	common := []string{"matrix", "--target", url, "--prefill", "none", "--contexts", "1k", "--concurrency", "4,6",
		"--max-output", "2048", "--window", "3s", "--quiet", "--format", "none"}

	one := filepath.Join(dir, "one.json")
	oneRecs := filepath.Join(dir, "one.jsonl")
	if out, err := exec.Command(bin(t), append(common, "--salt", "single"+attempt, "--out", one, "--records", oneRecs)...).CombinedOutput(); err != nil {
		t.Fatalf("single-process matrix: %v\n%s", err, out)
	}

	start := time.Now().Add(6 * time.Second).UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	outs := make([]bytes.Buffer, 3)
	for i := range 3 {
		args := append(append([]string(nil), common...), "--start-at", start, "--gap", "2s",
			"--out", filepath.Join(dir, fmt.Sprintf("s%d.json", i)), "--records", filepath.Join(dir, fmt.Sprintf("s%d.jsonl", i)))
		cmd := exec.Command(bin(t), args...)
		if i == 2 {
			cmd.Args = append(cmd.Args, "--shards", "3")
			cmd.Env = append(os.Environ(), "JOB_COMPLETION_INDEX=2")
		} else {
			cmd.Args = append(cmd.Args, "--shard", fmt.Sprintf("%d/3", i))
		}
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Run()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v\n%s", i, err, outs[i].String())
		}
	}
	merged, mergedRecs := filepath.Join(dir, "m.json"), filepath.Join(dir, "m.jsonl")
	margs := []string{"merge", "-o", merged, "--records", mergedRecs}
	for i := range 3 {
		margs = append(margs, filepath.Join(dir, fmt.Sprintf("s%d.json", i)), filepath.Join(dir, fmt.Sprintf("s%d.jsonl", i)))
	}
	if out, err := exec.Command(bin(t), margs...).CombinedOutput(); err != nil {
		t.Fatalf("tokentap merge: %v\n%s", err, out)
	}

	single, err := result.ReadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	m, err := result.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	var shards []*result.Result
	records := 0
	for i := range 3 {
		s, err := result.ReadFile(filepath.Join(dir, fmt.Sprintf("s%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		if s.Sharding == nil || s.Sharding.Shards[0].Index != i {
			t.Fatalf("s%d.json is not shard %d: %+v", i, i, s.Sharding)
		}
		shards = append(shards, s)
		records += len(readRecords(t, filepath.Join(dir, fmt.Sprintf("s%d.jsonl", i))))
	}
	recs := readRecords(t, mergedRecs)
	if len(recs) != records {
		t.Fatalf("merged records: %d; the shards wrote %d", len(recs), records)
	}
	_, body := httpDo(t, "GET", url+"/fake/ledger", "")
	var ledger []fixtures.LedgerEntry
	if err := json.Unmarshal([]byte(body), &ledger); err != nil {
		t.Fatalf("/fake/ledger: %v", err)
	}
	byID := map[string]*fixtures.LedgerEntry{}
	for i := range ledger {
		byID[ledger[i].ID] = &ledger[i]
	}
	singleRecs := readRecords(t, oneRecs)

	rel := func(got, want float64) float64 { return math.Abs(got-want) / want }
	for _, want := range single.Decode {
		c := m.Cell(want.Context, want.Concurrency)
		label := fmt.Sprintf("%d × %d", want.Context, want.Concurrency)
		if c == nil {
			t.Fatalf("%s: not in the merged run", label)
		}
		if c.Status != result.Valid || want.Status != result.Valid {
			// A stalled machine opens windows late or queues: a miss, not
			// a wrong merge.
			problems = append(problems, fmt.Sprintf("%s: merged %s (%s), single %s (%s)", label, c.Status, c.Reason, want.Status, want.Reason))
			continue
		}
		if c.Sent != c.Concurrency || c.PeakDecoding != c.Concurrency {
			t.Fatalf("%s: merged run sent %d, %d streaming at once; want N", label, c.Sent, c.PeakDecoding)
		}
		var ttft, tbt int64
		for _, s := range shards {
			if sc := s.Cell(want.Context, want.Concurrency); sc.Histograms != nil {
				ttft += sc.Histograms.TTFT.TotalCount()
				tbt += sc.Histograms.TBT.TotalCount()
			}
		}
		if c.Histograms.TTFT.TotalCount() != ttft || c.Histograms.TBT.TotalCount() != tbt {
			t.Fatalf("%s: merged histogram counts %d TTFT, %d TBT; shards' sums %d, %d", label,
				c.Histograms.TTFT.TotalCount(), c.Histograms.TBT.TotalCount(), ttft, tbt)
		}

		tag := fmt.Sprintf("C=%d N=%d", want.Context, want.Concurrency)
		ts := truthOf(t, byID, singleRecs, tag, want.MeasuredForSeconds)
		tm := truthOf(t, byID, recs, tag, c.MeasuredForSeconds)
		t.Logf("attempt %s, %s: one process %.1f tok/s, TTFT %.1f ms, TBT %.2f ms (fake's ledger %.1f, %.1f, %.2f); merged %.1f tok/s, %.1f ms, %.2f ms (ledger %.1f, %.1f, %.2f)",
			attempt, label, want.TotalTokPerSec, want.TTFTms, want.TBTms, ts.tokS, ts.ttft, ts.tbt,
			c.TotalTokPerSec, c.TTFTms, c.TBTms, tm.tokS, tm.ttft, tm.tbt)
		for _, r := range []struct {
			run       string
			got, fake float64
		}{{"one process", want.TotalTokPerSec, ts.tokS}, {"merged", c.TotalTokPerSec, tm.tokS}} {
			if rel(r.got, r.fake) > 0.01 {
				problems = append(problems, fmt.Sprintf("%s, %s: measured %.1f tok/s, the fake wrote %.1f tok/s", label, r.run, r.got, r.fake))
			}
		}
		for _, f := range []struct {
			name                string
			merged, single, tol float64
		}{
			{"TTFT ms", c.TTFTms, want.TTFTms, 0.02 + rel(tm.ttft, ts.ttft)},
			{"TBT ms", c.TBTms, want.TBTms, 0.02 + rel(tm.tbt, ts.tbt)},
			{"total tok/s", c.TotalTokPerSec, want.TotalTokPerSec, 0.01 + rel(tm.tokS, ts.tokS)},
		} {
			if rel(f.merged, f.single) > f.tol {
				problems = append(problems, fmt.Sprintf("%s: merged %s %.2f, one process %.2f: %.1f%% apart, more than %.1f%% (the fake's own difference included)",
					label, f.name, f.merged, f.single, 100*rel(f.merged, f.single), 100*f.tol))
			}
		}
	}
	if len(problems) > 0 {
		return problems
	}
	for _, r := range []string{one, merged} {
		out, err := exec.Command(bin(t), "report", r).CombinedOutput()
		if err != nil {
			t.Fatalf("tokentap report %s: %v\n%s", r, err, out)
		}
		t.Logf("tokentap report %s:\n%s", filepath.Base(r), grid(string(out)))
	}
	out, err := exec.Command(bin(t), "report", one, merged).CombinedOutput()
	if err != nil {
		t.Fatalf("tokentap report one.json m.json: %v\n%s", err, out)
	}
	t.Logf("one process (A) against three shards merged (B):\n%s", out)
	return nil
}

// grid keeps a report's All measurements table.
func grid(report string) string {
	_, rest, ok := strings.Cut(report, "All measurements")
	if !ok {
		return report
	}
	table, _, _ := strings.Cut(rest, "\nN:")
	return "All measurements" + table
}

func readRecords(t *testing.T, path string) []record.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := record.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// truth is what the fake's ledger says it did in a cell's windows.
type truth struct{ tokS, tbt, ttft float64 }

// truthOf reads a cell's truth from the ledger: the requests of the cell
// (tag) in recs, by load generator (the id's shard prefix, "" for one
// process), each load generator's window starting when its first request
// was sent and lasting secs. Tokens the fake wrote inside the windows over
// the window, the median gap before each of them (split over its tokens),
// and the median time from each request sent in them leaving the load
// generator to the fake writing its first token.
func truthOf(t *testing.T, byID map[string]*fixtures.LedgerEntry, recs []record.Record, tag string, secs float64) truth {
	t.Helper()
	parts := map[string][]record.Record{}
	for _, r := range recs {
		if r.Tag != tag {
			continue
		}
		p, _, _ := strings.Cut(r.ID, "/")
		if !strings.Contains(r.ID, "/") {
			p = ""
		}
		parts[p] = append(parts[p], r)
	}
	if len(parts) == 0 {
		t.Fatalf("no records of %s", tag)
	}
	w := time.Duration(secs * float64(time.Second))
	var out truth
	var gaps, ttfts []float64
	for _, rs := range parts {
		start := rs[0].Wall
		for _, r := range rs {
			if r.Wall.Before(start) {
				start = r.Wall
			}
		}
		end := start.Add(w)
		tokens := 0
		for _, r := range rs {
			le := byID[r.ResponseID]
			if le == nil {
				t.Fatalf("%s: request %s (%q) is not in the fake's ledger", tag, r.ID, r.ResponseID)
			}
			if !r.Wall.Before(end) {
				continue
			}
			// An event's time is when the fake handed its bytes to the
			// kernel (At, taken before the write, plus the write): a fake
			// descheduled around a write is late by that much for the
			// client too.
			at := func(i int) time.Time { return le.Events[i].At.Add(le.Events[i].Write) }
			if len(le.Events) > 0 {
				// From the request leaving the load generator (its kernel's
				// transmit stamp) to the first token reaching the fake's
				// kernel: all the fake's own delays included.
				ttfts = append(ttfts, float64(at(0).Sub(r.Wall))/1e6)
			}
			for i, ev := range le.Events {
				if at(i).Before(start) || !at(i).Before(end) {
					continue
				}
				tokens += ev.Tokens
				if i > 0 {
					g := float64(at(i).Sub(at(i-1))) / 1e6 / float64(ev.Tokens)
					for range ev.Tokens {
						gaps = append(gaps, g)
					}
				}
			}
		}
		out.tokS += float64(tokens) / secs
	}
	out.tbt, out.ttft = median(gaps), median(ttfts)
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}
