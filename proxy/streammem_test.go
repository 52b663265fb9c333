package proxy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkOpenStreamParts is where BenchmarkPassThrough's resident memory
// per open stream goes (make bench): the proxy runs in this process, alone
// (the fake engine is the built binary, a child process; the clients write
// their request and never read, so they hold no goroutine here), and 1,024
// slow streams are opened through it. It reports per open stream the Go
// heap in use, the goroutine stacks in use and the goroutines, and with
// TOKENTAP_HEAP_PROFILE=FILE writes the heap profile of the open streams
// (allocations sampled at every byte; read it against FILE.idle with go
// tool pprof -base FILE.idle FILE) to say which allocation holds what.
//
// go test -run '^$' -bench OpenStreamParts -benchtime 1x ./proxy/
func BenchmarkOpenStreamParts(b *testing.B) {
	const n = 1024
	profile := os.Getenv("TOKENTAP_HEAP_PROFILE")
	if profile != "" {
		rate := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		b.Cleanup(func() { runtime.MemProfileRate = rate })
	}
	bin := buildTokentap(b)
	fake := exec.Command(bin, "fake-engine", "--listen", "127.0.0.1:0", "--model", "fake-4b", "--tbt-base", "100ms",
		"--max-running", "4096", "--kv-capacity", "16777216", "--first-event-delay", "1ms", "--prefill-tok-per-sec", "1e9")
	out, err := fake.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := fake.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fake.Process.Signal(syscall.SIGTERM); _ = fake.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the fake engine printed no URL: %v", err)
	}
	h := startProxy(b, strings.TrimSpace(line), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	body := `{"model":"fake-4b","messages":[{"role":"user","content":"bench"}],"max_tokens":2000,"ignore_eos":true,"stream":true}`
	open := func(k int) []net.Conn {
		var cs []net.Conn
		for range k {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			cs = append(cs, c)
		}
		return cs
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
	}
	measure := func(file string) (runtime.MemStats, int) {
		// Two collections: what pools (sync.Pool) keep unused goes at the
		// second, as it would in a while of a running proxy.
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if file != "" {
			if err := writeHeapProfile(file); err != nil {
				b.Fatal(err)
			}
		}
		return m, runtime.NumGoroutine() - int(idleWorkers.Load()) // idle workers come and go
	}
	for range b.N {
		closeAll(open(16)) // every pool and loop started
		time.Sleep(time.Second)
		m0, g0 := measure(ifSet(profile, profile+".idle"))
		cs := open(n)
		// The streams are open: heads out, events flowing every 100 ms.
		time.Sleep(1500 * time.Millisecond)
		m1, g1 := measure(profile)
		closeAll(cs)
		b.ReportMetric(float64(m1.HeapInuse-m0.HeapInuse)/1024/n, "heap_KiB/stream")
		b.ReportMetric(float64(m1.StackInuse-m0.StackInuse)/1024/n, "stack_KiB/stream")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/stream")
		time.Sleep(500 * time.Millisecond)
	}
	b.ReportMetric(0, "ns/op")
}

func ifSet(s, v string) string {
	if s == "" {
		return ""
	}
	return v
}

func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
