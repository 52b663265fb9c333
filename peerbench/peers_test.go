//go:build peers

// Package peerbench is make bench-peers (build tag peers, not in CI): the
// peers' load generators and tokentap's, each run against its own fresh
// fake engine of the same known timing, at the same streams, prompt and
// output lengths, with tcpdump capturing the loopback as the truth (the
// harness of make bench-wire: internal/test/loopcap, internal/wire). Each
// client's per-request TTFT and inter-token figures are held to the
// packets of the same request on its own leg, matched by response id,
// request id or order of ending (whatever the client keeps), and its
// output throughput to the wire's; its CPU time is read from the kernel
// (METHOD §11, "The peers beside tokentap"). It needs root or CAP_NET_RAW
// (tcpdump).
//
// Settings (the Makefile passes them): PEERS_VENV the virtual environment
// with the peers' clients (aiperf, GuideLLM, genai-bench), TOKENTAP_VLLM
// the python of make live's vLLM environment (its bench serve),
// TOKENTAP_BIN the tokentap binary (else it is built), PEERS_STREAMS (4),
// PEERS_REQUESTS (64), PEERS_INPUT (256) and PEERS_OUTPUT (128) tokens,
// PEERS_ONLY (names of the clients to run, default all), PEERS_OUT the
// JSON file of the rows, PEERS_KEEP a directory to keep every capture
// and output in. A peer that is missing is a row that says why, and the
// run says so; a peer that fails fails the test.
package peerbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/tokentap/tokentap/internal/test/loopcap"
	"github.com/tokentap/tokentap/internal/test/tinygguf"
	"github.com/tokentap/tokentap/internal/test/tinyhf"
	"github.com/tokentap/tokentap/internal/wire"
)

const modelName = "tokentap-tiny"

// The fake engine of every leg: 40 ms to the first token and 10 ms between
// tokens whatever the load.
const (
	fakeTTFT = 40 * time.Millisecond
	fakeGap  = 10 * time.Millisecond
)

// env is what every leg shares.
type env struct {
	bin, tok, dir                    string
	streams, requests, input, output int
	capture                          *loopcap.Tool
	keep                             bool
}

// run is what a client's leg gives back: its per-request reports, how
// they are matched with the wire's exchanges, and its own figures.
type run struct {
	client, version string
	key             wire.Key
	span            wire.Span
	reps            []wire.Reported
	reported        int // requests the client reports as done (reps holds them)
	tokS            float64
	// wireTokS is the wire's throughput over the client's definition of
	// its figure; nil: over the matched requests, from the first request's
	// last byte to the last token event.
	wireTokS func(xs []wire.Exchange) (float64, string)
	cpu      time.Duration // user + system, of the client and the children it waited for
	wall     time.Duration
	note     string
}

// Row is one client's figures against the wire. Figures that do not
// apply, or had no sample, are null.
type Row struct {
	Client    string `json:"client"`
	Version   string `json:"version"`
	Skipped   string `json:"skipped,omitempty"`
	MatchedBy string `json:"matched_by,omitempty"`
	Reported  int    `json:"requests_reported"`
	Matched   int    `json:"requests_matched"`
	Unmatched int    `json:"reports_unmatched"`
	Left      int    `json:"wire_streams_unreported"`
	Close     int    `json:"pairs_ending_within_1ms"`

	TTFTms        *float64 `json:"ttft_median_ms"`
	WireTTFTms    *float64 `json:"wire_ttft_median_ms"`
	TTFTErrMedian *float64 `json:"ttft_err_median_ms"`
	TTFTErrP99    *float64 `json:"ttft_err_p99_abs_ms"`
	TTFTRelMedian *float64 `json:"ttft_err_median_pct"`
	ITLSpan       string   `json:"itl_span"`
	ITLErrMedian  *float64 `json:"itl_err_median_ms"`
	ITLErrP99     *float64 `json:"itl_err_p99_abs_ms"`
	GapErrMedian  *float64 `json:"gap_err_median_ms"`
	GapErrP99     *float64 `json:"gap_err_p99_abs_ms"`
	GapsDiffer    int      `json:"requests_gap_count_differs"`
	TokS          *float64 `json:"tok_s"`
	WireTokS      *float64 `json:"wire_tok_s"`
	TputErrPct    *float64 `json:"tput_err_pct"`
	TputOver      string   `json:"tput_over"`
	CPUs          float64  `json:"cpu_s"`
	WallS         float64  `json:"wall_s"`
	Dropped       int      `json:"capture_dropped"`
	Holed         int      `json:"directions_with_lost_bytes"`
	Note          string   `json:"note,omitempty"`
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// clients are the legs, in the table's order.
var clients = []struct {
	name string
	leg  func(t *testing.T, e *env, url string) (run, string)
}{
	{"tokentap", tokentapLeg},
	{"vllm", vllmLeg},
	{"aiperf", aiperfLeg},
	{"guidellm", guidellmLeg},
	{"genai-bench", genaiLeg},
}

func TestPeers(t *testing.T) {
	e := &env{dir: t.TempDir(), streams: envInt("PEERS_STREAMS", 4), requests: envInt("PEERS_REQUESTS", 64),
		input: envInt("PEERS_INPUT", 256), output: envInt("PEERS_OUTPUT", 128)}
	if keep := os.Getenv("PEERS_KEEP"); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			t.Fatal(err)
		}
		e.dir, e.keep = keep, true
	}
	only := strings.Fields(os.Getenv("PEERS_ONLY"))
	var names []string
	for _, c := range clients {
		names = append(names, c.name)
	}
	for _, o := range only {
		if !slices.Contains(names, o) {
			t.Fatalf("PEERS_ONLY: unknown client %q (tokentap, vllm, aiperf, guidellm, genai-bench)", o)
		}
	}
	var err error
	if e.capture, err = loopcap.Find(); err != nil {
		t.Fatalf("%v: make bench-peers installs it", err)
	}
	if err := e.capture.Check(e.dir); err != nil {
		t.Fatalf("%v\n(sudo make bench-peers)", err)
	}
	if e.bin = os.Getenv("TOKENTAP_BIN"); e.bin == "" {
		e.bin = filepath.Join(e.dir, "tokentap")
		if b, err := exec.Command("go", "build", "-o", e.bin, "../cmd/tokentap").CombinedOutput(); err != nil {
			t.Fatalf("go build tokentap: %v\n%s", err, b)
		}
	}
	// The peers tokenize their synthetic prompts with a Hugging Face
	// tokenizer: tinyhf's, written here, nothing downloaded.
	e.tok = filepath.Join(e.dir, "tiny-hf")
	if err := tinyhf.Write(e.tok, tinygguf.Default()); err != nil {
		t.Fatal(err)
	}
	var rows []Row
	for _, c := range clients {
		if len(only) > 0 && !slices.Contains(only, c.name) {
			continue
		}
		rows = append(rows, leg(t, e, c.name, c.leg))
	}
	fmt.Printf("\nbench-peers: %d streams, %d requests, %d prompt and %d output tokens; the fake: TTFT %v, %v between tokens; the truth: tcpdump on lo (%s stamps)\n",
		e.streams, e.requests, e.input, e.output, fakeTTFT, fakeGap, e.capture.StampName())
	printTable(os.Stdout, rows)
	if out := os.Getenv("PEERS_OUT"); out != "" {
		b, _ := json.MarshalIndent(map[string]any{"streams": e.streams, "requests": e.requests, "input": e.input, "output": e.output,
			"fake_ttft_ms": ms(fakeTTFT), "fake_gap_ms": ms(fakeGap), "timestamps": e.capture.StampName(), "rows": rows}, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Error(err)
		} else {
			fmt.Println("figures written to", out)
		}
	}
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Printf("bench-peers: %s SKIPPED: %s\n", r.Client, r.Skipped)
		}
	}
}

// leg runs one client against a fresh fake with the loopback captured,
// and holds its reports to the wire.
func leg(t *testing.T, e *env, name string, client func(t *testing.T, e *env, url string) (run, string)) Row {
	fake := startFake(t, e)
	defer fake.stop()
	port := fake.port(t)
	pcap := filepath.Join(e.dir, name+".pcap")
	c, err := e.capture.Start(pcap, []int{port})
	if err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	r, skip := client(t, e, fake.url)
	dropped, err := c.Stop()
	if err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	fake.stop()
	if skip != "" {
		fmt.Printf("bench-peers: %s skipped: %s\n", name, skip)
		return Row{Client: name, Skipped: skip}
	}
	if r.client == "" { // the client failed: the test is failed already
		return Row{Client: name, Skipped: "failed (above)"}
	}
	capt := readCapture(t, pcap)
	if !e.keep {
		_ = os.Remove(pcap)
	}
	return compare(r, capt, dropped)
}

// compare holds a client's run to the capture of its leg.
func compare(r run, c *wire.Capture, dropped int) Row {
	var xs []wire.Exchange
	for _, x := range c.Exchanges {
		if strings.HasSuffix(x.Path, "/completions") {
			xs = append(xs, x)
		}
	}
	m := wire.MatchReported(r.reps, xs, r.key)
	errs := wire.CompareReported(m.Pairs, r.span)
	row := Row{Client: r.client, Version: r.version, MatchedBy: keyName(r.key), Reported: r.reported, Matched: len(m.Pairs),
		Unmatched: m.Unmatched, Left: m.Left, Close: m.Close, ITLSpan: spanName(r.span), GapsDiffer: errs.GapsDiffer,
		CPUs: r.cpu.Seconds(), WallS: r.wall.Seconds(), Dropped: dropped, Holed: c.Holed, Note: r.note}
	var ttfts, wireTTFTs []float64
	for _, p := range m.Pairs {
		if p.Rep.TTFT > 0 {
			ttfts = append(ttfts, ms(p.Rep.TTFT))
		}
		if w, ok := p.Wire.Wire.TTFT(); ok && p.Wire.ReqDone {
			wireTTFTs = append(wireTTFTs, ms(w))
		}
	}
	row.TTFTms, row.WireTTFTms = num(median(ttfts)), num(median(wireTTFTs))
	row.TTFTErrMedian, row.TTFTErrP99 = num(median(wire.Millis(errs.TTFT))), num(p99abs(wire.Millis(errs.TTFT)))
	row.TTFTRelMedian = num(100 * median(errs.TTFTRel))
	row.ITLErrMedian, row.ITLErrP99 = num(median(wire.Millis(errs.ITL))), num(p99abs(wire.Millis(errs.ITL)))
	row.GapErrMedian, row.GapErrP99 = num(median(wire.Millis(errs.Gap))), num(p99abs(wire.Millis(errs.Gap)))
	row.TokS = num(r.tokS)
	var wt float64
	if r.wireTokS != nil {
		wt, row.TputOver = r.wireTokS(xs)
	} else {
		tokens, from, to := wire.PeerTokens(m.Pairs)
		if to > from {
			wt = float64(tokens) / (to - from).Seconds()
		}
		row.TputOver = "the matched requests' tokens on the wire, from the first request's last byte to the last token event"
	}
	row.WireTokS = num(wt)
	if dropped > 0 || c.Holed > 0 {
		row.Note = strings.TrimSpace(row.Note + " The capture lost packets: no throughput error.")
	} else if wt > 0 && r.tokS > 0 {
		row.TputErrPct = num(100 * (r.tokS/wt - 1))
	}
	return row
}

func keyName(k wire.Key) string {
	switch k {
	case wire.ByResponseID:
		return "response id"
	case wire.ByRequestID:
		return "X-Request-Id"
	}
	return "order of ending"
}

func spanName(s wire.Span) string {
	if s == wire.FirstToEnd {
		return "first token to the response's end"
	}
	return "first token to the last"
}

func readCapture(t *testing.T, path string) *wire.Capture {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := wire.Read(bufio.NewReaderSize(f, 1<<20), wire.Options{})
	if err != nil {
		t.Fatalf("read the capture %s: %v", path, err)
	}
	return c
}

// child is a started process whose first line on stdout is its URL.
type child struct {
	cmd *exec.Cmd
	url string
}

func startFake(t *testing.T, e *env) *child {
	cmd := exec.Command(e.bin, "fake-engine", "--listen", "127.0.0.1:0", "--model", modelName,
		"--first-event-delay", fakeTTFT.String(), "--tbt-base", fakeGap.String(), "--tbt-per-running", "0", "--tbt-per-ktokens", "0",
		"--prefill-tok-per-sec", "1e7", "--prefill-slowdown", "0", "--max-running", "256", "--kv-capacity", strconv.Itoa(1<<22),
		"--max-model-len", "8192", "--block-size", "16")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the fake engine: %v", err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(c.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the fake engine printed no URL: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	c.url = strings.TrimSpace(line)
	return c
}

func (c *child) port(t *testing.T) int {
	i := strings.LastIndexByte(c.url, ':')
	p, err := strconv.Atoi(strings.TrimRight(c.url[i+1:], "/"))
	if i < 0 || err != nil {
		t.Fatalf("no port in the fake's URL %q", c.url)
	}
	return p
}

func (c *child) stop() {
	if c.cmd.ProcessState != nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// runClient runs a client to its end, with its output kept in a file of
// the leg's directory, and gives its CPU (user + system, its own and its
// waited-for children's, from wait4) and wall time.
func runClient(e *env, name string, cmd *exec.Cmd) (out string, cpu, wall time.Duration, err error) {
	log := filepath.Join(e.dir, name+".log")
	f, ferr := os.Create(log)
	if ferr != nil {
		return "", 0, 0, ferr
	}
	cmd.Stdout, cmd.Stderr = f, f
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	f.Close()
	b, _ := os.ReadFile(log)
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return string(b), cpu, wall, err
}

// pyVersion is an installed distribution's version, as its python sees it.
func pyVersion(py string, dists ...string) string {
	for _, d := range dists {
		out, err := exec.Command(py, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", d).Output()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	return "unknown"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 { return wire.Quantile(xs, 0.5) }

func p99abs(xs []float64) float64 {
	a := make([]float64, len(xs))
	for i, x := range xs {
		a[i] = math.Abs(x)
	}
	return wire.Quantile(a, 0.99)
}

func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func printTable(w io.Writer, rows []Row) {
	f := func(v *float64, prec int) string {
		if v == nil {
			return "—"
		}
		return strconv.FormatFloat(*v, 'f', prec, 64)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tversion\tmatched\tby\tTTFT ms (wire)\tTTFT err ms\tTTFT err %\tITL err ms\tgap err ms\ttok/s (wire)\ttput err %\tCPU s\twall s\t")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t—\tskipped: %s\t\t\t\t\t\t\t\t\t\t\t\n", r.Client, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s (%s)\t%s / %s\t%s\t%s / %s\t%s / %s\t%s (%s)\t%s\t%.1f\t%.1f\t\n", r.Client, r.Version,
			r.Matched, r.Reported, r.MatchedBy, f(r.TTFTms, 2), f(r.WireTTFTms, 2), f(r.TTFTErrMedian, 3), f(r.TTFTErrP99, 3),
			f(r.TTFTRelMedian, 2), f(r.ITLErrMedian, 3), f(r.ITLErrP99, 3), f(r.GapErrMedian, 3), f(r.GapErrP99, 3),
			f(r.TokS, 1), f(r.WireTokS, 1), f(r.TputErrPct, 2), r.CPUs, r.WallS)
	}
	tw.Flush()
	fmt.Fprintln(w, "errors are the client's − the wire's, per request matched (gaps: per token event); each is median / p99 of |error|.")
	for _, r := range rows {
		if r.Skipped != "" {
			continue
		}
		fmt.Fprintf(w, "%s: ITL over %s; throughput against %s; %d reports unmatched, %d wire streams unreported, %d pairs ending within 1 ms of another, %d requests whose gap count differs; capture dropped %d packets, %d directions lost bytes. %s\n",
			r.Client, r.ITLSpan, r.TputOver, r.Unmatched, r.Left, r.Close, r.GapsDiffer, r.Dropped, r.Holed, r.Note)
	}
}
