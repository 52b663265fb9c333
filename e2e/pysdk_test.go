//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/record"
)

// TestOpenAIPythonSDK drives the proxy with the most used client of these
// engines, the OpenAI Python SDK (testdata/openai_client.py): streaming and
// non-streaming chat and completions, a stream without usage asked (the
// proxy asks the engine for it and hides it again), and a stream the
// client closes after three chunks. What the SDK parsed is the same
// through the proxy as direct, and the proxy keeps a record of each, the
// closed stream's as the client's cancel. make e2e installs the SDK
// (testdata/openai-requirements.txt) and sets TOKENTAP_OPENAI_PYTHON.
func TestOpenAIPythonSDK(t *testing.T) {
	py := os.Getenv("TOKENTAP_OPENAI_PYTHON")
	if py == "" {
		t.Skip("TOKENTAP_OPENAI_PYTHON is not set: make e2e installs the OpenAI Python SDK into a virtual environment and sets it to its python")
	}
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("testdata", "openai_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	engine, _ := startFake(t, "--model", "sdk-model", "--first-event-delay", "5ms", "--tbt-base", "2ms")
	p := startProxyProc(t, engine)
	run := func(base string) []string {
		t.Helper()
		cmd := exec.Command(py, script, base, "sdk-model")
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("openai_client.py %s: %v\n%s%s", base, err, out, stderr)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	direct := run(engine)
	proxied := run(p.url)
	if len(direct) != 5 || len(proxied) != 5 {
		t.Fatalf("want 5 cases each; direct:\n%s\nthrough the proxy:\n%s", strings.Join(direct, "\n"), strings.Join(proxied, "\n"))
	}
	for i := range direct {
		t.Logf("%s", proxied[i])
		if direct[i] != proxied[i] {
			t.Errorf("case %d differs:\ndirect:  %s\nproxied: %s", i, direct[i], proxied[i])
		}
	}
	if !strings.Contains(proxied[3], `"usage_chunks": 0`) {
		t.Errorf("usage reached a client that did not ask for it: %s", proxied[3])
	}
	recs := p.next(t, 5)
	for i, r := range recs[:4] {
		if r.Outcome != record.OK || r.Status != 200 || r.CompletionTokens == 0 {
			t.Errorf("record %d: %s %d, %d completion tokens (%s)", i, r.Outcome, r.Status, r.CompletionTokens, r.Error)
		}
	}
	if r := recs[4]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Errorf("the closed stream's record: %s/%s %q", r.Outcome, r.Blame, r.Error)
	}
}
