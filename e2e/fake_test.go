//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startFake runs `tokentap fake-engine --listen 127.0.0.1:0 args...` and
// returns its base URL (the first line it prints) and the process. The
// process is interrupted when the test ends.
func startFake(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin(t), append([]string{"fake-engine", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fake-engine: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("fake-engine printed no URL: %v", err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("fake-engine printed %q, want its base URL", url)
	}
	return url, cmd
}

func httpDo(t *testing.T, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// TestFakeEngineServesLikeVLLM does what a new user does: start the fake,
// list models, stream one chat request, read metrics and tokenize.
func TestFakeEngineServesLikeVLLM(t *testing.T) {
	url, _ := startFake(t, "--tbt-base", "2ms", "--ledger", "--model", "demo", "--max-model-len", "8192")
	code, models := httpDo(t, "GET", url+"/v1/models", "")
	var ml struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(models), &ml); err != nil || code != 200 || len(ml.Data) != 1 || ml.Data[0].ID != "demo" || ml.Data[0].MaxModelLen != 8192 {
		t.Fatalf("/v1/models: %d %s", code, models)
	}
	body := `{"model":"demo","messages":[{"role":"user","content":"hello there"}],"max_tokens":20,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	code, stream := httpDo(t, "POST", url+"/v1/chat/completions", body)
	if code != 200 || !strings.HasSuffix(stream, "data: [DONE]\n\n") {
		t.Fatalf("stream: %d, ends %q", code, stream[max(0, len(stream)-80):])
	}
	if n := strings.Count(stream, `"content":" `); n != 20 {
		t.Fatalf("%d content events, want 20", n)
	}
	if !strings.Contains(stream, `"completion_tokens":20`) || !strings.Contains(stream, `"choices":[]`) {
		t.Fatal("stream has no usage chunk saying 20 completion tokens")
	}
	if _, m := httpDo(t, "GET", url+"/metrics", ""); !strings.Contains(m, "vllm:cache_config_info{") || !strings.Contains(m, "vllm:num_requests_waiting") {
		t.Fatalf("/metrics lacks vLLM gauges:\n%s", m)
	}
	if code, tok := httpDo(t, "POST", url+"/tokenize", `{"model":"demo","prompt":"a b c"}`); code != 200 || !strings.Contains(tok, `"count":3`) {
		t.Fatalf("/tokenize: %d %s", code, tok)
	}
	// --ledger serves the ground truth: 20 events of one token each.
	_, led := httpDo(t, "GET", url+"/fake/ledger", "")
	var entries []struct {
		API    string `json:"api"`
		Events []struct {
			AtNs   int64 `json:"at_ns"`
			Tokens int   `json:"tokens"`
		} `json:"events"`
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(led), &entries); err != nil || len(entries) != 1 || len(entries[0].Events) != 20 || entries[0].Outcome != "ok" {
		t.Fatalf("/fake/ledger: %v %s", err, led)
	}
}

func TestFakeEngineFaultFlag(t *testing.T) {
	url, _ := startFake(t, "--fault", "status=503,min-prompt=50", "--fault", "header-delay=10ms")
	long := strings.Repeat("word ", 60)
	code, body := httpDo(t, "POST", url+"/v1/completions", `{"model":"fake-4b","prompt":"`+long+`","max_tokens":2}`)
	if code != 503 || !strings.Contains(body, `"ServiceUnavailableError"`) {
		t.Fatalf("long prompt: %d %s, want the engine-wide 503", code, body)
	}
	if code, body := httpDo(t, "POST", url+"/v1/completions", `{"model":"fake-4b","prompt":"short","max_tokens":2}`); code != 200 {
		t.Fatalf("short prompt: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-4b","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}`))
	req.Header.Set("X-Fake-Fault", "cut=3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || strings.Contains(string(b), "[DONE]") || strings.Count(string(b), `"content":" `) != 3 {
		t.Fatalf("cut=3: read error %v (want one), body %q", err, b)
	}
	if code, _ := httpDo(t, "GET", url+"/fake/ledger", ""); code != 404 {
		t.Fatalf("/fake/ledger answered %d without --ledger", code)
	}
}

func TestFakeEngineFlagsAndSignals(t *testing.T) {
	out, err := exec.Command(bin(t), "fake-engine", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, f := range []string{"--listen", "--model", "--max-model-len", "--prefill-tok-per-sec", "--prefill-slowdown",
		"--first-event-delay", "--tbt-base", "--tbt-per-running", "--tbt-per-ktokens", "--max-running", "--kv-capacity",
		"--block-size", "--max-waiting", "--tokens-per-event", "--stop-after", "--finish-chunk", "--fault", "--ledger",
		"TOKENTAP_FAKE_TBT_BASE"} {
		if !strings.Contains(string(out), strings.TrimPrefix(f, "-")) {
			t.Errorf("--help does not explain %s", f)
		}
	}
	for _, args := range [][]string{{"--fault", "explode=1"}, {"--kv-capacity", "1000"}, {"--no-such-flag"}} {
		cmd := exec.Command(bin(t), append([]string{"fake-engine", "--listen", "127.0.0.1:0"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err == nil || !asExit(err, &ee) || ee.ExitCode() != 2 || len(out) == 0 {
			t.Errorf("fake-engine %v: err %v, output %q; want exit 2 with a message", args, err, out)
		}
	}
	// Ctrl-C stops it cleanly.
	_, cmd := startFake(t)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fake-engine did not stop within 10s of SIGINT")
	}
}

// interrupted passes a proxy's exit on SIGTERM or Ctrl-C: 130, as the
// README's table says ("interrupted; what was finished is kept"); any
// other error is returned.
func interrupted(err error) error {
	var ee *exec.ExitError
	if asExit(err, &ee) && ee.ExitCode() == 130 {
		return nil
	}
	if err == nil {
		return errors.New("exit status 0 after a signal, want 130 (interrupted)")
	}
	return err
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}
