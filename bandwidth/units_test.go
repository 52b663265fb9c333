package bandwidth

import (
	"math"
	"testing"
)

func TestParseBandwidthAndBytes(t *testing.T) {
	bw := []struct {
		in   string
		want float64
	}{{"360GB/s", 360e9}, {"3.35 TB/s", 3.35e12}, {"1 GiB/s", 1 << 30}, {"936gbps", 936e9}}
	for _, tt := range bw {
		got, err := ParseBandwidth(tt.in)
		if err != nil || math.Abs(got-tt.want) > 1 {
			t.Errorf("ParseBandwidth(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"360", "fast", "-1GB/s", "0GB/s", "360XB/s", ""} {
		if _, err := ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q) accepted", in)
		}
	}
	by := []struct {
		in   string
		want int64
	}{{"4.9GB", 4_900_000_000}, {"4.9 G", 4_900_000_000}, {"8 GiB", 8 << 30}, {"4900000000", 4_900_000_000}, {"9.2MB", 9_200_000}}
	for _, tt := range by {
		got, err := ParseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "GB", "-4GB", "4XB", "1e300GB", "0.0001B"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
	if got := FormatBytes(16_060_522_496); got != "16.1 GB" {
		t.Errorf("FormatBytes = %q", got)
	}
}

func TestDTypeBytes(t *testing.T) {
	for name, want := range map[string]float64{"f16": 2, "bfloat16": 2, "FP8": 1, "fp8_e4m3": 1, "float32": 4, "q8_0": 34.0 / 32, "q4_0": 18.0 / 32} {
		if got, ok := DTypeBytes(name); !ok || got != want {
			t.Errorf("DTypeBytes(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"auto", "", "q3_k"} {
		if _, ok := DTypeBytes(name); ok {
			t.Errorf("DTypeBytes(%q) known", name)
		}
	}
}

// FuzzParseSizes: the size and bandwidth parsers never panic and never
// give a non-positive value without an error.
func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"360GB/s", "4.9GB", "1e3", "8 GiB", "-1", "0.0001B", "9e18TB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseBytes(s); err == nil && v <= 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, v)
		}
		if v, err := ParseBandwidth(s); err == nil && !(v > 0) {
			t.Fatalf("ParseBandwidth(%q) = %v", s, v)
		}
	})
}
