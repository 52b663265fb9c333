package bandwidth

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// DTypeBytes is the bytes one element of a KV cache or weight dtype takes,
// as engines name them: f32, f16/fp16/float16/half, bf16/bfloat16, fp8
// (and its e4m3/e5m2 forms), int8, and llama.cpp's cache types q8_0, q5_1,
// q5_0, q4_1, q4_0 and iq4_nl (block formats: 32 elements and their
// scales). ok is false for a name it does not know, and for "auto", which
// means the model's own dtype.
func DTypeBytes(name string) (bytes float64, ok bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "f32", "fp32", "float32", "float":
		return 4, true
	case "f16", "fp16", "float16", "half", "bf16", "bfloat16":
		return 2, true
	case "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "fp8_inc", "f8", "float8_e4m3fn", "float8_e5m2", "int8", "i8", "q8":
		return 1, true
	case "q8_0":
		return 34.0 / 32, true
	case "q5_1":
		return 24.0 / 32, true
	case "q5_0":
		return 22.0 / 32, true
	case "q4_1":
		return 20.0 / 32, true
	case "q4_0", "iq4_nl":
		return 18.0 / 32, true
	}
	return 0, false
}

// ParseBandwidth reads a memory bandwidth with its unit: "360GB/s",
// "3.35 TB/s", "900GiB/s", "360 GB/s". GB and TB are decimal (as vendors
// state bandwidth), GiB and TiB binary. A bare number is an error: say
// the unit.
func ParseBandwidth(s string) (bytesPerSec float64, err error) {
	t := strings.TrimSpace(s)
	low := strings.ToLower(strings.ReplaceAll(t, " ", ""))
	if !strings.HasSuffix(low, "/s") && !strings.HasSuffix(low, "ps") {
		return 0, fmt.Errorf("bandwidth %q: want a number with a unit per second, e.g. 360GB/s or 3.35TB/s", s)
	}
	low = strings.TrimSuffix(strings.TrimSuffix(low, "/s"), "ps")
	v, err := ParseBytes(low)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q: want a number with a unit per second, e.g. 360GB/s or 3.35TB/s", s)
	}
	return float64(v), nil
}

// ParseBytes reads a size: a plain number of bytes, or one with a unit
// (KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB binary; B optional: "4.9G"
// is 4.9 GB), e.g. "4.9GB", "8.03 GiB", "4900000000".
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), " ", ""))
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' && r != 'e' && r != '+' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], t[i:]
	}
	// "e" may also start an exponent; "5e9" parses as a number.
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, e.g. 4.9GB", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
	}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)", s, unit)
	}
	b := math.Round(v * m)
	switch {
	case b >= 1<<62:
		return 0, fmt.Errorf("size %q is too large", s)
	case b < 1:
		return 0, fmt.Errorf("size %q is less than a byte", s)
	}
	return int64(b), nil
}

// FormatBytes shows a size in decimal units, as vendors and engines state
// model sizes: "4.9 GB", "16.06 GB", "9.2 MB".
func FormatBytes(b float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	prec := 2
	if b >= 100 || i == 0 {
		prec = 0
	} else if b >= 10 {
		prec = 1
	}
	return strconv.FormatFloat(b, 'f', prec, 64) + " " + units[i]
}
