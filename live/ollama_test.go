//go:build live

package live

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

const ollamaHow = "build Ollama from its source (a Go module; see README, Live tier) and set TOKENTAP_OLLAMA to the binary, or put it at $TOKENTAP_ENGINE_CACHE/bin/ollama for make live"

// ollamaServer is `ollama serve` on 127.0.0.1 with its own model store,
// OLLAMA_NUM_PARALLEL parallel, and two models made from the tiny GGUF:
// "tiny" created with num_ctx 8192, "tiny-noctx" without it.
type ollamaServer struct {
	*server
	bin string
	env []string
}

func startOllama(t *testing.T, bin string, parallel int) *ollamaServer {
	t.Helper()
	port := freePort(t)
	host := "127.0.0.1:" + strconv.Itoa(port)
	// HOME too: ollama makes a key pair in ~/.ollama when there is none.
	env := []string{"OLLAMA_HOST=" + host, "OLLAMA_MODELS=" + t.TempDir(), "OLLAMA_NUM_PARALLEL=" + strconv.Itoa(parallel),
		"OLLAMA_KEEP_ALIVE=10m", "OLLAMA_NOPRUNE=1", "HOME=" + t.TempDir()}
	s := start(t, ollama, bin, env, "serve")
	s.url = "http://" + host
	s.waitOK(t, s.url+"/api/version", 60*time.Second)
	o := &ollamaServer{server: s, bin: bin, env: env}
	// One thread: two ggml threads on this 2-core machine, beside the load
	// generator, stall for hundreds of milliseconds whenever one is
	// preempted (seen: 450 ms gaps between tokens with num_thread 2, none
	// with 1). llama-server gets -t 1 for the same reason.
	o.create(t, "tiny", "PARAMETER num_ctx 8192\nPARAMETER num_thread 1\n")
	o.create(t, "tiny-noctx", "PARAMETER num_thread 1\n")
	return o
}

// create makes model name from the tiny GGUF with a ChatML template.
func (o *ollamaServer) create(t *testing.T, name, extra string) {
	t.Helper()
	mf := filepath.Join(t.TempDir(), "Modelfile")
	body := fmt.Sprintf("FROM %s\nTEMPLATE \"\"\"%s\"\"\"\nPARAMETER stop <|im_start|>\nPARAMETER stop <|im_end|>\n%s",
		modelPath, "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n", extra)
	if err := os.WriteFile(mf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(o.bin, "create", name, "-f", mf)
	cmd.Env = append(os.Environ(), o.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create %s: %v\n%s", name, err, out)
	}
}

func TestOllama(t *testing.T) {
	bin := engineBinary(t, ollama, "TOKENTAP_OLLAMA", ollamaHow)
	ctx := context.Background()

	for _, parallel := range []int{1, 2} {
		check(t, ollama, fmt.Sprintf("probe with OLLAMA_NUM_PARALLEL=%d", parallel), func(t *testing.T) {
			o := startOllama(t, bin, parallel)
			in, err := engines.Probe(ctx, engines.Target{BaseURL: o.url, Model: "tiny"})
			if err != nil {
				t.Fatal(err)
			}
			if in.Kind != engines.KindOllama || in.Model != "tiny:latest" || in.Version == "" || in.Version == "0.0.0" ||
				in.MaxModelLen != 8192 || in.Slots != parallel || in.KVCapacity != 8192*parallel {
				t.Fatalf("probe: %+v\nfacts: %+v", in, in.Facts)
			}
		})
	}

	o := startOllama(t, bin, 1)
	// A model created without num_ctx runs at Ollama's default context:
	// the probe, which loads the model before asking /api/ps, reads that
	// context, not the trained length /api/show gives.
	var noctx int
	check(t, ollama, "probe reads the context a model without num_ctx runs at", func(t *testing.T) {
		in, err := engines.Probe(ctx, engines.Target{BaseURL: o.url, Model: "tiny-noctx"})
		if err != nil {
			t.Fatal(err)
		}
		if in.MaxModelLen <= 0 || in.MaxModelLen >= modelCfg.Context {
			t.Fatalf("max model length %d: want the running context, below the trained %d\nfacts: %+v", in.MaxModelLen, modelCfg.Context, in.Facts)
		}
		noctx = in.MaxModelLen
	})
	check(t, ollama, "a longer prompt is cut to the context without an error", func(t *testing.T) {
		if noctx == 0 {
			t.Skip("no context from the probe above")
		}
		r := stream(t, o.url, "tiny-noctx", modelCfg.Text(noctx+1000, 300), 4)
		if r.Status != 200 || r.Outcome != record.OK || r.PromptTokens > noctx {
			t.Fatalf("a %d-token prompt on a %d-token context: status %d %s, prompt tokens %d", noctx+1000, noctx, r.Status, r.Outcome, r.PromptTokens)
		}
	})
	check(t, ollama, "usage's tokens are the events' tokens", func(t *testing.T) {
		for i := range 5 {
			r := stream(t, o.url, "tiny", modelCfg.Text(50, uint64(400+i)), 100)
			if r.Outcome != record.OK || r.CompletionSource != record.SourceUsage || r.CompletionTokens != 100 ||
				r.ArrivedTokens() != r.CompletionTokens || r.Events() > r.CompletionTokens {
				t.Fatalf("stream %d: %s, %d events carrying %d tokens, usage %d (%s)", i, r.Outcome, r.Events(), r.ArrivedTokens(), r.CompletionTokens, r.CompletionSource)
			}
		}
	})

	// The matrix on one slot and 8,192 tokens: more requests than the slot
	// queue, 2K × 4 (8,448 tokens) is over capacity, and a lone 2K request
	// finds its warmed prompt in the slot.
	sc := scenarios.Scenario{Name: "live-ollama", Contexts: []int{0, 2048}, Concurrency: []int{1, 2, 4},
		Prefill: []int{2048}, Window: 4 * time.Second, MaxOutput: 64, API: "chat"}
	var recs []record.Record
	res, err := matrix.Run(ctx, matrix.Config{Target: replay.Target{BaseURL: o.url, Model: "tiny", IdleTimeout: idle}, Scenario: sc,
		OnRecords: func(r []record.Record) { recs = append(recs, r...) }})
	if err != nil {
		t.Fatal(err)
	}
	logMatrix(t, res)
	// A stream cut while Ollama generates it can keep the slot for good
	// (METHOD.md §3): the windows' ends must have cut none.
	check(t, ollama, "no window's end cut a stream the engine ran", func(t *testing.T) {
		ended := 0
		for _, r := range recs {
			if r.Outcome == record.Cancelled && len(r.Arrivals) > 0 {
				t.Errorf("record %s (%s): cancelled after %d token events", r.ID, r.Tag, len(r.Arrivals))
			}
			if r.Outcome == record.OK && strings.HasPrefix(r.Tag, "C=") {
				ended++
			}
		}
		if ended == 0 {
			t.Fatal("no load request ended: nothing to check")
		}
	})
	check(t, ollama, "matrix statuses", func(t *testing.T) {
		statuses(t, res, map[[2]int]result.Status{
			{0, 1}: result.Valid, {0, 2}: result.RequestsQueued, {0, 4}: result.RequestsQueued,
			{2048, 1}: result.Valid, {2048, 2}: result.RequestsQueued, {2048, 4}: result.OverCapacity,
		})
	})

	check(t, ollama, "bandwidth inputs from the engine, and what it does not say", func(t *testing.T) { ollamaBandwidthInputs(t, res) })

	// A user who gives a longer context than the engine runs at: the
	// engine cuts the prompts, and the row says so instead of measuring
	// another context.
	check(t, ollama, "truncation is caught", func(t *testing.T) {
		if noctx == 0 {
			t.Skip("no context from the probe above")
		}
		c := noctx + 1024
		sc := scenarios.Scenario{Name: "live-trunc", Contexts: []int{0, c}, Concurrency: []int{1},
			Window: 2 * time.Second, MaxOutput: 32, API: "chat"}
		res, err := matrix.Run(ctx, matrix.Config{Target: replay.Target{BaseURL: o.url, Model: "tiny-noctx", IdleTimeout: idle}, Scenario: sc,
			MaxModelLen: 4 * noctx, KVCapacity: 4 * noctx})
		if err != nil {
			t.Fatal(err)
		}
		cell := res.Cell(c, 1)
		if cell == nil || cell.Status != result.Failed || !strings.Contains(cell.Reason, "truncated") || cell.Measured {
			t.Fatalf("cell %d × 1: %+v", c, cell)
		}
		if !strings.Contains(strings.Join(res.Notes, " "), "--max-model-len "+strconv.Itoa(noctx)) {
			t.Fatalf("notes %q: want the engine's real context", res.Notes)
		}
	})
}

// stream sends one streaming chat request and returns its record.
func stream(t *testing.T, base, model, prompt string, maxTokens int) record.Record {
	t.Helper()
	tgt := replay.Target{BaseURL: base, Model: model, API: record.Chat}
	body, err := tgt.Body(replay.Request{Prompt: prompt, MaxTokens: maxTokens, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	c := replay.NewConn(tgt, record.NewClock())
	defer c.Close()
	rec := record.Record{ID: "live", Stream: true, MaxTokens: maxTokens}
	ctx, cancel := context.WithTimeout(context.Background(), requestGuard)
	defer cancel()
	c.Do(ctx, body, &rec)
	return rec
}
