//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportBinary runs `tokentap report` on the seed documents as a user
// does: every format, a file output, a comparison, and the error cases.
func TestReportBinary(t *testing.T) {
	seed := func(id string) string {
		p, err := filepath.Abs(filepath.Join("..", "report", "testdata", "seed-"+id+".json"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	runIt := func(args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(bin(t), append([]string{"report"}, args...)...)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("running tokentap: %v", err)
		}
		return so.String(), se.String(), code
	}

	for _, tt := range []struct{ format, want string }{
		{"text", "Sustained decode · total tok/s"},
		{"md", "| Sustained decode | 248K | 1 | Over capacity | — | — | — | — | 0.7 | 0 | 0 | 30.0 s |"},
		{"csv", "decode,131072,2,requests_queued,29.5,18.2,6119,warm_prefix,55.2,1.7,0,884,30"},
		{"json", `"prefill_mode": "Measured during decode warm-up"`},
		{"html", `<span class="q">Requests queued</span>`},
	} {
		out, errOut, code := runIt(seed("002"), "--format", tt.format)
		if code != 0 || !strings.Contains(out, tt.want) {
			t.Errorf("--format %s: exit %d, stderr %q, output lacks %q", tt.format, code, errOut, tt.want)
		}
	}

	html := filepath.Join(t.TempDir(), "seed.html")
	if _, errOut, code := runIt(seed("000"), "-o", html); code != 0 {
		t.Fatalf("-o: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), `class="failed"`) {
		t.Errorf("HTML file from -o: %v", err)
	}

	out, _, code := runIt(seed("002"), seed("003"), "--format", "md")
	if code != 0 || !strings.Contains(out, "**⚠ Valid → Requests queued**") || !strings.Contains(out, "×0.81") {
		t.Errorf("comparison: exit %d\n%.600s", code, out)
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{filepath.Join(t.TempDir(), "missing.json")}, 2, "does not exist"}, // a wrong input file is a usage error
		{[]string{seed("000"), "--format", "xlsx"}, 2, "unknown report format"},
		{nil, 2, "give one result file"},
	} {
		out, errOut, code := runIt(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) || out != "" {
			t.Errorf("report %v: exit %d (want %d), stderr %q (want %q), stdout %q", tt.args, code, tt.code, errOut, tt.want, out)
		}
	}
}
