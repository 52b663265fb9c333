package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

const seedDoc = "../../report/testdata/seed-002.json"

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run.html")
	runs := filepath.Join(dir, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{seedDoc, "../../report/testdata/seed-003.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runs, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(runs, "notes.json"), []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		{name: "text by default", args: []string{seedDoc}, stdout: "Agents-A1-4B-FP8 on RTX 3060 12GB\n"},
		{name: "flags after the file", args: []string{seedDoc, "--format", "md"}, stdout: "# Agents-A1-4B-FP8 on RTX 3060 12GB\n"},
		{name: "csv", args: []string{"--format", "csv", seedDoc}, stdout: "decode,131072,1,requests_queued,23.4,"},
		{name: "json", args: []string{"--format=json", seedDoc}, stdout: `"quantization": "FP8"`},
		{name: "format from env", args: []string{seedDoc}, env: map[string]string{"TOKENTAP_REPORT_FORMAT": "md"}, stdout: "## All measurements"},
		{name: "flag beats env", args: []string{"--format", "csv", seedDoc}, env: map[string]string{"TOKENTAP_REPORT_FORMAT": "md"}, stdout: "phase,context_tokens"},
		{name: "html to a file by extension", args: []string{seedDoc, "-o", out}},
		{name: "compare", args: []string{seedDoc, "../../report/testdata/seed-003.json"}, stdout: "A = seed-002.json"},
		{name: "no file", args: nil, code: 2, stderr: "give one result file"},
		{name: "three files: a leaderboard", args: []string{seedDoc, "../../report/testdata/seed-000.json", "../../report/testdata/seed-003.json"}, stdout: "Leaderboard of 3 runs"},
		{name: "the same file thrice: told apart", args: []string{seedDoc, seedDoc, seedDoc}, stdout: "seed-002.json (3)"},
		{name: "a directory: a leaderboard", args: []string{runs}, stdout: "notes.json: not read as a run"},
		{name: "two files on a board", args: []string{"--board", seedDoc, "../../report/testdata/seed-003.json"}, stdout: "Pareto frontier at context 0"},
		{name: "sort", args: []string{"--sort", "ttft", seedDoc, "../../report/testdata/seed-000.json", "../../report/testdata/seed-003.json"}, stdout: "1  seed-000.json"},
		{name: "unknown sort", args: []string{"--sort", "speed", seedDoc, seedDoc, seedDoc}, code: 2, stderr: `--sort "speed" is no leaderboard column`},
		{name: "sort within an SLO without one", args: []string{"--sort", "slo-decode", seedDoc, seedDoc, seedDoc}, code: 2, stderr: "give --slo too"},
		{name: "bad slo", args: []string{"--slo", "ttft=fast", seedDoc, seedDoc, seedDoc}, code: 2, stderr: "--slo"},
		{name: "an empty directory", args: []string{t.TempDir()}, code: 2, stderr: "holds no .json file"},
		{name: "missing file", args: []string{filepath.Join(dir, "nope.json")}, code: 2, stderr: "nope.json does not exist"},
		{name: "invalid file", args: []string{bad}, code: 2, stderr: "not a tokentap result document"},
		{name: "unknown format", args: []string{"--format", "pdf", seedDoc}, code: 2, stderr: `unknown report format "pdf"`},
		{name: "bad flag", args: []string{"--bogus", seedDoc}, code: 2, stderr: "unknown flag --bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var so, se bytes.Buffer
			code := run(append([]string{"report"}, tt.args...), &so, &se)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, se.String())
			}
			if !strings.Contains(so.String(), tt.stdout) {
				t.Errorf("stdout lacks %q:\n%.400s", tt.stdout, so.String())
			}
			if tt.stderr != "" && !strings.Contains(se.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", se.String(), tt.stderr)
			}
			if tt.code != 0 && so.Len() > 0 {
				t.Errorf("stdout should stay empty on error, got %.200q", so.String())
			}
		})
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Errorf("-o run.html: %v, starts %.40q", err, b)
	}
}

// TestReportCapture: tokentap report takes a proxy capture (it failed with
// "cannot unmarshal string into … result.Model") and renders its traffic.
func TestReportCapture(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "capture.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := record.NewWriter(f)
	for i := range 3 {
		r := record.Record{ID: fmt.Sprint(i), Model: "demo", Stream: true, Sent: time.Duration(i) * time.Second, Outcome: record.OK, PromptTokens: 9}
		for j := range 8 {
			r.AddEvent(r.Sent+30*time.Millisecond+time.Duration(j)*5*time.Millisecond, 1)
		}
		r.End = r.Sent + 70*time.Millisecond
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	f.Close()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{path}, "TTFT"},
		{[]string{path, "--format", "md"}, "## Requests by model and outcome"},
		// Which requests its end to end covers, beside the proxy's /stats.
		{[]string{path, "--format", "md"}, "of the requests that completed OK only (the proxy's /stats and /metrics time every request that ended"},
		{[]string{path, "--format", "csv", "--percentiles", "50,99.9"}, "ttft_p99.9_ms"},
		{[]string{"--format", "json", path}, `"output_tokens": 24`},
	} {
		var so, se bytes.Buffer
		if code := run(append([]string{"report"}, tt.args...), &so, &se); code != 0 || !strings.Contains(so.String(), tt.want) {
			t.Errorf("report %v: exit %d, stderr %q; stdout lacks %q:\n%.600s", tt.args, code, se.String(), tt.want, so.String())
		}
	}
	// A capture whose writer was killed mid-line: the torn line is skipped
	// and said so (the whole capture was refused).
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "torn.jsonl")
	if err := os.WriteFile(torn, append(whole, `{"v":1,"id":"3","mod`...), 0o644); err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	if code := run([]string{"report", torn, "--format", "json"}, &so, &se); code != 0 || !strings.Contains(so.String(), `"output_tokens": 24`) || !strings.Contains(se.String(), "skipped 1 torn last line") {
		t.Errorf("torn capture: exit %d, stderr %q", code, se.String())
	}
	// Whichever of the two is the capture is the one named.
	for _, args := range [][]string{{path, seedDoc}, {seedDoc, path}} {
		var so, se bytes.Buffer
		if code := run(append([]string{"report"}, args...), &so, &se); code != 2 || !strings.Contains(se.String(), path+" is a proxy capture") {
			t.Errorf("comparing %v: exit %d, %q", args, code, se.String())
		}
	}
}

// TestReportOutput: report -o keeps the README's promise that a file is
// never written over without --overwrite, never writes over its own input
// (report y.json -o y.json destroyed the result), writes through a link
// and takes - as stdout.
func TestReportOutput(t *testing.T) {
	dir := t.TempDir()
	seed, err := os.ReadFile(seedDoc)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "y.json")
	existing := filepath.Join(dir, "existing.md")
	target := filepath.Join(dir, "target.md")
	link := filepath.Join(dir, "link.md")
	for p, b := range map[string][]byte{in: seed, existing: []byte("KEEP"), target: []byte("KEEP")} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("target.md", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{"its own input", []string{in, "--format", "md", "-o", in}, 2, "is the input", ""},
		{"its own input, --overwrite", []string{in, "--format", "md", "-o", in, "--overwrite"}, 2, "is the input", ""},
		{"one of two compared", []string{seedDoc, in, "-o", in, "--overwrite", "--format", "md"}, 2, "is the input", ""},
		{"an existing file", []string{in, "-o", existing}, 2, "give --overwrite", ""},
		{"a link to an existing file", []string{in, "-o", link}, 2, "give --overwrite", ""},
		{"dash is stdout", []string{in, "--format", "md", "-o", "-"}, 0, "", "# Agents-A1-4B-FP8"},
		{"a link, --overwrite", []string{in, "--format", "md", "-o", link, "--overwrite"}, 0, "", ""},
	} {
		var so, se bytes.Buffer
		code := run(append([]string{"report"}, tc.args...), &so, &se)
		if code != tc.code || !strings.Contains(se.String(), tc.stderr) || !strings.Contains(so.String(), tc.stdout) {
			t.Errorf("%s: exit %d, stderr %q, stdout %.60q; want %d", tc.name, code, se.String(), so.String(), tc.code)
		}
	}
	if b, _ := os.ReadFile(in); !bytes.Equal(b, seed) {
		t.Error("report wrote over its input")
	}
	if b, _ := os.ReadFile(existing); string(b) != "KEEP" {
		t.Error("report -o wrote over an existing file without --overwrite")
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Error("-o - wrote a file named -")
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Error("report -o LINK replaced the link")
	}
	if b, _ := os.ReadFile(target); !bytes.HasPrefix(b, []byte("# Agents")) {
		t.Errorf("the link's target holds %.40q", b)
	}
}
