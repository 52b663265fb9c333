package main

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// TestMatrixAPIKey: the key comes from TOKENTAP_API_KEY or --api-key (the
// flag wins), reaches the engine as a Bearer token, and never shows in
// tokentap's output, --help included.
func TestMatrixAPIKey(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized) // stop the probe at once
	}))
	defer srv.Close()
	tests := []struct {
		name, env string
		args      []string
		want      string
	}{
		{name: "env", env: "env-sekrit", args: nil, want: "Bearer env-sekrit"},
		{name: "flag wins", env: "env-sekrit", args: []string{"--api-key", "flag-sekrit"}, want: "Bearer flag-sekrit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOKENTAP_API_KEY", tt.env)
			mu.Lock()
			got = nil
			mu.Unlock()
			var out, errb bytes.Buffer
			args := append([]string{"matrix", "--target", srv.URL, "--quiet"}, tt.args...)
			if code := run(args, &out, &errb); code == 0 {
				t.Fatal("a 401 from the engine exited 0")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) == 0 || got[0] != tt.want {
				t.Fatalf("Authorization %q, want %q", got, tt.want)
			}
			all := out.String() + errb.String()
			if strings.Contains(all, "sekrit") {
				t.Errorf("the key leaked into the output:\n%s", all)
			}
			if !strings.Contains(strings.ToLower(all), "key") && !strings.Contains(all, "401") {
				t.Errorf("the refusal is not explained:\n%s", all)
			}
		})
	}
	t.Setenv("TOKENTAP_API_KEY", "env-sekrit")
	var out, errb bytes.Buffer
	run([]string{"matrix", "--help"}, &out, &errb)
	if strings.Contains(out.String()+errb.String(), "sekrit") {
		t.Error("--help shows the key from the environment")
	}
}

// TestMatrixBadFlags: bad run settings stop before anything is started.
func TestMatrixBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "0s"},
		{"--window", "soon"},
		{"--concurrency", "0"},
		{"--contexts", "16q"},
		{"--api", "grpc"},
		{"--max-output", "0"},
		{"--kv-capacity", "-5"},
		{"--demo-listen", "8000"},
		{"--demo-listen", "127.0.0.1:1", "--target", "http://127.0.0.1:1"},
		{"extra-arg"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"matrix"}, args...), &out, &errb); code != 2 {
			t.Errorf("matrix %v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("matrix %v failed silently", args)
		}
	}
}

// TestDemoListen: the demo's fake engine listens where --demo-listen says.
func TestDemoListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	args := append([]string{"matrix", "--demo-listen", addr, "--format", "none"}, quick...)
	args = slices.DeleteFunc(args, func(a string) bool { return a == "--quiet" }) // the demo's banner names the address
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "fake engine at http://"+addr) {
		t.Errorf("the demo did not say it ran at %s:\n%s", addr, errb.String())
	}
}

// TestReplayUsage: replay needs a target and exactly one capture.
func TestReplayUsage(t *testing.T) {
	for _, args := range [][]string{
		{"capture.jsonl"},
		{"--target", "http://127.0.0.1:1"},
		{"--target", "http://127.0.0.1:1", "a.jsonl", "b.jsonl"},
		{"--target", "http://127.0.0.1:1", "--speed", "0", "a.jsonl"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"replay"}, args...), &out, &errb); code != 2 {
			t.Errorf("replay %v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

// TestReplayWrongFile: a result document given as the capture is named
// as such (it said "unexpected end of JSON input").
func TestReplayWrongFile(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"replay", "--target", "http://127.0.0.1:1", seedDoc}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "is a result document (tokentap matrix --out), not a capture") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestPrefillNone: --prefill none, and --prefill given empty, leave no
// prefill rows; a list replaces the scenario's.
func TestPrefillNone(t *testing.T) {
	for _, tt := range []struct {
		prefill string
		set     bool
		want    int
	}{
		{"none", true, 0},
		{"NONE", true, 0},
		{"", true, 0},
		{"", false, 5}, // not given: the seed's five rows
		{"8k,16k", true, 2},
	} {
		sc := scenarios.Seed()
		var cfg matrix.Config
		f := matrixFlags{Prefill: tt.prefill, PrefillSet: tt.set}
		if err := applyRunFlags(&sc, &cfg, f, nil); err != nil {
			t.Fatalf("--prefill %q: %v", tt.prefill, err)
		}
		if len(sc.Prefill) != tt.want {
			t.Errorf("--prefill %q (given %v): %d rows %v, want %d", tt.prefill, tt.set, len(sc.Prefill), sc.Prefill, tt.want)
		}
	}
}

// fakeEngine starts the fake engine for a test and returns its URL.
func fakeEngine(t *testing.T, faults ...fixtures.Fault) string {
	t.Helper()
	eng := fixtures.New(fixtures.DefaultModel(), fixtures.WithFaults(faults...))
	base, err := eng.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return base
}

// countingEngine is the fake engine behind a proxy that counts the
// requests reaching it, so a test can tell that a mistake stopped a run
// before any load (the probe included).
func countingEngine(t *testing.T, faults ...fixtures.Fault) (url string, requests *atomic.Int64) {
	t.Helper()
	base := fakeEngine(t, faults...)
	requests = new(atomic.Int64)
	target, _ := neturl.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	// A fresh connection per request: a stream cut by a fault must not
	// leave a dead kept-alive connection for the next request to meet.
	rp.Transport = &http.Transport{DisableKeepAlives: true}
	rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, requests
}

// quick is a matrix of one short cell: context 0, one request at once,
// no prefill rows.
var quick = []string{"--contexts", "0", "--concurrency", "1", "--prefill", "none", "--max-output", "8", "--window", "300ms", "--quiet"}

// TestMistakesCaughtBeforeLoad: what can be checked before load is, so a
// mistake costs no run: an unwritable or existing --out, an unknown
// format, bad percentiles, a target that is no URL. Not even the probe
// is sent.
func TestMistakesCaughtBeforeLoad(t *testing.T) {
	url, requests := countingEngine(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.json")
	if err := os.WriteFile(existing, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	scenario := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(scenario, []byte("window: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("old.json", link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no such directory", []string{"--out", "/nonexistent-dir-tokentap/run.json"}, "directory /nonexistent-dir-tokentap does not exist"},
		{"out is a directory", []string{"--out", dir}, "is a directory"},
		{"existing result", []string{"--out", existing}, "the file exists; give --overwrite"},
		{"unknown format", []string{"--format", "pdf"}, `--format: unknown report format "pdf"`},
		{"bad percentiles", []string{"--percentiles", "50,100"}, "--percentiles"},
		{"records in no directory", []string{"--records", "/nonexistent-dir-tokentap/r.jsonl"}, "--records"},
		{"existing records", []string{"--records", existing}, "--records " + existing + ": the file exists; give --overwrite"},
		{"link to an existing result", []string{"--out", link}, "the file exists; give --overwrite"},
		{"out is the scenario", []string{"--scenario", scenario, "--out", scenario, "--overwrite"}, "is the input " + scenario},
		{"out and records one file", []string{"--out", filepath.Join(dir, "x.json"), "--records", filepath.Join(dir, "x.json")}, "give each its own file"},
		{"both concurrency and rate", []string{"--rate", "1"}, "--concurrency and --rate are both given"},
		{"negative idle timeout", []string{"--idle-timeout", "-1s"}, "--idle-timeout -1s: give a positive duration"},
		{"not a URL", []string{"--target", "ftp://host"}, `--target: "ftp://host" is not an http(s) URL`},
		{"bad port", []string{"--target", "127.0.0.1:99999"}, "port 99999"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"matrix", "--target", url}, quick...)
			var out, errb bytes.Buffer
			code := run(append(args, tt.args...), &out, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d saying %q", code, errb.String(), exitUsage, tt.want)
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("%d requests reached the engine before the mistake was reported", n)
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "{}" {
		t.Error("the existing result was touched")
	}
}

// TestTargetWithoutScheme: --target host:port is taken as http://host:port
// for the probe and the load alike (it used to pass the probe and then
// fail every cell with an unparsable URL, exit 0).
func TestTargetWithoutScheme(t *testing.T) {
	url := fakeEngine(t)
	out := filepath.Join(t.TempDir(), "run.json")
	var so, se bytes.Buffer
	code := run(append([]string{"matrix", "--target", strings.TrimPrefix(url, "http://"), "--out", out, "--format", "none"}, quick...), &so, &se)
	if code != exitOK {
		r, _ := result.ReadFile(out)
		if r != nil {
			t.Logf("cell: %+v", r.Decode)
		}
		t.Fatalf("exit %d: %s", code, se.String())
	}
	r, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Cell(0, 1); c == nil || c.Status != result.Valid || r.Engine.URL != url {
		t.Errorf("cell %+v, engine URL %q; want a Valid cell measured at %s", c, r.Engine.URL, url)
	}
	if err := schematest.Result(r); err != nil {
		t.Errorf("the run's result does not match schema.json: %v", err)
	}
}

// TestExitCodes: a run whose cells failed exits 3 unless --allow-failed;
// an engine that cannot be reached exits 4; an existing --out is replaced
// with --overwrite.
func TestExitCodes(t *testing.T) {
	fault, err := fixtures.ParseFault("cut=3") // decode requests break; one-token warm-ups and counts do not
	if err != nil {
		t.Fatal(err)
	}
	failing := fakeEngine(t, fault)
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		target string
		args   []string
		code   int
		stderr string
	}{
		{"failed cells", failing, nil, exitFailed, "1 decode cell (0 × 1) failed (the report says why); exit 3. Give --allow-failed"},
		{"failed cells allowed", failing, []string{"--allow-failed"}, exitOK, "exit 0 (--allow-failed)"},
		{"unreachable", "http://" + freeAddr(t), nil, exitEngine, "connection refused"},
		{"nothing to measure", failing, []string{"--contexts", "100000k"}, exitUsage, "nothing to measure: no decode cell of the run fits this engine. Context 100000K dropped"},
		{"max output beyond the engine", failing, []string{"--max-output", "70000000"}, exitUsage, "nothing to measure"},
		{"wrong model", failing, []string{"--model", "nope"}, exitUsage, `does not serve model "nope"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, tt.name+".json")
			var so, se bytes.Buffer
			code := run(append(append([]string{"matrix", "--target", tt.target, "--out", out, "--format", "none"}, quick...), tt.args...), &so, &se)
			if code != tt.code || !strings.Contains(se.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d saying %q", code, se.String(), tt.code, tt.stderr)
			}
		})
	}
	// The failed run's result was kept; --overwrite replaces it, through
	// a link to it, which stays a link.
	out := filepath.Join(dir, "failed cells.json")
	if _, err := result.ReadFile(out); err != nil {
		t.Fatalf("the failed run's result: %v", err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(filepath.Base(out), link); err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	if code := run(append([]string{"matrix", "--target", failing, "--out", link, "--overwrite", "--allow-failed", "--format", "none"}, quick...), &so, &se); code != exitOK {
		t.Errorf("--overwrite: exit %d: %s", code, se.String())
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Error("--out LINK --overwrite replaced the link with a file")
	}
	if r, err := result.ReadFile(out); err != nil || !r.Started.After(time.Now().Add(-time.Minute)) {
		t.Errorf("the link's target was not written: %v", err)
	}
	// --out - is stdout, never a file named -.
	so.Reset()
	t.Chdir(dir)
	if code := run(append([]string{"matrix", "--target", failing, "--out", "-", "--allow-failed", "--format", "none"}, quick...), &so, &se); code != exitOK || !strings.Contains(so.String(), `"schema"`) {
		t.Errorf("--out -: exit %d, stdout %.80q: %s", code, so.String(), se.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Error("--out - wrote a file named -")
	}
}

// TestRecordsWriteFailureExits1: a --records file is output, as --out is:
// when it cannot be written (a full disk: /dev/full, written in place as a
// device is) the run says so and exits 1, not 0 after a good run.
func TestRecordsWriteFailureExits1(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	target := fakeEngine(t)
	out := filepath.Join(t.TempDir(), "run.json")
	var so, se bytes.Buffer
	code := run(append([]string{"matrix", "--target", target, "--out", out, "--records", "/dev/full", "--format", "none"}, quick...), &so, &se)
	if code != exitError || !strings.Contains(se.String(), "writing /dev/full") {
		t.Fatalf("exit %d, stderr %q; want %d saying the records were not written", code, se.String(), exitError)
	}
	if _, err := result.ReadFile(out); err != nil {
		t.Errorf("the run's result was not kept: %v", err)
	}
}

// TestDefaultResultNames: two runs started in the same second get two
// files; neither replaces the other.
func TestDefaultResultNames(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 1, 20, 54, 30, 0, time.UTC)
	a, err := reserveResultName(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reserveResultName(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a) != "tokentap-run-20261201-205430.json" || filepath.Base(b) != "tokentap-run-20261201-205430-2.json" {
		t.Errorf("names %s and %s", a, b)
	}
	// A real run with no --out takes a fresh name beside an existing one.
	url := fakeEngine(t)
	t.Chdir(dir)
	for range 2 {
		var so, se bytes.Buffer
		if code := run(append([]string{"matrix", "--target", url, "--format", "text"}, quick...), &so, &se); code != exitOK {
			t.Log(so.String())
			t.Fatalf("exit %d: %s", code, se.String())
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "tokentap-run-*.json"))
	good := 0
	for _, f := range files {
		if _, err := result.ReadFile(f); err == nil {
			good++
		}
	}
	if good != 2 {
		t.Errorf("%d readable results of 2 runs in %v", good, files)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestReplayFaithful: tokentap replay sends a refused request as it was
// (its unknown model is not swapped for the engine's, so the 404 comes
// back), cancels a cancelled one where its client did, and prints the
// captured and replayed figures side by side with their ratio.
func TestReplayFaithful(t *testing.T) {
	url := fakeEngine(t)
	m := fixtures.DefaultModel().Name
	dir := t.TempDir()
	capPath := filepath.Join(dir, "cap.jsonl")
	f, err := os.Create(capPath)
	if err != nil {
		t.Fatal(err)
	}
	w := record.NewWriter(f)
	recs := []record.Record{
		{ID: "ok", Model: m, Sent: 0, End: time.Second, PromptTokens: 20, MaxTokens: 16, CompletionTokens: 16, Stream: true, API: record.Chat, Outcome: record.OK},
		{ID: "refused", Model: "gpt-nope", Sent: 100 * time.Millisecond, End: 110 * time.Millisecond, MaxTokens: 16, Stream: true, API: record.Chat,
			Outcome: record.HTTPError, Status: 404, Blame: record.BlameClient},
		{ID: "cancelled", Model: m, Sent: 200 * time.Millisecond, End: 400 * time.Millisecond, PromptTokens: 20, MaxTokens: 4000, Stream: true, API: record.Chat,
			Outcome: record.Cancelled, Blame: record.BlameClient, First: 250 * time.Millisecond,
			Arrivals: []time.Duration{250 * time.Millisecond, 260 * time.Millisecond, 270 * time.Millisecond}},
	}
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	f.Close()
	out := filepath.Join(dir, "replayed.jsonl")
	var so, se bytes.Buffer
	code := run([]string{"replay", "--target", url, "--records", out, capPath}, &so, &se)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, se.String())
	}
	rf, _ := os.Open(out)
	got, err := record.ReadAll(rf)
	rf.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		switch r.Tag {
		case "refused":
			if r.Outcome != record.HTTPError || r.Model != "gpt-nope" {
				t.Errorf("the refused request replayed as %s for %q; want it refused again, sent as it was", r.Outcome, r.Model)
			}
		case "cancelled":
			if r.Outcome != record.Cancelled || r.ArrivedTokens() > 10 {
				t.Errorf("the cancelled request replayed as %s with %d tokens; want cancelled after about 3", r.Outcome, r.ArrivedTokens())
			}
		}
	}
	for _, want := range []string{"captured", "replayed", "replayed/captured", "Requests", "3 (1 ok, 1 failed, 1 cancelled)"} {
		if !strings.Contains(so.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, so.String())
		}
	}
	t.Log(so.String())
}

// TestInterruptedWord: an interrupted demo (no --out) does not speak of a
// result it never writes; a run with --out keeps saying its result holds
// the cells finished; other errors pass unchanged.
func TestInterruptedWord(t *testing.T) {
	gone := errors.New("the engine broke off the run")
	for _, tc := range []struct {
		err  error
		out  string
		want string
	}{
		{matrix.ErrInterrupted, "", "no result file: give --out to keep one"},
		{matrix.ErrInterrupted, "run.json", "the result holds the cells finished so far"},
		{gone, "", "the engine broke off the run"},
	} {
		if got := interruptedWord(tc.err, tc.out).Error(); !strings.Contains(got, tc.want) {
			t.Errorf("%v, --out %q: %q; want %q", tc.err, tc.out, got, tc.want)
		}
	}
}
