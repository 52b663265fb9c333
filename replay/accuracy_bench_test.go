package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/internal/test/benchcpu"
	"github.com/tokentap/tokentap/record"
)

// BenchmarkLoadGenAccuracy measures the load generator against the fake
// engine's ground truth: the fake runs as a child process (`tokentap
// fake-engine --ledger`) pinned to CPU 0 with taskset, this process (the load
// generator) is pinned to CPU 1, the fake answers every request with its
// first token 50 ms after it arrived and then one token every 10 ms, 256
// tokens a request, and N streams run closed loop for a few seconds. Then
// every record is matched with the fake's ledger entry by response id:
//
//	ttft_err_%   median over requests of (measured TTFT / true TTFT − 1),
//	             the true TTFT being the ledger's first token write minus the
//	             kernel's receive time of the request's last bytes at the
//	             fake's socket (ledger Arrived, SO_TIMESTAMPNS): the engine's
//	             TTFT as it happened at its door, intake delay included
//	ttft_err_vs_handler_% the same against the ledger's handler start
//	             (Received): off by the fake's own intake delay, intake_ms
//	intake_ms    median of Received − Arrived: how long the fake took to run
//	             its handler for a request already in its socket (high when
//	             its one core is saturated)
//	ttft_read_err_% median of (our first token's stamp − the fake's write of
//	             it) / true TTFT: the load generator's timing lag alone (its
//	             stamps are the kernel's receive times where the event loop
//	             reads, so this is no longer how late it reads)
//	tbt_err_%    (median measured gap / median gap the fake wrote − 1)
//	tput_err_%   (tokens counted in the middle of the run / tokens the fake
//	             wrote in the same interval − 1)
//	cpu_cores    CPU time of this process / wall time over the middle of
//	             the run, the interval tok/s and the errors are taken over
//	             (the load generator's own use; the fake is another process)
//	cpu_cores_all the same over the whole run, dialling the N connections
//	             and sending the first N requests at once included
//	reads/token  read system calls per token received
//	fake_late_ms median of how late the fake wrote events against its own
//	             schedule (when it cannot keep up, the ledger is still the
//	             truth the load generator is compared with)
//	send_delay_ms median from our Sent to the fake's handler starting (the
//	             kernel, and the fake accepting and parsing a burst of N
//	             requests)
//	read_delay_ms median from the fake's write returning to our stamp of the
//	             same event (the load generator's timing lag; can be slightly
//	             negative: the kernel stamps a loopback segment inside the
//	             fake's write, and the reader may wake before the writer)
//
// The binary comes from TOKENTAP_BIN, else bin/tokentap (make bench builds
// it), else it is built into a temporary directory.
func BenchmarkLoadGenAccuracy(b *testing.B) {
	for _, n := range []int{1, 64, 256, 512, 1024} {
		b.Run("streams="+strconv.Itoa(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				accuracyRun(b, n, 6*time.Second)
			}
		})
	}
}

var (
	benchBinOnce sync.Once
	benchBin     string
	benchBinErr  error
)

func tokentapBin(b *testing.B) string {
	benchBinOnce.Do(func() {
		if p := os.Getenv("TOKENTAP_BIN"); p != "" {
			benchBin = p
			return
		}
		if p, err := filepath.Abs("../bin/tokentap"); err == nil {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				benchBin = p
				return
			}
		}
		dir, err := os.MkdirTemp("", "tokentap-bench")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBin = filepath.Join(dir, "tokentap")
		out, err := exec.Command("go", "build", "-o", benchBin, "../cmd/tokentap").CombinedOutput()
		if err != nil {
			benchBinErr = fmt.Errorf("go build ./cmd/tokentap: %v\n%s", err, out)
		}
	})
	if benchBinErr != nil {
		b.Fatal(benchBinErr)
	}
	return benchBin
}

// readCalls is how many read system calls this process made: read and
// its kind (/proc/self/io syscr) and the event loop's recvmsg calls, which
// syscr leaves out; 0 where unknown.
func readCalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	n := int64(evloop.Reads())
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			r, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n + r
		}
	}
	return 0
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startFake starts the fake engine child, pinned to CPU 0 when taskset and
// two CPUs exist; it returns the base URL and whether pinning happened.
func startFake(b *testing.B) (string, bool) {
	args := []string{"fake-engine", "--listen", "127.0.0.1:0", "--ledger", "--model", "bench",
		"--first-event-delay", "50ms", "--tbt-base", "10ms", "--tbt-per-running", "0", "--tbt-per-ktokens", "0",
		"--prefill-tok-per-sec", "1e9", "--prefill-slowdown", "0",
		"--max-running", "100000", "--kv-capacity", strconv.Itoa(1 << 30), "--max-model-len", "1000000"}
	bin := tokentapBin(b)
	pinned := benchcpu.Pinnable()
	cmd := exec.Command(bin, args...)
	if pinned {
		cmd = benchcpu.Command(0, bin, args...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("fake engine printed no URL: %v", err)
	}
	return strings.TrimSpace(line), pinned
}

func fetchLedger(b *testing.B, base string) []fixtures.LedgerEntry {
	resp, err := http.Get(base + "/fake/ledger")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var entries []fixtures.LedgerEntry
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
		b.Fatalf("decode the fake's ledger: %v", err)
	}
	return entries
}

func accuracyRun(b *testing.B, streams int, dur time.Duration) {
	b.StopTimer()
	base, pinned := startFake(b)
	tg := Target{BaseURL: base, Model: "bench"}
	bodies := make([]Body, streams)
	for i := range bodies {
		body, err := tg.Body(Request{Prompt: "stream " + strconv.Itoa(i) + " says hello", MaxTokens: 256, Stream: true, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = body
	}
	if pinned {
		unpin, err := benchcpu.Pin(1)
		if err != nil {
			b.Fatalf("pin the load generator to CPU 1: %v", err)
		}
		defer unpin()
		// As if started with `taskset -c 1`: Go then sizes GOMAXPROCS to the
		// one CPU it may use (two Ps on one CPU would spin for each other),
		// and the event loops, once started, add the P they keep.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(1, evloop.Procs())))
	}
	runtime.GC()
	clock := record.NewClock()
	b.StartTimer()
	cpu0, wall0, reads0 := cpuTime(), time.Now(), readCalls()
	// CPU over the middle of the run too: sampled 1 s in and 0.5 s before
	// the end, the interval the throughput below is counted over.
	type sample struct {
		cpu  time.Duration
		wall time.Time
	}
	mid := make(chan [2]sample, 1)
	go func() {
		time.Sleep(time.Second)
		a := sample{cpuTime(), time.Now()}
		time.Sleep(dur - 1500*time.Millisecond)
		mid <- [2]sample{a, {cpuTime(), time.Now()}}
	}()
	run := Run(context.Background(), Closed{Options: Options{Target: tg, Clock: clock, MaxTokens: 256, Stream: true, Window: dur}, Bodies: bodies})
	cpu := cpuTime() - cpu0
	wall := time.Since(wall0)
	m := <-mid
	cpuMid, wallMid := m[1].cpu-m[0].cpu, m[1].wall.Sub(m[0].wall)
	reads := readCalls() - reads0
	b.StopTimer()
	recs := run.Records
	if run.Failed {
		for _, r := range recs {
			if r.Outcome.Failed() {
				b.Fatalf("request failed: %s %s", r.Outcome, r.Error)
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the fake records cancelled streams as it notices them
	ledger := fetchLedger(b, base)
	byID := make(map[string]*fixtures.LedgerEntry, len(ledger))
	for i := range ledger {
		byID[ledger[i].ID] = &ledger[i]
	}

	// The middle of the run, as offsets on our clock; ledger times are wall
	// clock, mapped through the clock's wall start.
	from, to := run.Start+time.Second, run.End-500*time.Millisecond
	off := func(t time.Time) time.Duration { return t.Sub(clock.Start().Round(0)) }
	var (
		sendDelay, readDelay []time.Duration
		intake               []time.Duration
		ttftErr, ttftRead    []float64
		ttftErrH             []float64
		noArrival            int
		gapsM, gapsL         []time.Duration
		late                 []time.Duration
		tokM, tokL           int
		matched, tokensA     int
	)
	for i := range recs {
		r := &recs[i]
		le := byID[r.ResponseID]
		if le == nil {
			continue
		}
		matched++
		tokensA += r.ArrivedTokens()
		if ttft, ok := r.TTFT(); ok && !le.FirstToken.IsZero() {
			arrived := le.Arrived
			if arrived.IsZero() {
				arrived = le.Received // the fake's first milliseconds: no kernel stamp yet
				noArrival++
			}
			truth := le.FirstToken.Sub(arrived)
			ttftErr = append(ttftErr, float64(ttft)/float64(truth)-1)
			ttftErrH = append(ttftErrH, float64(ttft)/float64(le.FirstToken.Sub(le.Received))-1)
			intake = append(intake, le.Received.Sub(arrived))
			ttftRead = append(ttftRead, float64(r.First-off(le.FirstToken))/float64(truth))
			sendDelay = append(sendDelay, off(le.Received)-r.Sent)
		}
		for j, a := range r.Arrivals {
			if j < len(le.Events) {
				readDelay = append(readDelay, a-off(le.Events[j].At))
			}
		}
		for j, a := range r.Arrivals {
			if a >= from && a < to {
				tokM += r.EventTokens(j)
				if j > 0 {
					gapsM = append(gapsM, a-r.Arrivals[j-1])
				}
			}
		}
		for j, ev := range le.Events {
			at := off(ev.At)
			if at >= from && at < to {
				tokL += ev.Tokens
				if j > 0 {
					gapsL = append(gapsL, ev.At.Sub(le.Events[j-1].At))
				}
				late = append(late, ev.At.Sub(ev.Due))
			}
		}
	}
	if matched == 0 || len(gapsM) == 0 || len(gapsL) == 0 || tokL == 0 {
		b.Fatalf("nothing to compare: %d records, %d matched the ledger", len(recs), matched)
	}
	slices.Sort(ttftErr)
	slices.Sort(ttftErrH)
	slices.Sort(intake)
	slices.Sort(ttftRead)
	slices.Sort(gapsM)
	slices.Sort(gapsL)
	slices.Sort(late)
	slices.Sort(sendDelay)
	slices.Sort(readDelay)
	medGapM, medGapL := gapsM[len(gapsM)/2], gapsL[len(gapsL)/2]
	b.ReportMetric(100*ttftErr[len(ttftErr)/2], "ttft_err_%")
	b.ReportMetric(100*ttftErrH[len(ttftErrH)/2], "ttft_err_vs_handler_%")
	b.ReportMetric(float64(intake[len(intake)/2])/float64(time.Millisecond), "intake_ms")
	if noArrival > len(ttftErr)/10 {
		b.Errorf("%d of %d requests have no kernel arrival time in the ledger: is SO_TIMESTAMPNS unsupported here?", noArrival, len(ttftErr))
	}
	b.ReportMetric(100*ttftRead[len(ttftRead)/2], "ttft_read_err_%")
	b.ReportMetric(100*(float64(medGapM)/float64(medGapL)-1), "tbt_err_%")
	b.ReportMetric(100*(float64(tokM)/float64(tokL)-1), "tput_err_%")
	b.ReportMetric(float64(tokM)/(to-from).Seconds(), "tok/s")
	b.ReportMetric(cpuMid.Seconds()/wallMid.Seconds(), "cpu_cores")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu_cores_all")
	if reads > 0 && tokensA > 0 {
		b.ReportMetric(float64(reads)/float64(tokensA), "reads/token")
	}
	b.ReportMetric(float64(late[len(late)/2])/float64(time.Millisecond), "fake_late_ms")
	b.ReportMetric(float64(sendDelay[len(sendDelay)/2])/float64(time.Millisecond), "send_delay_ms")
	b.ReportMetric(float64(readDelay[len(readDelay)/2])/float64(time.Millisecond), "read_delay_ms")
	if !pinned {
		b.Log("taskset or a second CPU is missing: the fake and the load generator share CPUs")
	}
}
