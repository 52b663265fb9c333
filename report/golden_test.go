package report

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
)

var update = flag.Bool("update", false, "rewrite golden files (and testdata/run.json) from the current code")

// syntheticRun builds a small run with every status and real histograms,
// deterministically, the way the fake engine's model would: TTFT grows with
// context, TBT with concurrency and context.
func syntheticRun() *result.Result {
	rng := rand.New(rand.NewPCG(1, 2))
	r := &result.Result{
		Schema:  result.SchemaVersion,
		Tool:    result.Tool{Name: "tokentap", Version: "0.1.0", Commit: "abc1234"},
		Started: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		Ended:   time.Date(2026, 11, 30, 9, 4, 30, 0, time.UTC),
		Hardware: result.Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", Driver: "580.178.04",
			CPU: "Intel Xeon E5-2680 v4 (14C)", RAM: "32 GB", OS: "Ubuntu 24.04.5", Source: "detected+given"},
		Engine: result.Engine{Name: "tokentap-fake", Version: "0.1.0", Quantization: "FP8", Backend: "cpu",
			LaunchCommand: "# the built-in fake engine, vLLM-like timing\ntokentap fake-engine --addr 127.0.0.1:8000 --max-model-len 90112 --kv-capacity 98304 --max-running 8 --prefill-tok-s 2400 --tbt-base 20ms",
			URL:           "http://127.0.0.1:8000"},
		Model: result.Model{Name: "Fake-4B-FP8", Served: "bench", Revision: "main"},
		Settings: result.Settings{DecodeTest: "Fixed duration", PrefillMode: "Measured during decode warm-up",
			WindowSeconds: 10, MaxOutput: 8192, Contexts: []int{0, 16384, 32768, 65536}, Concurrency: []int{1, 2, 4, 8},
			PrefillAt: []int{8192, 16384, 32768}, API: "chat", KVCapacity: 98304, MaxModelLen: 90112, Scenario: "demo",
			Dropped: []int{131072}},
		Probes: []result.Fact{
			{Name: "max_model_len", Value: "90112", Source: "GET /v1/models data[0].max_model_len"},
			{Name: "kv_capacity_tokens", Value: "98304", Source: "GET /metrics vllm:cache_config_info kv_cache_size_tokens"},
			{Name: "version", Value: "0.1.0", Source: "GET /version"},
		},
		Notes: []string{"Context 128K dropped: 131,072 + 8,192 max output exceeds the max model length 90,112."},
	}
	for _, p := range []struct {
		ctx  int
		tokS float64
	}{{8192, 2398.4}, {16384, 2210.9}, {32768, 1890.2}} {
		r.Prefill = append(r.Prefill, result.Prefill{Context: p.ctx, PromptTokens: p.ctx + 3, Status: result.Valid,
			TokPerSec: p.tokS, TTFTms: float64(p.ctx+3) / p.tokS * 1000, Requests: 1, DuringWarmup: p.ctx != 8192})
	}
	for _, c := range r.Settings.Contexts {
		for _, n := range r.Settings.Concurrency {
			cell := result.Cell{Context: c, Concurrency: n, MaxWaiting: 0}
			switch {
			case n*(c+r.Settings.MaxOutput) > r.Settings.KVCapacity:
				cell.Status = result.OverCapacity
				cell.Reason = "N × (context + max output) exceeds the KV cache capacity of 98,304 tokens"
			case c == 65536 && n == 1:
				cell.Status, cell.Sent, cell.FailedReqs = result.Failed, 1, 1
				cell.Reason = "HTTP 500 from the engine: fault injected (status=500)"
			default:
				tbt := 20 + 1.5*float64(n) + 0.25*float64(c)/1024
				ttft := 30 + 12*float64(n) + float64(c)/1024*4
				active := float64(n)
				cell.Status = result.Valid
				if c == 32768 && n == 2 {
					cell.Status, active, cell.MaxWaiting = result.RequestsQueued, 1.62, 1
				}
				set := histo.New()
				for i := 0; i < 400; i++ {
					set.RecordTTFT(time.Duration(ttft * math.Exp(rng.NormFloat64()*0.25) * float64(time.Millisecond)))
				}
				for i := 0; i < 4000; i++ {
					set.RecordTBT(time.Duration(tbt*math.Exp(rng.NormFloat64()*0.15)*float64(time.Millisecond)), 1)
				}
				for i := 0; i < 2*n; i++ {
					set.RecordRate(1000 / tbt * (1 + rng.NormFloat64()*0.02))
					set.RecordE2E(10 * time.Second)
				}
				per := 1000 / tbt
				cell.Measured = true
				cell.TotalTokPerSec = math.Round(per*active*10) / 10
				cell.PerRequestTokPerSec = math.Round(per*10) / 10
				ttftMed, _ := histo.Latency(set.TTFT, 0.5)
				tbtMed, _ := histo.Latency(set.TBT, 0.5)
				cell.TTFTms = float64(ttftMed.Microseconds()) / 1000
				cell.TBTms = float64(tbtMed.Microseconds()) / 1000
				cell.AvgActive = active
				cell.OutputTokens = int(cell.TotalTokPerSec * 10)
				cell.MeasuredForSeconds = 10.0
				cell.PromptTokens = c + 3
				cell.Sent = n
				cell.Histograms = set
				cell.AvgActiveSource, cell.PeakDecoding = result.ActiveEngine, n
				if c > 0 {
					cell.Cache = &result.Cache{HitRate: 1 - 1/float64(c+3), Requests: n, Source: result.CacheUsage}
				}
				if c == 16384 && n == 4 {
					cell.Status = result.CacheMissed
					cell.Cache.HitRate, cell.Cache.Misses = 0.74, 1
					cell.Reason = "1 of 4 requests found less than 95% of their prompt in the prefix cache (74.0% of prompt tokens cached): TTFT includes prefill"
				}
			}
			r.Decode = append(r.Decode, cell)
		}
	}
	return r
}

// loadRun reads testdata/run.json, rewriting it first under -update.
func loadRun(t *testing.T) *result.Result {
	t.Helper()
	path := filepath.Join("testdata", "run.json")
	if *update {
		if err := writeResult(syntheticRun(), path); err != nil {
			t.Fatal(err)
		}
	}
	r, err := result.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./report -update` to create it)", err)
	}
	return r
}

func loadSeed(t *testing.T, id string) *result.Result {
	t.Helper()
	r, err := result.ReadFile(filepath.Join("testdata", "seed-"+id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./report -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from the golden file at line %d:\n got %q\nwant %q\n(rerun with -update if the change is intended)", name, i+1, g, w)
			}
		}
	}
}

// TestGolden renders the seed documents and the synthetic run in text,
// Markdown and CSV and compares with the golden files.
func TestGolden(t *testing.T) {
	docs := map[string]*result.Result{"run": loadRun(t), "seed-000": loadSeed(t, "000"), "seed-002": loadSeed(t, "002"), "seed-003": loadSeed(t, "003")}
	for name, r := range docs {
		for _, f := range []struct {
			format Format
			ext    string
		}{{"text", "txt"}, {"md", "md"}, {"csv", "csv"}} {
			t.Run(name+"."+f.ext, func(t *testing.T) {
				var buf bytes.Buffer
				if err := Render(&buf, r, f.format); err != nil {
					t.Fatal(err)
				}
				checkGolden(t, name+"."+f.ext, buf.Bytes())
			})
		}
	}
}

// TestTextFitsTerminal checks the text report stays within 100 columns.
func TestTextFitsTerminal(t *testing.T) {
	for _, r := range []*result.Result{loadRun(t), loadSeed(t, "000"), loadSeed(t, "002"), loadSeed(t, "003")} {
		var buf bytes.Buffer
		if err := Render(&buf, r, "text"); err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(buf.String(), "\n") {
			if n := runeLen(l); n > textWidth {
				t.Errorf("%s line %d is %d columns: %q", r.Model.Name, i+1, n, l)
			}
		}
	}
}

// writeResult writes r as a document at path.
func writeResult(r *result.Result, path string) error {
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
