package matrix

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/tinygguf"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/slo"
)

// shortScenario: a 0-context row at 1 and 2 streams of 24 tokens, so
// requests end inside a 1.2 s window and are judged.
func shortScenario() scenarios.Scenario {
	return scenarios.Scenario{Name: "short", Contexts: []int{0}, Concurrency: []int{1, 2}, Window: 1200 * time.Millisecond, MaxOutput: 24, API: "chat"}
}

// TestSLOPerCell: with lenient objectives every judged request is good;
// with a 1 ms TTFT none is, and TTFT is what they missed. Judged are the
// requests that ended in the window (the completed ones, none failed) and
// those the window's end cut whose result was decided: with a 1 ms TTFT
// every cut one had missed it already, unless it was cut within 1 ms of
// being sent (the window's end came right after its stream's previous
// request ended, which a busy machine makes likelier): that one could not
// have missed it yet and is undecided; with lenient ones, a cut request's
// gaps to come leave it undecided. (Which requests the window's end cut
// is read from the records: on a busy machine a stream's next request can
// go out after the window's end, so a cell may have none cut; the run, of
// three streams, has some.) With FinishRequests the cut ones run to
// their end and are judged on all of it. The run's figures add the cells
// up.
func TestSLOPerCell(t *testing.T) {
	m := quickModel()
	m.TBTBase = 2 * time.Millisecond
	m.TBTPerRunning = 0
	eng := fixtures.StartTest(t, m)
	for _, tc := range []struct {
		spec   string
		good   bool
		finish bool
	}{{"ttft=5s,tbt=1s", true, false}, {"ttft=1ms", false, false}, {"ttft=5s,tbt=1s", true, true}} {
		spec, err := slo.Parse(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			cut   = map[int]int{} // per concurrency: requests the window's end cut
			early = map[int]int{} // of those, the ones sent too late to have missed a 1 ms TTFT
		)
		onCell := func(c CellRun) {
			n, e := cutInWindow(c, time.Millisecond)
			mu.Lock()
			cut[c.Cell.Concurrency], early[c.Cell.Concurrency] = n, e
			mu.Unlock()
		}
		res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: shortScenario(), SLO: spec, FinishRequests: tc.finish, OnCell: onCell})
		if err != nil {
			t.Fatal(err)
		}
		if res.SLO == nil || res.SLO.Spec.Text != spec.String() || res.SLO.Spec.Target != 0.9 {
			t.Fatalf("%s: run SLO %+v", tc.spec, res.SLO)
		}
		judged, good, secs, cuts := 0, 0, 0.0, 0
		for _, c := range res.Decode {
			s := c.SLO
			if c.Status != result.Valid || s == nil || s.Attainment == nil {
				t.Fatalf("%s: cell %d × %d: %s, SLO %+v", tc.spec, c.Context, c.Concurrency, c.Status, s)
			}
			switch {
			case s.Judged == 0 || s.Failed != 0:
				t.Errorf("%s: cell × %d judged %d, failed %d", tc.spec, c.Concurrency, s.Judged, s.Failed)
			case tc.finish && (s.Undecided != 0 || s.JudgedCut != 0 || s.Judged <= c.Completed):
				t.Errorf("%s, requests finished: cell × %d judged %d (completed in the window %d), %d cut, %d undecided", tc.spec, c.Concurrency, s.Judged, c.Completed, s.JudgedCut, s.Undecided)
			case !tc.finish && tc.good && (s.Judged != c.Completed || s.Undecided != cut[c.Concurrency] || s.JudgedCut != 0):
				t.Errorf("%s: cell × %d judged %d (completed %d), %d cut, %d undecided (%d cut by the window's end)", tc.spec, c.Concurrency, s.Judged, c.Completed, s.JudgedCut, s.Undecided, cut[c.Concurrency])
			case !tc.finish && !tc.good && (s.Judged != c.Completed+s.JudgedCut || s.JudgedCut+s.Undecided != cut[c.Concurrency] || s.Undecided != early[c.Concurrency]):
				t.Errorf("%s: cell × %d judged %d (completed %d), %d cut, %d undecided (%d cut within 1 ms of being sent): every other cut one had missed its TTFT", tc.spec, c.Concurrency, s.Judged, c.Completed, s.JudgedCut, s.Undecided, early[c.Concurrency])
			}
			want := 0.0
			if tc.good {
				want = 1
			}
			// Every request decided was good (or every one missed). A cut
			// request older than any decided leaves its share open: the
			// bounds then say so, and the figure splits it as the decided
			// split (METHOD §6).
			if *s.Attainment != want {
				t.Errorf("%s: cell × %d attainment %v, want %v", tc.spec, c.Concurrency, *s.Attainment, want)
			}
			if lo, hi := s.AttainmentAtLeast, s.AttainmentAtMost; (lo == nil) != (hi == nil) || lo != nil && (tc.finish || *lo > want || *hi < want) {
				t.Errorf("%s: cell × %d attainment %v between %v and %v", tc.spec, c.Concurrency, *s.Attainment, lo, hi)
			}
			if tc.good && !tc.finish {
				// Every good request ran its 24 tokens inside the window.
				if s.GoodputReqPerSec <= 0 || math.Abs(s.GoodputTokPerSec-24*s.GoodputReqPerSec) > 1e-9 {
					t.Errorf("%s: goodput %v req/s, %v tok/s", tc.spec, s.GoodputReqPerSec, s.GoodputTokPerSec)
				}
			} else if !tc.good && (s.MostMissed != result.SLOTTFT || s.Missed[result.SLOTTFT] != s.Judged || s.GoodputReqPerSec != 0) {
				t.Errorf("%s: missed %v, most %q, goodput %v", tc.spec, s.Missed, s.MostMissed, s.GoodputReqPerSec)
			}
			judged += s.Judged
			good += s.Good
			cuts += cut[c.Concurrency]
			secs += c.MeasuredForSeconds
		}
		if !tc.finish && cuts == 0 {
			t.Errorf("%s: the windows' ends cut no request", tc.spec)
		}
		o := res.SLO.Overall
		if o.Judged != judged || o.Good != good || res.SLO.OverallCells != len(res.Decode) || math.Abs(o.GoodputReqPerSec-float64(good)/secs) > 1e-9 {
			t.Errorf("%s: overall %+v, want %d judged, %d good over %.2f s", tc.spec, o, judged, good, secs)
		}
		wantCap := 0
		if tc.good {
			wantCap = 2
		}
		if len(res.SLO.Capacity) != 1 || res.SLO.Capacity[0].Concurrency != wantCap {
			t.Errorf("%s: capacity %+v, want %d at context 0", tc.spec, res.SLO.Capacity, wantCap)
		}
	}
}

// cutInWindow counts the requests of a closed-loop cell that its window's
// end cut (sent in the window, still running at its end, or cancelled),
// and of those the ones with no token event by then and cut at most lim
// after they were sent: they could not have missed a TTFT objective of
// lim yet.
func cutInWindow(c CellRun, lim time.Duration) (cut, early int) {
	for _, r := range c.Records {
		if r.Sent < c.Window.Start || r.Sent >= c.Window.End {
			continue
		}
		if r.Outcome == record.OK && r.End < c.Window.End || r.Outcome.Failed() {
			continue // ended in the window
		}
		cut++
		at := min(r.End, c.Window.End)
		if arrived, _ := slices.BinarySearch(r.Arrivals, at+1); arrived == 0 && at-r.Sent <= lim {
			early++
		}
	}
	return cut, early
}

// delayForwarder passes TCP connections to upstream, holding every chunk
// a client sends for delay first: time a request spends outside the
// engine, which the TTFT split must find there.
func delayForwarder(t *testing.T, upstream string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close() // idle keep-alive connections would wait for the engine
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); c.Close() }()
			go func() {
				defer wg.Done()
				defer u.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestTTFTSplitKnownValues: against the fake (vLLM's histograms) behind a
// forwarder that holds every request 40 ms, with every request let run to
// its end (--finish-requests), the split's engine figures are exactly what
// the fake's ledger says of the window's requests, and the time outside
// the engine is at least the forwarder's 40 ms. Without it, the window's
// last requests are cut and the engine keeps no queue or prefill time of
// them: only its TTFT is shown, over the same requests as tokentap's, and
// the note says why.
func TestTTFTSplitKnownValues(t *testing.T) {
	t.Run("finished", func(t *testing.T) { ttftSplitKnownValues(t, true) })
	t.Run("cut", func(t *testing.T) { ttftSplitKnownValues(t, false) })
}

func ttftSplitKnownValues(t *testing.T, finish bool) {
	m := quickModel()
	m.TBTBase = 2 * time.Millisecond
	eng := fixtures.StartTest(t, m)
	const hold = 40 * time.Millisecond
	target := delayForwarder(t, strings.TrimPrefix(eng.URL(), "http://"), hold)
	var (
		mu   sync.Mutex
		runs []CellRun
	)
	sc := shortScenario()
	sc.MaxOutput = 200 // outlives the window: queue and prefill are read after the cancelled ones end
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: target}, Scenario: sc, FinishRequests: finish,
		OnCell: func(c CellRun) { mu.Lock(); runs = append(runs, c); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if len(runs) != 2 {
		t.Fatalf("%d cells ran", len(runs))
	}
	cutNotes := ""
	defer func() {
		if !finish && !strings.Contains(cutNotes, "only of the requests that finished") && !strings.Contains(cutNotes, "the engine counted") {
			t.Errorf("cut windows, and no note says why a figure is not shown: %q", cutNotes)
		}
	}()
	for _, run := range runs {
		c := res.Cell(run.Cell.Context, run.Cell.Concurrency)
		s := c.TTFTSplit
		if !finish {
			// Whatever is shown covers tokentap's requests, no part is
			// above the engine's TTFT, nor that above tokentap's. (A
			// request cut as its first token was made is one the engine
			// may count and the client not: then the TTFT is not shown
			// either, and the note says why.)
			if s == nil {
				t.Fatalf("cell × %d, cut: no split", c.Concurrency)
			}
			for _, p := range []*result.TTFTPart{s.Queue, s.Prefill, s.EngineTTFT} {
				if p != nil && (p.Requests != s.ClientRequests || (s.EngineTTFT != nil && p.Ms > s.EngineTTFT.Ms*1.05+1)) {
					t.Errorf("cell × %d, cut: part %+v of split %+v", c.Concurrency, p, s)
				}
			}
			if s.EngineTTFT != nil && s.EngineTTFT.Ms > s.ClientMs*1.05+1 {
				t.Errorf("cell × %d, cut: engine TTFT above tokentap's: %+v", c.Concurrency, s)
			}
			if s.Queue != nil && s.Queue.Requests != s.ClientRequests {
				t.Errorf("cell × %d, cut: queue over other requests: %+v", c.Concurrency, s)
			}
			cutNotes += s.Note
			continue
		}
		if s == nil || s.Queue == nil || s.Prefill == nil || s.EngineTTFT == nil || s.OutsideMs == nil {
			t.Fatalf("cell × %d: split %+v", c.Concurrency, s)
		}
		// The ledger's view of the same requests.
		var ttft, queue, prefill float64
		var n int
		for _, r := range run.Records {
			if !run.Window.Contains(r.Sent) || r.Events() == 0 {
				continue
			}
			le, ok := eng.LedgerEntryByID(r.ResponseID)
			if !ok {
				t.Fatalf("no ledger entry for %s", r.ResponseID)
			}
			n++
			ttft += float64(le.FirstToken.Sub(le.BodyRead)) / 1e6
			queue += float64(le.Admitted.Sub(le.Queued)) / 1e6
			prefill += float64(le.FirstToken.Sub(le.Admitted)) / 1e6
		}
		if s.ClientRequests != n || s.EngineTTFT.Requests != n || s.Queue.Requests != n || s.Prefill.Requests != n || s.Note != "" {
			t.Errorf("cell × %d: counts client %d, engine %d/%d/%d, ledger %d; note %q", c.Concurrency, s.ClientRequests,
				s.EngineTTFT.Requests, s.Queue.Requests, s.Prefill.Requests, n, s.Note)
		}
		for _, p := range []struct {
			name      string
			got, want float64
		}{{"engine TTFT", s.EngineTTFT.Ms, ttft / float64(n)}, {"queue", s.Queue.Ms, queue / float64(n)}, {"prefill", s.Prefill.Ms, prefill / float64(n)}} {
			if math.Abs(p.got-p.want) > 0.001 {
				t.Errorf("cell × %d: %s %.4f ms, the ledger says %.4f ms", c.Concurrency, p.name, p.got, p.want)
			}
		}
		// Prefill is the fake's 20 ms first-event delay (the prompt is
		// cached); the forwarder's hold is outside.
		if s.Prefill.Ms < 20 || *s.OutsideMs < float64(hold/time.Millisecond) || *s.OutsideMs > 40+500 {
			t.Errorf("cell × %d: prefill %.1f ms, outside %.1f ms; want ≥ 20 and 40 ms + loopback", c.Concurrency, s.Prefill.Ms, *s.OutsideMs)
		}
		if math.Abs(s.ClientMs-*s.OutsideMs-s.EngineTTFT.Ms) > 1e-9 || !strings.Contains(s.EngineTTFT.Source, "vllm:time_to_first_token_seconds") {
			t.Errorf("cell × %d: client %.3f ≠ outside %.3f + engine %.3f, or source %q", c.Concurrency, s.ClientMs, *s.OutsideMs, s.EngineTTFT.Ms, s.EngineTTFT.Source)
		}
	}
	for _, n := range res.Notes {
		if strings.Contains(n, "not split") {
			t.Errorf("note %q with every cell split", n)
		}
	}
}

// llama3Config is Meta-Llama-3-8B's config.json, the fields that matter.
const llama3Config = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
 "num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"torch_dtype":"bfloat16","tie_word_embeddings":false}`

// TestDecodeLimit: given the bandwidth and a config.json, every measured
// cell gets the limit for its average active requests and mean sequence
// length, and its share; the fake's cache_dtype "auto" is the config's
// bfloat16. Without them, no cell gets one and a note says what is
// missing.
func TestDecodeLimit(t *testing.T) {
	eng := fixtures.StartTest(t, quickModel())
	shape, err := bandwidth.FromHFConfig([]byte(llama3Config))
	if err != nil {
		t.Fatal(err)
	}
	sc := shortScenario()
	sc.Contexts = []int{0, 512}
	var (
		mu   sync.Mutex
		runs = map[[2]int]CellRun{}
	)
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: sc,
		Limits: Limits{GPU: bandwidth.GPUBandwidth{GBPerSec: 360, From: "flag"}, Told: []bandwidth.Told{{Shape: shape, WeightFrom: "cfg", ShapeFrom: "cfg"}}},
		OnCell: func(c CellRun) { mu.Lock(); runs[[2]int{c.Cell.Context, c.Cell.Concurrency}] = c; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Bandwidth
	if b == nil || len(b.Missing) > 0 || b.WeightBytes != 2*8_030_261_248 || b.KVDType != "bfloat16" || b.KVBytesPerToken != 131072 ||
		!strings.Contains(b.KVDTypeSource, "cache_dtype") {
		t.Fatalf("bandwidth inputs %+v", b)
	}
	in, _ := bandwidth.FromResult(b)
	for _, c := range res.Decode {
		d := c.DecodeLimit
		if d == nil {
			t.Fatalf("cell %d × %d has no limit", c.Context, c.Concurrency)
		}
		run := runs[[2]int{c.Context, c.Concurrency}]
		seq := cellSeq(run)
		if d.Batch != c.AvgActive || math.Abs(d.SeqTokens-seq) > 1e-9 || d.SeqTokens < float64(c.Context) {
			t.Errorf("cell %d × %d: batch %v (active %v), seq %v (records say %v)", c.Context, c.Concurrency, d.Batch, c.AvgActive, d.SeqTokens, seq)
		}
		// A step reads the weights less the untied input table
		// (128,256 × 4,096 × 2 = 1,050,673,152 bytes): 15,009,849,344.
		want := 360e9 * c.AvgActive / (15_009_849_344 + c.AvgActive*seq*131072)
		if math.Abs(d.BandwidthLimitTokPerSec-want) > 1e-9*want || math.Abs(d.BandwidthLimitTokPerSec-in.Limit(c.AvgActive, seq)) > 1e-9 ||
			math.Abs(d.ShareOfBandwidthLimit-c.TotalTokPerSec/want) > 1e-9 {
			t.Errorf("cell %d × %d: limit %+v, want %.3f tok/s", c.Context, c.Concurrency, d, want)
		}
	}

	// Nothing given: the fake's simulated GPU has no bandwidth, and its
	// model says no size.
	res, err = Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: shortScenario(),
		Hardware: result.Hardware{GPU: "simulated, shaped like an RTX 3060", VRAM: "12 GB (simulated)"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Decode {
		if c.DecodeLimit != nil {
			t.Errorf("cell × %d has a limit with inputs missing", c.Concurrency)
		}
	}
	note := strings.Join(res.Notes, "\n")
	for _, want := range []string{"simulated", "model weight bytes", "KV cache layout", "the model's own dtype"} {
		if !strings.Contains(note, want) {
			t.Errorf("notes do not say %q is missing:\n%s", want, note)
		}
	}
}

// cellSeq is MeanSeqTokens computed here by hand: every token of the
// window at its request's prompt plus the tokens before it.
func cellSeq(run CellRun) float64 {
	var sum, n float64
	for _, r := range run.Records {
		before := 0
		for j, at := range r.Arrivals {
			k := r.EventTokens(j)
			for x := 0; x < k; x++ {
				if run.Window.Contains(at) {
					sum += float64(r.PromptTokens + before)
					n++
				}
				before++
			}
		}
	}
	return sum / n
}

// TestDecodeLimitFromLlamaCpp: against the llama.cpp flavour, the weights'
// bytes come from /v1/models meta.size, the KV layout from the GGUF file
// /props names (tinygguf's, on this machine), the KV dtype from the launch
// command's default; only the bandwidth is given.
func TestDecodeLimitFromLlamaCpp(t *testing.T) {
	cfg := tinygguf.Default()
	cfg.Words = []string{"alpha", "beta", "gamma"}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	var buf bytes.Buffer
	if err := tinygguf.Write(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	m := quickModel()
	m.Flavor, m.Slots, m.KVCapacity = fixtures.FlavorLlamaCpp, 2, 8192
	m.LlamaCpp.WeightBytes, m.LlamaCpp.ModelPath = cfg.WeightBytes(), path
	eng := fixtures.StartTest(t, m)
	res, err := Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: shortScenario(),
		Engine: result.Engine{LaunchCommand: "llama-server -m tiny.gguf -np 2 --metrics"},
		Limits: Limits{GPU: bandwidth.GPUBandwidth{GBPerSec: 100, From: "flag"}, ReadModelFile: true}})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Bandwidth
	if b == nil || len(b.Missing) > 0 || b.WeightBytes != cfg.WeightBytes() || b.Layers != cfg.Layers || b.KVHeads != cfg.KVHeads ||
		b.HeadDim != cfg.HeadDim() || b.KVBytesPerToken != float64(cfg.KVBytesPerToken()) || b.KVDType != "f16" ||
		!strings.Contains(b.WeightSource, "meta.size") || !strings.Contains(b.ShapeSource, "GGUF metadata of "+path) ||
		!strings.Contains(b.KVDTypeSource, "llama.cpp's default") {
		t.Fatalf("inputs %+v", b)
	}
	for _, c := range res.Decode {
		if c.DecodeLimit == nil {
			t.Errorf("cell × %d: no limit", c.Concurrency)
		}
	}
	// Not on this machine: the file is not read, and the note says why.
	res, err = Run(context.Background(), Config{Target: replay.Target{BaseURL: eng.URL()}, Scenario: shortScenario(),
		Limits: Limits{GPU: bandwidth.GPUBandwidth{GBPerSec: 100, From: "flag"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Notes, " "), "only where the engine runs on this one") {
		t.Errorf("notes %q", res.Notes)
	}
}
