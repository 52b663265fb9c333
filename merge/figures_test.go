package merge

import (
	"math"
	"testing"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
)

func share(v float64) *float64 { return &v }

// TestMergeBeyondFigures: a sharded run with SLOs and a bandwidth limit
// merges into one whose SLO counts add up, whose goodput is the shards'
// together, whose run totals and capacity come from the merged cells, whose
// decode limit is computed at the merged batch, and whose percentiles are
// read from the merged histograms; the shards' documents stay as they were.
func TestMergeBeyondFigures(t *testing.T) {
	bw := &result.Bandwidth{GBPerSec: 360, GBPerSecSource: "--gpu-bandwidth", WeightBytes: 4_900_000_000, WeightSource: "--weight-bytes",
		Layers: 32, KVHeads: 8, HeadDim: 128, ShapeSource: "--layers", KVDType: "f16", KVBytesPerElem: 2, KVDTypeSource: "--kv-dtype", KVBytesPerToken: 131072}
	spec := result.SLOSpec{Text: "ttft=500ms", TTFTms: 500, Target: 0.9}
	var docs []*result.Result
	for i, f := range []struct {
		judged, good int
		seq          float64
	}{{10, 10, 1000}, {10, 8, 2000}, {10, 9, 3000}} {
		d := full(i, 3, 7)
		d.SLO = &result.SLORun{Spec: spec, Overall: result.SLO{Judged: 99}}
		d.Bandwidth = bw
		c := &d.Decode[0]
		c.TTFTKind = result.TTFTWarm
		c.SLO = &result.SLO{Judged: f.judged, Good: f.good, Attainment: share(float64(f.good) / float64(f.judged)),
			GoodputReqPerSec: float64(f.good) / 10, GoodputTokPerSec: float64(f.good) * 8, Missed: map[string]int{result.SLOTTFT: f.judged - f.good}}
		c.DecodeLimit = &result.DecodeLimit{BandwidthLimitTokPerSec: 1, ShareOfBandwidthLimit: 1, Batch: c.AvgActive, SeqTokens: f.seq}
		c.TTFTSplit = &result.TTFTSplit{ClientMs: 40, ClientRequests: 3}
		docs = append(docs, d)
	}
	m, _, err := Runs(inputs(docs...))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Decode[0]
	s := c.SLO
	if s == nil || s.Judged != 30 || s.Good != 27 || s.Attainment == nil || math.Abs(*s.Attainment-0.9) > 1e-12 ||
		math.Abs(s.GoodputReqPerSec-2.7) > 1e-9 || s.Missed[result.SLOTTFT] != 3 || s.MostMissed != result.SLOTTFT {
		t.Errorf("merged cell SLO %+v", s)
	}
	if o := m.SLO.Overall; o.Judged != 30 || o.Good != 27 || docs[0].SLO.Overall.Judged != 99 {
		t.Errorf("run SLO %+v (shard 0's kept %+v)", o, docs[0].SLO.Overall)
	}
	if len(m.SLO.Capacity) != 1 || m.SLO.Capacity[0].Concurrency != 7 {
		t.Errorf("capacity %+v: the merged cell met the 90%% target", m.SLO.Capacity)
	}
	// The mean context weighs each shard's by the tokens it decoded (its
	// share: 3, 2 and 2 requests).
	var seq, tokens float64
	for _, d := range docs {
		seq += d.Decode[0].DecodeLimit.SeqTokens * float64(d.Decode[0].OutputTokens)
		tokens += float64(d.Decode[0].OutputTokens)
	}
	seq /= tokens
	in, _ := bandwidth.FromResult(bw)
	if d := c.DecodeLimit; d == nil || d.Batch != c.AvgActive || math.Abs(d.SeqTokens-seq) > 1e-9 || seq >= 2000 ||
		math.Abs(d.BandwidthLimitTokPerSec-in.Limit(c.AvgActive, seq)) > 1e-9 {
		t.Errorf("merged decode limit %+v at batch %v", d, c.AvgActive)
	}
	if c.TTFTSplit != nil || c.TTFTKind != result.TTFTWarm || c.Percentiles == nil {
		t.Errorf("merged split %+v, TTFT kind %q, percentiles %+v", c.TTFTSplit, c.TTFTKind, c.Percentiles)
	}
	// Per-response timings are each request's own: the shards' splits
	// merge, means weighted by their requests (3 at 40/30 ms, and 1 at
	// 80/60 ms on each of the other two: 56 and 42 ms over 5).
	for i, f := range []struct {
		n             int
		client, parts float64
	}{{3, 40, 30}, {1, 80, 60}, {0, 0, 0}} {
		docs[i].Decode[0].TTFTSplit = nil
		if f.n > 0 {
			docs[i].Decode[0].TTFTSplit = (&result.TTFTSplit{ClientMs: f.client, ClientRequests: f.n, Over: result.OverTimed,
				Prefill: &result.TTFTPart{Ms: f.parts, Requests: f.n, Source: "timings.prompt_ms"}}).Finish()
		}
	}
	docs[2].Decode[0].TTFTSplit = docs[1].Decode[0].TTFTSplit
	m, _, err = Runs(inputs(docs...))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Decode[0].TTFTSplit; s == nil || s.ClientRequests != 5 || math.Abs(s.ClientMs-(120+160)/5.0) > 1e-9 || math.Abs(s.Prefill.Ms-(90+120)/5.0) > 1e-9 || s.UnaccountedMs == nil {
		t.Errorf("merged per-response split %+v", s)
	}
	if err := schematest.Result(m); err != nil {
		t.Error(err)
	}
	for _, d := range docs {
		if err := schematest.Result(d); err != nil {
			t.Errorf("shard document: %v", err)
		}
	}
}

// TestMergeMoELimit: a merged run's limit is computed again from the
// inputs the document keeps, a mixture of experts' and sliding windows'
// among them (gpt-oss-20b: 13,761,264,768 bytes of weights, of which the
// input table 1,158,266,880 and the routed experts 10,165,616,640 are not
// read whole; 32 experts, 4 per token; 24,576 KV bytes per token on the
// full layers and as many within 128 tokens on the sliding ones).
func TestMergeMoELimit(t *testing.T) {
	bw := &result.Bandwidth{GBPerSec: 360, GBPerSecSource: "--gpu-bandwidth", WeightBytes: 13_761_264_768, WeightSource: "--model-config",
		InputEmbeddingBytes: 1_158_266_880, MoE: &result.MoELimit{Experts: 32, ExpertsPerToken: 4, Layers: 24, ExpertBytes: 10_165_616_640},
		KVLayout: "12 full-attention layers; 12 sliding-window layers (128 tokens)", ShapeSource: "--model-config", KVDType: "bfloat16",
		KVBytesPerElem: 2, KVDTypeSource: "auto", KVBytesPerToken: 24_576, SlidingWindow: 128, WindowKVBytesPerToken: 24_576}
	var docs []*result.Result
	for i, seq := range []float64{1000, 3000} {
		d := full(i, 2, 4)
		d.Bandwidth = bw
		c := &d.Decode[0]
		c.DecodeLimit = &result.DecodeLimit{BandwidthLimitTokPerSec: 1, ShareOfBandwidthLimit: 1, Batch: c.AvgActive, SeqTokens: seq}
		docs = append(docs, d)
	}
	m, _, err := Runs(inputs(docs...))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Decode[0]
	d := c.DecodeLimit
	if d == nil {
		t.Fatal("no merged limit")
	}
	// Dense 13,761,264,768 − 1,158,266,880 − 10,165,616,640 =
	// 2,437,381,248; one expert over the layers 10,165,616,640 / 32 =
	// 317,675,520; 32 × (1 − (28/32)^b) experts touched.
	b, seq := d.Batch, d.SeqTokens
	want := 360e9 * b / (2_437_381_248 + 317_675_520*32*(1-math.Pow(28.0/32, b)) + b*(seq*24_576+math.Min(seq, 128)*24_576))
	if math.Abs(d.BandwidthLimitTokPerSec-want) > 1e-9*want || seq <= 1000 || seq >= 3000 {
		t.Errorf("merged limit %+v, want %.3f tok/s", d, want)
	}
	if err := schematest.Result(m); err != nil {
		t.Error(err)
	}
}
