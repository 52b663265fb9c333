//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/result"
)

// llama3Config is Meta-Llama-3-8B's config.json, the fields that matter.
const llama3Config = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
 "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"torch_dtype":"bfloat16",
 "max_position_embeddings":131072,"tie_word_embeddings":false,"model_type":"llama"}`

func run(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case asExit(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("tokentap %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// TestBeyondMatrix: `matrix --slo --gpu-bandwidth --model-config` against
// the fake engine writes each cell's attainment, goodput, TTFT split and
// bandwidth limit into the result and the report; bad values of the new
// flags fail before any load, saying what is wrong.
func TestBeyondMatrix(t *testing.T) {
	dir := t.TempDir()
	fake, _ := startFake(t)
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(llama3Config), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run.json")
	stdout, stderr, code := run(t, 90*time.Second, "matrix", "--target", fake, "--prefill", "none", "--contexts", "0",
		"--concurrency", "1,2", "--max-output", "32", "--window", "2s", "--quiet", "--format", "md", "--out", out,
		"--slo", "ttft=5s,tbt=1s", "--gpu-bandwidth", "360GB/s", "--model-config", cfg)
	if code != 0 {
		t.Fatalf("matrix exited %d:\n%s", code, stderr)
	}
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.SLO == nil || res.SLO.Overall.Attainment == nil || *res.SLO.Overall.Attainment != 1 || res.Bandwidth == nil || len(res.Bandwidth.Missing) > 0 {
		t.Fatalf("run figures: SLO %+v, bandwidth %+v", res.SLO, res.Bandwidth)
	}
	for _, c := range res.Decode {
		if c.SLO == nil || c.SLO.GoodputReqPerSec <= 0 || c.TTFTSplit == nil || c.TTFTSplit.EngineTTFT == nil || c.DecodeLimit == nil {
			t.Errorf("cell × %d: SLO %+v split %+v limit %+v", c.Concurrency, c.SLO, c.TTFTSplit, c.DecodeLimit)
		}
	}
	for _, want := range []string{"## SLOs", "TTFT ≤ 5 s, time between tokens ≤ 1 s", "## Where TTFT goes", "vllm:time_to_first_token_seconds",
		"## Decode vs the GPU's bandwidth limit", "16.1 GB", "% of limit", sloColumnHead} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the Markdown report lacks %q", want)
		}
	}
	page := filepath.Join(dir, "run.html")
	if _, stderr, code := run(t, 30*time.Second, "report", out, "--format", "html", "-o", page); code != 0 {
		t.Fatalf("report: %d %s", code, stderr)
	}
	b, _ := os.ReadFile(page)
	for _, want := range []string{"SLO goodput", `aria-label="SLO attainment by concurrency"`, `aria-label="TTFT parts of`, `<span class="bw">`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the HTML page lacks %q", want)
		}
	}

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"--slo", "ttft=500"}, "give a unit"},
		{[]string{"--slo", "speed=fast"}, "unknown objective"},
		{[]string{"--gpu-bandwidth", "360"}, "360GB/s"},
		{[]string{"--layers", "32"}, "together"},
		{[]string{"--kv-dtype", "q3"}, "--kv-dtype"},
		{[]string{"--model-config", filepath.Join(dir, "missing.json")}, "--model-config"},
		{[]string{"--weight-bytes", "lots"}, "--weight-bytes"},
	} {
		args := append([]string{"matrix", "--target", fake, "--contexts", "0", "--concurrency", "1", "--quiet"}, bad.args...)
		_, stderr, code := run(t, 30*time.Second, args...)
		if code != 2 || !strings.Contains(stderr, bad.says) {
			t.Errorf("matrix %v: exit %d, stderr %q; want 2 saying %q", bad.args, code, stderr, bad.says)
		}
	}
}

// sloColumnHead is the All measurements column a run with SLOs adds.
const sloColumnHead = "Met every SLO"

// TestBeyondProxyAndReplay: `proxy --slo` counts good and judged requests
// live; `replay --slo` reports the share and goodput of the capture it
// replays.
func TestBeyondProxyAndReplay(t *testing.T) {
	dir := t.TempDir()
	fake, _ := startFake(t)
	capture := filepath.Join(dir, "capture.jsonl")
	url, admin, stop := pxStartProxy(t, "--upstream", fake, "--listen", "127.0.0.1:0",
		"--slo", "ttft=2s,e2e=10s", "--capture", capture)
	body := `{"model":"fake-4b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":12}`
	for range 3 {
		if code, _ := httpDo(t, "POST", url+"/v1/chat/completions", body, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("chat through the proxy: HTTP %d", code)
		}
	}
	// The proxy counts a request once its record is done, a moment after
	// the client saw its end, and a scrape may read one collector before
	// that and another after: wait until every count is in.
	wants := []string{`tokentap_slo_good_requests_total{model="fake-4b"} 3`, `tokentap_slo_judged_requests_total{model="fake-4b"} 3`,
		`tokentap_slo_undecided_requests_total{model="fake-4b"} 0`, `tokentap_slo_objective_seconds{slo="e2e"} 10`, `tokentap_requests_total{blame="none",model="fake-4b",outcome="ok"} 3`}
	var missing []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, metrics := httpDo(t, "GET", "http://"+admin+"/metrics", "")
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range missing {
		t.Errorf("/metrics lacks %q after 5 s", want)
	}
	_, stats := httpDo(t, "GET", "http://"+admin+"/stats", "")
	var st struct {
		Models map[string]struct {
			SLO *result.SLO `json:"slo"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(stats), &st); err != nil || st.Models["fake-4b"].SLO == nil || st.Models["fake-4b"].SLO.Good != 3 {
		t.Errorf("/stats: %v %s", err, stats)
	}
	if err := stop(); err != nil {
		t.Fatalf("proxy stop: %v", err)
	}

	stdout, stderr, code := run(t, 60*time.Second, "replay", "--target", fake, "--slo", "ttft=1ms", capture)
	if code != 0 {
		t.Fatalf("replay: %d %s", code, stderr)
	}
	for _, want := range []string{"TTFT ≤ 1 ms", "Met every SLO 0.0% of 3 requests judged", "Most missed   TTFT"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("replay summary lacks %q:\n%s", want, stdout)
		}
	}
}
