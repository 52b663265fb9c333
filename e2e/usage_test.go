//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/test/schematest"
)

// waitFor polls until s() contains want, or fails after d.
func waitFor(t *testing.T, what string, s func() string, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(s(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never said %q:\n%s", what, want, s())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startStream opens a long streaming request through url and returns once
// its first bytes arrived; the stream stays open.
func startStream(t *testing.T, url, model string) {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":8000}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
}

// TestProxyStartAndStopSaySo: the proxy checks the upstream as it starts
// (and serves anyway when it does not answer, saying so), lists the
// engine's models for its labels, and on Ctrl-C with a stream open says
// why it waits; a second Ctrl-C cuts at once.
func TestProxyStartAndStopSaySo(t *testing.T) {
	// Nothing listens upstream: the proxy starts, and says so.
	dead := freeAddr(t)
	var errb lockedBuffer
	cmd := exec.Command(bin(t), "proxy", "--upstream", dead, "--listen", "127.0.0.1:0", "--admin", "")
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "proxy", errb.String, "does not answer", 10*time.Second)
	waitFor(t, "proxy", errb.String, "serving anyway", time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	fakeURL, _ := startFake(t)
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	resp, err := http.Get(fakeURL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	model := models.Data[0].ID

	cmd, url, errs := startProxyCmd(t, fakeURL)
	waitFor(t, "proxy", errs.String, "the upstream serves "+model, 10*time.Second)
	startStream(t, url, model)
	_ = cmd.Process.Signal(syscall.SIGINT)
	waitFor(t, "proxy", errs.String, "waiting up to 25s (--shutdown-timeout) for 1 open requests", 2*time.Second)
	secondCtrlC(t, cmd, errs, 3*time.Second)
	if !strings.Contains(errs.String(), "stopped at once") || strings.Contains(errs.String(), "context canceled") {
		t.Errorf("a stop asked for twice says:\n%s", errs.String())
	}
}

// secondCtrlC sends the proxy a second Ctrl-C and wants it to exit 130
// within d.
func secondCtrlC(t *testing.T, cmd *exec.Cmd, errs *lockedBuffer, d time.Duration) {
	t.Helper()
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("stopped %v after the second Ctrl-C", time.Since(start).Round(time.Millisecond))
		if err := interrupted(err); err != nil {
			t.Errorf("a stop asked for twice: %v\n%s", err, errs.String())
		}
	case <-time.After(d):
		t.Fatalf("a second Ctrl-C did not stop the proxy in %v\n%s", d, errs.String())
	}
}

// startProxyCmd starts the proxy binary in front of upstream, with args
// besides, and returns it, the URL it printed, and its stderr.
func startProxyCmd(t *testing.T, upstream string, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	errb := &lockedBuffer{}
	cmd := exec.Command(bin(t), append([]string{"proxy", "--upstream", strings.TrimPrefix(upstream, "http://"), "--listen", "127.0.0.1:0", "--admin", ""}, args...)...)
	cmd.Stderr = errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the proxy printed no URL: %v\n%s", err, errb.String())
	}
	return cmd, strings.TrimSpace(line), errb
}

// TestProxySecondCtrlCWithABodyArriving: a second Ctrl-C cuts the
// shutdown at once even when no request was open at the first (a body
// still arriving is not counted as one): it used to wait out
// --shutdown-timeout.
func TestProxySecondCtrlCWithABodyArriving(t *testing.T) {
	fakeURL, _ := startFake(t)
	cmd, url, errb := startProxyCmd(t, fakeURL, "--shutdown-timeout", "20s")
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	time.Sleep(200 * time.Millisecond) // the head is in, the body trickles
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond)
	secondCtrlC(t, cmd, errb, 5*time.Second) // of a 20 s --shutdown-timeout
}

// TestFirstSightCLI: the user-visible promises of the issue, through the
// built binary: a target without a scheme works, mistakes stop the run
// before load, failed cells exit 3 unless --allow-failed, help is on
// stdout, and the result matches its JSON Schema.
func TestFirstSightCLI(t *testing.T) {
	fakeURL, _ := startFake(t, "--fault", "cut=3")
	dir := t.TempDir()
	quick := []string{"--contexts", "0", "--concurrency", "1", "--prefill", "none", "--max-output", "16", "--window", "1s", "--quiet", "--format", "none"}
	runT := func(args ...string) (int, string, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin(t), args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), time.Since(start)
	}
	hostPort := strings.TrimPrefix(fakeURL, "http://")
	for _, tt := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"failed cells", append([]string{"matrix", "--target", hostPort, "--out", filepath.Join(dir, "f.json")}, quick...), 3, "--allow-failed"},
		{"failed cells allowed", append([]string{"matrix", "--target", hostPort, "--allow-failed", "--out", filepath.Join(dir, "a.json")}, quick...), 0, ""},
		{"unwritable out", append([]string{"matrix", "--target", hostPort, "--out", "/nonexistent-tokentap/x.json"}, quick...), 2, "does not exist"},
		{"unknown format", append([]string{"matrix", "--target", hostPort, "--format", "pdf"}, quick[:len(quick)-2]...), 2, "unknown report format"},
	} {
		code, out, took := runT(tt.args...)
		if code != tt.code || !strings.Contains(out, tt.says) {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", tt.name, code, tt.code, tt.says, out)
		}
		if tt.code == 2 && took > 5*time.Second {
			t.Errorf("%s: refused only after %v", tt.name, took)
		}
	}
	code, out, _ := runT("matrix", "--help")
	if code != 0 || !strings.Contains(out, "-window") || !strings.Contains(out, "Exit codes:") {
		t.Errorf("matrix --help: exit %d\n%s", code, out)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := schematest.Validate(doc); err != nil {
		t.Errorf("the binary's result does not match schema.json: %v", err)
	}
}
