package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/shard"
)

func TestShardFlags(t *testing.T) {
	soon := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	tgt := "http://127.0.0.1:1"
	for _, tc := range []struct {
		name  string
		f     matrixFlags
		index string
		want  shard.Spec
		err   string
	}{
		{"not sharded", matrixFlags{Target: tgt}, "", shard.Spec{}, ""},
		{"shard", matrixFlags{Target: tgt, Shard: "1/3", StartAt: soon}, "", shard.Spec{Index: 1, Count: 3}, ""},
		{"indexed job", matrixFlags{Target: tgt, Shards: 3, StartAt: soon}, "2", shard.Spec{Index: 2, Count: 3}, ""},
		{"index ignored without --shards", matrixFlags{Target: tgt}, "2", shard.Spec{}, ""},
		{"both", matrixFlags{Target: tgt, Shard: "1/3", Shards: 3, StartAt: soon}, "1", shard.Spec{}, "give one"},
		{"no index", matrixFlags{Target: tgt, Shards: 3, StartAt: soon}, "", shard.Spec{}, "JOB_COMPLETION_INDEX is not set"},
		{"index out of range", matrixFlags{Target: tgt, Shards: 3, StartAt: soon}, "3", shard.Spec{}, "completions must equal --shards"},
		{"bad shard", matrixFlags{Target: tgt, Shard: "3/3", StartAt: soon}, "", shard.Spec{}, "--shard"},
		{"no start", matrixFlags{Target: tgt, Shard: "0/2"}, "", shard.Spec{}, "same --start-at"},
		{"start past", matrixFlags{Target: tgt, Shard: "0/2", StartAt: past}, "", shard.Spec{}, "passed"},
		{"start not RFC 3339", matrixFlags{Target: tgt, Shard: "0/2", StartAt: "in 2 minutes"}, "", shard.Spec{}, "RFC 3339"},
		{"short gap", matrixFlags{Target: tgt, Shard: "0/2", StartAt: soon, Gap: 10 * time.Millisecond}, "", shard.Spec{}, "--gap"},
		{"start without shard", matrixFlags{Target: tgt, StartAt: soon}, "", shard.Spec{}, "give --shard"},
		{"demo", matrixFlags{Shard: "0/2", StartAt: soon}, "", shard.Spec{}, "needs --target"},
		{"rendezvous", matrixFlags{Target: tgt, Shards: 3, Rendezvous: "job-0.tokentap-matrix:7070"}, "1", shard.Spec{Index: 1, Count: 3}, ""},
		{"rendezvous on loopback", matrixFlags{Target: tgt, Shard: "0/2", Rendezvous: "job-0.svc:7070", RvResolve: "127.0.0.1", RvMargin: time.Second, RvTimeout: time.Minute}, "", shard.Spec{Index: 0, Count: 2}, ""},
		{"rendezvous and start", matrixFlags{Target: tgt, Shard: "0/2", StartAt: soon, Rendezvous: "job-0.svc:7070"}, "", shard.Spec{}, "give one"},
		{"rendezvous without a port", matrixFlags{Target: tgt, Shard: "0/2", Rendezvous: "job-0.svc"}, "", shard.Spec{}, "want host:port"},
		{"rendezvous margin too short", matrixFlags{Target: tgt, Shard: "0/2", Rendezvous: "job-0.svc:7070", RvMargin: time.Millisecond}, "", shard.Spec{}, "margin"},
		{"rendezvous settings without one", matrixFlags{Target: tgt, Shard: "0/2", StartAt: soon, RvTimeout: time.Minute}, "", shard.Spec{}, "give --rendezvous"},
		{"rendezvous without shard", matrixFlags{Target: tgt, Rendezvous: "job-0.svc:7070"}, "", shard.Spec{}, "give --shard"},
	} {
		var cfg matrix.Config
		err := applyShardFlags(&cfg, tc.f, tc.index)
		switch {
		case tc.err == "" && (err != nil || cfg.Shard != tc.want):
			t.Errorf("%s: %v, %v; want %v", tc.name, cfg.Shard, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.err)
		}
		if tc.err == "" && tc.want.Sharded() && cfg.StartAt.IsZero() == (tc.f.Rendezvous == "") {
			t.Errorf("%s: start %v, rendezvous %+v: want one of them", tc.name, cfg.StartAt, cfg.Rendezvous)
		}
	}
}

// TestMatrixShardsWithoutIndex: --shards outside an Indexed Job stops with
// a usage error before anything is sent.
// TestMatrixShardRate: request-rate cells are not sharded; the run says so
// before any load.
func TestMatrixShardRate(t *testing.T) {
	soon := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	var out, errb bytes.Buffer
	code := runMatrix([]string{"--target", "http://127.0.0.1:1", "--shard", "0/2", "--start-at", soon, "--rate", "1,2", "--contexts", "0"}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "without --shard") {
		t.Errorf("exit %d, stderr %q; want 2 saying to run the rates without --shard", code, errb.String())
	}
}

func TestMatrixShardsWithoutIndex(t *testing.T) {
	t.Setenv("JOB_COMPLETION_INDEX", "")
	var out, errb bytes.Buffer
	code := run([]string{"matrix", "--target", "http://127.0.0.1:1", "--shards", "3", "--start-at", time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "JOB_COMPLETION_INDEX") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// shardFile writes shard i of count of a one-cell run that never ran
// (every cell Over capacity), enough for the command's plumbing.
func shardFile(t *testing.T, dir string, i, count int, run string) string {
	t.Helper()
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	r := &result.Result{Schema: result.SchemaVersion, Model: result.Model{Served: "m"}, Started: start, Ended: start.Add(time.Minute),
		Settings: result.Settings{WindowSeconds: 10, MaxOutput: 64, Contexts: []int{0}, Concurrency: []int{4}},
		Decode:   []result.Cell{{Context: 0, Concurrency: 4, Status: result.OverCapacity, Reason: "4 × 64 > 100", MaxWaiting: -1}},
		Sharding: &result.Sharding{Run: run, Count: count, StartAt: start, GapSeconds: 5, Shards: []result.ShardInfo{{Index: i}}}}
	p := filepath.Join(dir, "shard-"+run+"-"+string(rune('0'+i))+".json")
	if err := writeResult(r, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMergeCommand(t *testing.T) {
	dir := t.TempDir()
	a, b := shardFile(t, dir, 0, 2, "r1"), shardFile(t, dir, 1, 2, "r1")
	x := shardFile(t, dir, 1, 2, "r2")
	out := filepath.Join(dir, "run.json")

	var so, se bytes.Buffer
	if code := run([]string{"merge", a, b, "-o", out}, &so, &se); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, se.String())
	}
	m, err := result.ReadFile(out)
	if err != nil || m.Sharding == nil || len(m.Sharding.Shards) != 2 || m.Decode[0].Status != result.OverCapacity {
		t.Fatalf("merged run %+v, %v", m, err)
	}
	if !strings.Contains(se.String(), "2 shards of run r1 merged") {
		t.Errorf("stderr %q", se.String())
	}
	// Without -o the document goes to stdout, and nothing else does.
	so.Reset()
	se.Reset()
	if code := run([]string{"merge", "--quiet", b, a}, &so, &se); code != 0 || se.Len() != 0 {
		t.Fatalf("merge to stdout: exit %d: %s", code, se.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(so.Bytes(), &doc); err != nil || doc["sharding"] == nil {
		t.Errorf("stdout is not the merged document: %v", err)
	}

	for _, tc := range []struct {
		args  []string
		code  int
		words string
	}{
		// Shards that do not make one run are input files that are wrong: 2.
		{[]string{a, x}, 2, "different runs"},
		{[]string{a}, 2, "shard 1 missing"},
		{[]string{}, 2, "give the shards' result files"},
		{[]string{a, filepath.Join(dir, "nope.json")}, 2, "does not exist"},
	} {
		so.Reset()
		se.Reset()
		code := run(append([]string{"merge", "-o", filepath.Join(dir, "bad.json")}, tc.args...), &so, &se)
		if code != tc.code || !strings.Contains(se.String(), tc.words) {
			t.Errorf("merge %v: exit %d, stderr %q; want %d saying %q", tc.args, code, se.String(), tc.code, tc.words)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.json")); err == nil {
		t.Error("a refused merge wrote its output")
	}
	// Record files need --records.
	recs := filepath.Join(dir, "shard-0.jsonl")
	if err := os.WriteFile(recs, []byte(`{"v":1,"id":"s0/C=0 N=4#1","wall":"2025-06-01T12:00:10Z","stream":true,"sent_ns":0,"end_ns":1,"outcome":"ok","prompt_tokens":1,"completion_tokens":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	se.Reset()
	if code := run([]string{"merge", a, b, recs, "-o", out, "--overwrite"}, &so, &se); code != 2 || !strings.Contains(se.String(), "--records-out FILE") {
		t.Errorf("record files without --records-out: exit %d, %q", code, se.String())
	}
	// --records-out names the output; --records, its old name, still does.
	for _, flag := range []string{"--records-out", "--records"} {
		merged := filepath.Join(dir, "run"+flag+".jsonl")
		se.Reset()
		if code := run([]string{"merge", a, b, recs, "-o", out, "--overwrite", flag, merged}, &so, &se); code != 0 {
			t.Errorf("merge with %s: exit %d, %q", flag, code, se.String())
		}
		if got, _ := os.ReadFile(merged); !strings.Contains(string(got), "s0/C=0 N=4#1") {
			t.Errorf("%s: merged records %q", flag, got)
		}
	}
	// An output named twice was the last one, in silence: refused, with
	// nothing written.
	for _, tc := range []struct {
		args  []string
		words string
	}{
		{[]string{"-o", out, "-o", filepath.Join(dir, "other.json")}, "-o/--out given twice"},
		{[]string{"-o", out, "--out", filepath.Join(dir, "other.json")}, "-o/--out given twice"},
		{[]string{"--records-out", filepath.Join(dir, "x.jsonl"), "--records", filepath.Join(dir, "y.jsonl")}, "--records-out given twice"},
	} {
		se.Reset()
		if code := run(append([]string{"merge", a, b, recs, "--overwrite"}, tc.args...), &so, &se); code != 2 || !strings.Contains(se.String(), tc.words) {
			t.Errorf("merge %v: exit %d, %q; want 2 saying %q", tc.args, code, se.String(), tc.words)
		}
	}
	for _, f := range []string{"other.json", "x.jsonl", "y.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("a refused merge wrote %s", f)
		}
	}
	// An output for records with no record files says where they go.
	se.Reset()
	if code := run([]string{"merge", a, b, "-o", out, "--overwrite", "--records-out", filepath.Join(dir, "none.jsonl")}, &so, &se); code != 2 ||
		!strings.Contains(se.String(), "go among the files to merge, e.g. tokentap merge shard-*.json shard-*.jsonl") {
		t.Errorf("--records-out without record files: exit %d, %q", code, se.String())
	}
}

// TestMergeOutputs: merge's outputs keep the README's promise: an existing
// file is kept unless --overwrite, no output is a file merged (by any
// name), a link is written through, and --records without record files to
// merge is refused rather than writing nothing in silence.
func TestMergeOutputs(t *testing.T) {
	dir := t.TempDir()
	a, b := shardFile(t, dir, 0, 2, "r1"), shardFile(t, dir, 1, 2, "r1")
	existing := filepath.Join(dir, "existing.json")
	target := filepath.Join(dir, "target.json")
	link := filepath.Join(dir, "link.json")
	for _, p := range []string{existing, target} {
		if err := os.WriteFile(p, []byte("KEEP"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("target.json", link); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(dir, "alias.json")
	if err := os.Symlink(filepath.Base(a), alias); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		words string
		kept  string // a file that must still hold KEEP
	}{
		{"existing file", []string{a, b, "-o", existing}, 2, "give --overwrite", existing},
		{"link to an existing file", []string{a, b, "-o", link}, 2, "give --overwrite", target},
		{"a shard itself", []string{a, b, "-o", a, "--overwrite"}, 2, "is the input", ""},
		{"a shard by another name", []string{a, b, "-o", alias, "--overwrite"}, 2, "is the input", ""},
		{"records without record files", []string{a, b, "--records", filepath.Join(dir, "r.jsonl")}, 2, "no record files among the files", ""},
		{"-o and --records one file", []string{a, b, "-o", existing, "--records", existing, "--overwrite"}, 2, "give each its own file", existing},
	} {
		var so, se bytes.Buffer
		code := run(append([]string{"merge"}, tc.args...), &so, &se)
		if code != tc.code || !strings.Contains(se.String(), tc.words) {
			t.Errorf("%s: exit %d, stderr %q; want %d saying %q", tc.name, code, se.String(), tc.code, tc.words)
		}
		if tc.kept != "" {
			if got, _ := os.ReadFile(tc.kept); string(got) != "KEEP" {
				t.Errorf("%s: %s was written over", tc.name, tc.kept)
			}
		}
	}
	if _, err := result.ReadFile(a); err != nil {
		t.Errorf("a shard was written over: %v", err)
	}
	var so, se bytes.Buffer
	if code := run([]string{"merge", a, b, "-o", link, "--overwrite"}, &so, &se); code != 0 {
		t.Fatalf("merge -o LINK --overwrite: exit %d: %s", code, se.String())
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("merge -o LINK replaced the link with a file")
	}
	if _, err := result.ReadFile(target); err != nil {
		t.Errorf("the link's target does not hold the merged run: %v", err)
	}
}

// writeResult writes r as a document at path.
func writeResult(r *result.Result, path string) error {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// TestMergeReadsPodLogs: on Kubernetes a shard's result leaves through its
// pod's log (--format=json on stdout), where kubectl logs interleaves the
// shard's stderr lines, before, after and among the document's. The merge
// reads such a log as the document itself; a log with two documents, or
// with none whole, is refused.
func TestMergeReadsPodLogs(t *testing.T) {
	dir := t.TempDir()
	a, b := shardFile(t, dir, 0, 2, "r1"), shardFile(t, dir, 1, 2, "r1")
	doc, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(doc), "\n")
	mid := len(lines) / 2
	podLog := "tokentap matrix: the engine answered late\n" +
		strings.Join(lines[:mid], "") +
		`{"level":"warn","message":"a log line among the document's"}` + "\n" +
		"2:04PM WRN clock offset 3ms\n" +
		strings.Join(lines[mid:], "") +
		"tokentap matrix: 1 decode cell (0 × 4) failed; exit 0 (--allow-failed).\n"
	logPath := filepath.Join(dir, "shard-1.log")
	if err := os.WriteFile(logPath, []byte(podLog), 0o644); err != nil {
		t.Fatal(err)
	}
	var fromFiles, fromLog, se bytes.Buffer
	if code := run([]string{"merge", "--quiet", a, b}, &fromFiles, &se); code != 0 {
		t.Fatalf("merge of files: exit %d: %s", code, se.String())
	}
	if code := run([]string{"merge", "--quiet", a, logPath}, &fromLog, &se); code != 0 {
		t.Fatalf("merge with a pod log: exit %d: %s", code, se.String())
	}
	if fromLog.String() != fromFiles.String() {
		t.Error("a shard read from its pod log merges differently from its file")
	}

	for name, bad := range map[string]string{
		"two documents": "tokentap matrix: a line\n" + string(doc) + string(doc),
		"cut short":     strings.Join(lines[:mid], ""),
		"no document":   "tokentap matrix: --start-at passed\n",
	} {
		p := filepath.Join(dir, "bad.log")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		se.Reset()
		if code := run([]string{"merge", "--quiet", a, p}, &fromLog, &se); code != exitUsage {
			t.Errorf("%s: exit %d, want %d: %s", name, code, exitUsage, se.String())
		}
	}
}
