//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tokentap/tokentap/record"
)

// pxStart runs `tokentap args...`, reads the URL it prints first on stdout
// and stops it with SIGTERM when the test ends (or when stop is called).
func pxStart(t *testing.T, args ...string) (url string, stop func() error) {
	t.Helper()
	url, stop = pxRun(t, os.Stderr, args...)
	return url, stop
}

// pxStartProxy runs `tokentap proxy args...` with its admin endpoints on a
// port the kernel picks, and returns the admin address it printed too.
func pxStartProxy(t *testing.T, args ...string) (url, admin string, stop func() error) {
	t.Helper()
	var errb lockedBuffer
	url, stop = pxRun(t, io.MultiWriter(os.Stderr, &errb), append([]string{"proxy", "--admin", "127.0.0.1:0"}, args...)...)
	return url, adminAddr(t, &errb), stop
}

func pxRun(t *testing.T, stderr io.Writer, args ...string) (url string, stop func() error) {
	t.Helper()
	cmd := exec.Command(bin(t), args...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start tokentap %s: %v", args[0], err)
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		if args[0] == "proxy" {
			return interrupted(err)
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("tokentap %s printed no URL: %v", args[0], err)
	}
	return strings.TrimSpace(line), stop
}

var (
	pxIDRe      = regexp.MustCompile(`"id":"[^"]*"`)
	pxCreatedRe = regexp.MustCompile(`"created":\d+`)
)

func pxNormalize(s string) string {
	return pxCreatedRe.ReplaceAllString(pxIDRe.ReplaceAllString(s, `"id":"X"`), `"created":0`)
}

// sdkChunks streams a chat completion with the official OpenAI Go SDK and
// returns the raw JSON of every chunk it received.
func sdkChunks(t *testing.T, baseURL string, maxTokens int64) []string {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL(baseURL+"/v1/"), option.WithAPIKey("sk-e2e-secret-key"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     "fake-4b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say something through the proxy.")},
		MaxTokens: openai.Int(maxTokens),
	})
	var chunks []string
	for s.Next() {
		chunks = append(chunks, s.Current().RawJSON())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("SDK stream from %s: %v", baseURL, err)
	}
	return chunks
}

// TestProxyWithOpenAISDK streams through the built proxy with the official
// OpenAI Go SDK and checks that it receives exactly what the fake sends
// directly, that the usage chunk the proxy asked for stays hidden, and that
// the measurement shows on the admin endpoints and in the capture (without
// the API key or the prompt).
func TestProxyWithOpenAISDK(t *testing.T) {
	fake, _ := pxStart(t, "fake-engine", "--listen", "127.0.0.1:0")
	capture := filepath.Join(t.TempDir(), "capture.jsonl")
	proxyURL, admin, stopProxy := pxStartProxy(t, "--upstream", fake, "--listen", "127.0.0.1:0", "--capture", capture)

	direct := sdkChunks(t, fake, 25)
	via := sdkChunks(t, proxyURL, 25)
	if len(direct) == 0 || len(via) != len(direct) {
		t.Fatalf("SDK got %d chunks through the proxy, %d directly", len(via), len(direct))
	}
	for i := range direct {
		if pxNormalize(via[i]) != pxNormalize(direct[i]) {
			t.Fatalf("chunk %d differs:\ndirect: %s\nproxy:  %s", i, direct[i], via[i])
		}
		if strings.Contains(via[i], `"usage":{`) {
			t.Fatalf("the SDK received a usage chunk it did not ask for: %s", via[i])
		}
	}

	// Records reach the metrics just after the client's stream ended: poll.
	var m []byte
	wants := []string{
		`tokentap_requests_total{blame="none",model="fake-4b",outcome="ok"} 1`,
		`tokentap_time_to_first_token_seconds_count{model="fake-4b"} 1`,
		`tokentap_output_tokens_sum{model="fake-4b"} 25`,
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := ""
		for _, want := range wants {
			if !strings.Contains(string(m), want) {
				missing = want
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q:\n%s", missing, m)
		}
	}
	resp, err := http.Get("http://" + admin + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Models map[string]struct {
			Requests int64 `json:"requests"`
			TTFT     *struct {
				P50 float64 `json:"p50"`
			} `json:"ttft_ms"`
		} `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Models["fake-4b"].Requests != 1 || st.Models["fake-4b"].TTFT == nil {
		t.Fatalf("/stats: %+v, %v", st, err)
	}
	resp.Body.Close()

	if err := stopProxy(); err != nil {
		t.Fatalf("proxy did not stop cleanly on SIGTERM: %v", err)
	}
	raw, err := os.ReadFile(capture)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "sk-e2e-secret-key") || strings.Contains(string(raw), "through the proxy") {
		t.Fatal("the capture holds the API key or the prompt")
	}
	recs, err := record.ReadAll(strings.NewReader(string(raw)))
	if err != nil || len(recs) != 1 {
		t.Fatalf("capture: %d records, %v", len(recs), err)
	}
	r := recs[0]
	if r.Outcome != record.OK || r.CompletionTokens != 25 || r.CompletionSource != record.SourceUsage || r.Events() != 25 || r.PromptTokens == 0 {
		t.Fatalf("captured record: %+v", r)
	}
}

// TestProxyFailures runs the failure paths a user meets: engine down (502
// with an OpenAI error body the SDK understands), engine dying mid-stream,
// and a client leaving during a long prefill.
func TestProxyFailures(t *testing.T) {
	down := freeAddr(t) // nothing listens there
	proxyURL, _ := pxStart(t, "proxy", "--upstream", "http://"+down, "--listen", "127.0.0.1:0", "--admin", "")
	c := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "fake-4b",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if err == nil || !asOpenAIError(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Message == "" {
		t.Fatalf("engine down: %v, want a 502 OpenAI error with a message", err)
	}

	fake, _ := pxStart(t, "fake-engine", "--listen", "127.0.0.1:0", "--prefill-tok-per-sec", "100", "--prefill-slowdown", "0", "--ledger")
	capture := filepath.Join(t.TempDir(), "capture.jsonl")
	proxyURL, stop := pxStart(t, "proxy", "--upstream", fake, "--listen", "127.0.0.1:0", "--admin", "", "--capture", capture)

	// Engine dies after 5 tokens: the client gets them, then a broken stream.
	req, _ := http.NewRequest("POST", proxyURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-4b","messages":[{"role":"user","content":"hi"}],"max_tokens":50,"stream":true}`))
	req.Header.Set("X-Fake-Fault", "cut=5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr == nil || strings.Count(string(body), `"content":"`) < 5 || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("cut stream: read error %v, body:\n%s", rerr, body)
	}

	// Client leaves during a 40 s prefill: the engine's request ends at
	// once (about a millisecond on an idle machine), not 40 s on; the
	// bound between is far from both, so a busy machine cannot cross it.
	long := strings.Repeat("word ", 4000)
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	b := `{"model":"fake-4b","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":10,"stream":true}`
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+itoa(len(b))+"\r\n\r\n"+b)
	time.Sleep(300 * time.Millisecond)
	left := time.Now()
	conn.Close()
	outcome, ended := ledgerEnd(t, fake, 3000, 1<<30)
	if outcome != "cancelled" {
		t.Fatalf("ledger outcome %q, want cancelled", outcome)
	}
	if d := ended.Sub(left); d > 5*time.Second {
		t.Fatalf("the engine's request ended %v after the client left, want at once", d)
	}
	if err := stop(); err != nil {
		t.Fatalf("proxy exit: %v", err)
	}
	raw, _ := os.ReadFile(capture)
	recs, err := record.ReadAll(strings.NewReader(string(raw)))
	if err != nil || len(recs) != 2 {
		t.Fatalf("capture: %d records, %v", len(recs), err)
	}
	if recs[0].Outcome != record.Broken || recs[0].Blame != record.BlameEngine {
		t.Errorf("cut stream recorded as %q/%q", recs[0].Outcome, recs[0].Blame)
	}
	if recs[1].Outcome != record.Cancelled || recs[1].Blame != record.BlameClient {
		t.Errorf("client gone recorded as %q/%q", recs[1].Outcome, recs[1].Blame)
	}
}

func asOpenAIError(err error, target **openai.Error) bool {
	e, ok := err.(*openai.Error)
	if ok {
		*target = e
	}
	return ok
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
