//go:build live

package live

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requestGuard bounds one request to a real engine: a guard against a
// hang (go test's -timeout would name no request), not a bound on speed.
// A CPU engine on a loaded machine decodes 1,900 tokens in seconds or in
// minutes (vLLM's took over two with the suite's other stages beside it).
const requestGuard = 15 * time.Minute

// server is an engine process started for a test, on 127.0.0.1.
type server struct {
	name string
	cmd  *exec.Cmd
	log  string // its stdout and stderr
	url  string
	done chan error
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs bin args with env added, logging to a file, and stops it with
// SIGTERM (then SIGKILL) when the test ends.
func start(t *testing.T, name, bin string, env []string, args ...string) *server {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	s := &server{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); lf.Close() }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *server) stop(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	if t.Failed() {
		t.Logf("%s log (tail):\n%s", s.name, s.tail(40))
		s.keepLog(t)
	}
}

// keepLog copies a failed test's engine log, which t.TempDir would remove,
// into $TOKENTAP_LIVE_LOGS (make live sets it) for a look at all of it.
func (s *server) keepLog(t *testing.T) {
	dir := os.Getenv("TOKENTAP_LIVE_LOGS")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(s.log)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	dst := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-"+s.name+".log")
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		t.Logf("keeping the %s log: %v", s.name, err)
		return
	}
	t.Logf("%s log kept in %s", s.name, dst)
}

// tail is the last n lines of the server's log.
func (s *server) tail(n int) string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitOK polls url until it answers 200 or the process exits. On a busy
// machine an engine's start (loading, compiling) takes what the machine
// gives it, so the wait is not a fixed time: it fails when the engine's
// log has not grown for quiet (it hangs, or waits for something that will
// not come), or after 6 × quiet in all. vLLM 0.32 on 2 cores with two busy
// loops and a test suite beside it compiled for over 5 minutes, logging
// every 60 s meanwhile.
func (s *server) waitOK(t *testing.T, url string, quiet time.Duration) {
	t.Helper()
	began := time.Now()
	heard, logged := began, int64(-1)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("%s exited before it answered %s: %v\n%s", s.name, url, err, s.tail(40))
		default:
		}
		now := time.Now()
		if fi, err := os.Stat(s.log); err == nil && fi.Size() != logged {
			heard, logged = now, fi.Size()
		}
		switch {
		case now.Sub(heard) > quiet:
			t.Fatalf("%s did not answer %s, and wrote nothing to its log for %v (%v since it started)\n%s",
				s.name, url, quiet, now.Sub(began).Round(time.Second), s.tail(40))
		case now.Sub(began) > 6*quiet:
			t.Fatalf("%s did not answer %s within %v, though still logging\n%s", s.name, url, 6*quiet, s.tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) String() string { return fmt.Sprintf("%s at %s", s.name, s.url) }
