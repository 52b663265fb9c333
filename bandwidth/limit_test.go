package bandwidth

import (
	"math"
	"testing"
)

// llama3KV is Llama-3-8B's KV cache per token at float16, by hand:
// 2 (key, value) × 32 layers × 8 KV heads × 128 dims × 2 bytes.
const llama3KV = 2 * 32 * 8 * 128 * 2 // 131,072 bytes

// TestLimitHandComputed checks the arithmetic against cases worked by
// hand: an 8B model quantized to 4.9 GB on a 360 GB/s card (RTX 3060).
func TestLimitHandComputed(t *testing.T) {
	in := Inputs{BytesPerSec: 360e9, WeightBytes: 4.9e9, KVBytesPerToken: llama3KV}
	tests := []struct {
		name       string
		batch, seq float64
		want       float64 // worked by hand
	}{
		// 360 / 4.9 = 73.469…: at most 73 tok/s for one stream.
		{"one stream, empty context", 1, 0, 360.0 / 4.9},
		// 8,192 × 131,072 = 1,073,741,824 bytes of KV: 360 / (4.9 + 1.0737) = 60.26…
		{"one stream at 8K", 1, 8192, 360e9 / (4.9e9 + 1073741824)},
		// 8 streams at 8K: 360 × 8 / (4.9 + 8 × 1.0737) = 213.49…
		{"8 streams at 8K", 8, 8192, 2880e9 / (4.9e9 + 8*1073741824)},
		// 16 streams, empty: the weights are read once per step for all 16.
		{"16 streams, empty", 16, 0, 360 * 16 / 4.9},
		// A fractional average batch.
		{"2.5 active at 1K", 2.5, 1024, 360e9 * 2.5 / (4.9e9 + 2.5*1024*llama3KV)},
	}
	for _, tt := range tests {
		got := in.Limit(tt.batch, tt.seq)
		if math.Abs(got-tt.want) > 1e-9*tt.want {
			t.Errorf("%s: limit %.6f tok/s, want %.6f", tt.name, got, tt.want)
		}
	}
	if got := in.Limit(1, 0); math.Floor(got) != 73 {
		t.Errorf("8B at 4.9 GB on 360 GB/s: %.2f tok/s, want ≤ 73 (73.47)", got)
	}
	if got := in.Limit(1, 8192); math.Floor(got) != 60 {
		t.Errorf("… with 8K of KV: %.2f tok/s, want 60.26", got)
	}
	// Missing or meaningless inputs give no limit, never a guess.
	for _, bad := range []struct {
		in         Inputs
		batch, seq float64
	}{{Inputs{WeightBytes: 1e9}, 1, 0}, {Inputs{BytesPerSec: 1e9}, 1, 0}, {in, 0, 0}, {in, 1, -1}} {
		if got := bad.in.Limit(bad.batch, bad.seq); got != 0 {
			t.Errorf("Limit(%+v, %v, %v) = %v, want 0", bad.in, bad.batch, bad.seq, got)
		}
	}
	f := in.Figures(50, 1, 0)
	if f == nil || math.Abs(f.ShareOfBandwidthLimit-50/(360/4.9)) > 1e-12 || f.Batch != 1 || f.SeqTokens != 0 {
		t.Errorf("Figures = %+v", f)
	}
	if KVBytesPerToken(32, 8, 128, 2, 2) != llama3KV {
		t.Errorf("KVBytesPerToken(32, 8, 128, f16) = %v, want %d", KVBytesPerToken(32, 8, 128, 2, 2), llama3KV)
	}
}
