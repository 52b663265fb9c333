package tinygguf

import "math"

// f16 returns the IEEE 754 half-precision bits nearest to v (ties to even),
// as ggml stores GGML_TYPE_F16. Values beyond half's range become ±Inf and
// NaN stays NaN; the generator only makes values that half holds exactly,
// so rounding never happens in practice, but the conversion is exact anyway.
func f16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0 && mant == 0:
		return sign
	}
	// Unbiased exponent; float32 subnormals are far below half's range.
	e := exp - 127
	if exp == 0 {
		return sign
	}
	m := mant | 0x800000 // 24 significant bits
	var shift int        // bits of m to drop
	var he uint32        // half's biased exponent
	if e >= -14 {
		shift = 13
		he = uint32(e + 15)
	} else {
		// Half subnormal: the value is m·2^(e-23) = q·2^-24.
		shift = 13 + (-14 - e)
		he = 0
		if shift > 25 {
			return sign // rounds to zero
		}
	}
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	if he == 0 {
		// q ≤ 0x400 here; 0x400 is the smallest normal, which the
		// encoding below yields naturally.
		return sign | uint16(q)
	}
	// q holds the implicit bit (0x400); a carry to 0x800 bumps the exponent.
	if q >= 0x800 {
		q >>= 1
		he++
	}
	if he >= 0x1f {
		return sign | 0x7c00
	}
	return sign | uint16(he<<10) | uint16(q&0x3ff)
}
