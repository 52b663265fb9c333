//go:build e2e && fuzzproxy

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Bounds of TestFuzzProxyOutside's oracle.
const (
	// outsideMemory bounds the proxy's peak resident memory. Eight
	// workers hold at most eight bodies of up to 4 MB, each in fasthttp's
	// buffer rounded up to 8 MB, and eight events of up to 1 MB, each in
	// the read buffer, the tap and the client's write (about 4 MB): some
	// 100 MB live. The collector lets the heap grow to twice the live heap
	// before it runs (GOGC=100), and fasthttp's buffer pool keeps a few
	// large buffers: 384 MiB. A JSON tree of one 10 MB body took 2.2 GB.
	outsideMemory = 384 << 20
	// outsideGap bounds the largest gap the probe stream (an event every
	// 10 ms) shows at its client, beyond its own 10 ms: one expensive body
	// being inspected must not stall another stream (it took 1,120 ms).
	outsideGap = 500 * time.Millisecond
)

// TestFuzzProxyOutside is the second half of `make fuzz-proxy` (not in
// CI): the engine is not ours (testdata/rawengine.py, Python's standard
// library, raw sockets), so its framing and timing are not the Go fake's.
// Workers send, for TOKENTAP_FUZZ_TIME, streams of every framing
// (close-delimited, chunked, Content-Length) with events of 1 byte to
// 1 MB at gaps of 0 to 10 ms, and request bodies shaped to be expensive
// to parse (deep nesting, long arrays, many keys, long strings, up to
// 4 MB). Each request names its own model, so records are matched to
// requests one to one. The oracle: exactly one record per request, the
// proxy's peak memory within outsideMemory, and a probe stream beside it
// all never stalled by more than outsideGap.
func TestFuzzProxyOutside(t *testing.T) {
	duration := envDuration(t, "TOKENTAP_FUZZ_TIME", 10*time.Minute)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TOKENTAP_FUZZ_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	workers := envInt(t, "TOKENTAP_FUZZ_WORKERS", 8)
	t.Logf("seed %d, %d workers, %v", seed, workers, duration)
	eng := pyEngine(t)
	p := startProxyProc(t, eng, "--max-body-size", "8M", "--idle-timeout", "30s")
	pid := p.cmd.Process.Pid

	var sent atomic.Int64
	var failures sync.Map // model → what went wrong at the client
	counts := map[string]*atomic.Int64{}
	for _, k := range []string{"close", "chunked", "length", "nesting", "array", "keys", "string", "plain"} {
		counts[k] = new(atomic.Int64)
	}
	stop := time.Now().Add(duration)

	// The probe: one long stream, an event every 10 ms, timed at its client.
	probeGap := make(chan time.Duration, 1)
	go func() {
		worst := time.Duration(0)
		defer func() { probeGap <- worst }()
		for time.Now().Before(stop) {
			n := 500 // 5 s a stream
			c, err := net.Dial("tcp", p.addr())
			if err != nil {
				return
			}
			body := fmt.Sprintf(`{"model":"probe-%d","stream":true}`, sent.Add(1))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Shape: stream:chunked:20:10000:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n, len(body), body)
			br := bufio.NewReaderSize(c, 1<<16)
			last := time.Time{}
			for {
				line, err := br.ReadSlice('\n')
				if err != nil && err != bufio.ErrBufferFull {
					break
				}
				if strings.HasPrefix(string(line), "data: ") {
					now := time.Now()
					if !last.IsZero() && now.Sub(last) > worst {
						worst = now.Sub(last)
					}
					last = now
				}
			}
			c.Close()
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(stop) {
				n := sent.Add(1)
				model := "fz-" + strconv.FormatInt(n, 10)
				body, kind := expensiveBody(rng, model)
				counts[kind].Add(1)
				framing := []string{"close", "chunked", "length"}[rng.IntN(3)]
				counts[framing].Add(1)
				size := 1 << rng.IntN(21) // 1 B to 1 MB
				events := 1 + rng.IntN(max(1, 4<<20/size/4+1))
				events = min(events, 200)
				gap := rng.IntN(10_001) // µs
				if rng.IntN(3) == 0 {
					gap = 0
				}
				shape := fmt.Sprintf("stream:%s:%d:%d:%d", framing, size, gap, events)
				if err := outsideRequest(p.addr(), shape, body, size*events); err != "" {
					failures.Store(model, shape+": "+err)
				}
			}
		})
	}
	wg.Wait()
	worst := <-probeGap
	peak := peakRSS(t, pid)

	// Every request has exactly one record, found by its model name.
	total := int(sent.Load())
	deadline := time.Now().Add(30 * time.Second)
	var recs []record.Record
	for {
		raw, _ := os.ReadFile(p.capture)
		recs, _ = record.ReadAll(strings.NewReader(string(raw)))
		if len(recs) >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Model]++
	}
	missing, doubled := 0, 0
	for i := 1; i <= total; i++ {
		m := "fz-" + strconv.Itoa(i)
		if seen[m] == 0 && seen["probe-"+strconv.Itoa(i)] == 0 {
			missing++
		}
		if seen[m] > 1 || seen["probe-"+strconv.Itoa(i)] > 1 {
			doubled++
		}
	}
	bad := 0
	failures.Range(func(k, v any) bool {
		bad++
		if bad <= 10 {
			t.Errorf("%s: %s", k, v)
		}
		return true
	})
	var kinds []string
	for k, c := range counts {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, c.Load()))
	}
	t.Logf("requests %d (%s); records %d, missing %d, doubled %d; client failures %d; peak RSS %d MiB; probe's worst gap %v",
		total, strings.Join(kinds, ", "), len(recs), missing, doubled, bad, peak>>20, worst)
	if missing > 0 || doubled > 0 {
		t.Errorf("%d requests without a record, %d with more than one", missing, doubled)
	}
	if peak > outsideMemory {
		t.Errorf("peak resident memory %d MiB, over the bound of %d MiB", peak>>20, outsideMemory>>20)
	}
	if worst > 10*time.Millisecond+outsideGap {
		t.Errorf("the probe stream's worst gap was %v (events every 10 ms), over 10 ms + %v", worst, outsideGap)
	}
}

// outsideRequest sends one streamed request and reads the whole answer;
// it returns what went wrong, or "".
func outsideRequest(addr, shape, body string, contentBytes int) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Shape: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", shape, len(body), body); err != nil {
		return err.Error()
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return "no answer: " + err.Error()
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return "status " + strings.TrimSpace(status)
	}
	n, err := io.Copy(io.Discard, br)
	if err != nil {
		return err.Error()
	}
	if n < int64(contentBytes) {
		return fmt.Sprintf("got %d bytes, the events alone are %d", n, contentBytes)
	}
	return ""
}

// expensiveBody is a streamed chat request for model, usually with a
// member shaped to be expensive to parse; kind names the shape.
func expensiveBody(rng *rand.Rand, model string) (string, string) {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}],"x":`, model)
	kind := []string{"nesting", "array", "keys", "string", "plain"}[rng.IntN(5)]
	size := 1 << (10 + rng.IntN(13)) // 1 KB to 4 MB
	switch kind {
	case "nesting":
		depth := min(size/2, 1000) // deeper than an engine's parser follows is not a request
		b.WriteString(strings.Repeat("[", depth) + strings.Repeat("]", depth))
	case "array":
		b.WriteString("[0" + strings.Repeat(",1", size/2) + "]")
	case "keys":
		b.WriteString("{")
		for i := range size / 8 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":%d`, i%1000, i)
		}
		b.WriteString("}")
	case "string":
		b.WriteString(`"` + strings.Repeat(`a\"\u00e9`, size/9) + `"`)
	default:
		b.WriteString("0")
	}
	b.WriteString("}")
	return b.String(), kind
}
