package tinygguf

import (
	"math"
	"testing"
)

// f16ToFloat32 is f16's inverse: the float32 a half's bits stand for.
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

func TestF16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds up past the largest half
		{1e6, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{0.1, 0x2e66},
		{1.0 / 3, 0x3555},
		{1 + 1.0/2048, 0x3c00},           // tie, to even
		{1 + 3.0/2048, 0x3c02},           // tie, to even
		{6.103515625e-05, 0x0400},        // smallest normal
		{5.960464477539063e-08, 0x0001},  // smallest subnormal
		{2.9802322387695312e-08, 0x0000}, // half of it: tie to even, 0
		{4.470348358154297e-08, 0x0001},  // 0.75 of it
		{6.097555160522461e-05, 0x03ff},  // largest subnormal
		{6.1005353927612305e-05, 0x0400}, // tie between it and the smallest normal, to even
	}
	for _, tt := range tests {
		if got := f16(tt.in); got != tt.want {
			t.Errorf("f16(%g) = %#04x; want %#04x", tt.in, got, tt.want)
		}
	}
	if got := f16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("f16(NaN) = %#04x; not a NaN", got)
	}
	// Every finite half survives the round trip.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := f16(f16ToFloat32(uint16(h))); got != uint16(h) {
			t.Fatalf("f16(f16ToFloat32(%#04x)) = %#04x", h, got)
		}
	}
}
