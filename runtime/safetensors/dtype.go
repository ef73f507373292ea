package safetensors

import "math"

// DType is a tensor element type, spelled as in the safetensors header.
type DType string

// The element types this package reads and writes.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	F64  DType = "F64"
	I32  DType = "I32"
	I64  DType = "I64"
	U8   DType = "U8"
	BOOL DType = "BOOL"
)

// Size returns the number of bytes of one element, or 0 for an unknown DType.
func (d DType) Size() int {
	switch d {
	case U8, BOOL:
		return 1
	case F16, BF16:
		return 2
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	}
	return 0
}

// Valid reports whether d is one of the element types this package handles.
func (d DType) Valid() bool { return d.Size() != 0 }

// IsFloat reports whether d is a floating-point type (convertible by Float32s).
func (d DType) IsFloat() bool {
	switch d {
	case F32, F16, BF16, F64:
		return true
	}
	return false
}

// bf16ToF32 widens a bfloat16 bit pattern: bfloat16 is the top half of a float32,
// so the conversion is exact.
func bf16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// f32ToBF16 narrows to bfloat16 with round-to-nearest-even. NaNs stay NaNs (the
// quiet bit is forced so that truncating the payload cannot turn one into Inf).
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	// Adding 0x7fff rounds halfway cases down, plus the kept LSB rounds them to even;
	// carries propagate into the exponent, so the largest finite values become Inf.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f16ToF32 widens an IEEE 754 binary16 bit pattern; every binary16 value,
// subnormals included, is exactly representable in float32.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN: keep the payload.
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		// Zero or subnormal: mant × 2⁻²⁴, a normal float32.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	default:
		// Rebias the exponent from 15 to 127.
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// f32ToF16 narrows to IEEE 754 binary16 with round-to-nearest-even, producing
// subnormals below 2⁻¹⁴, Inf on overflow, and a quiet NaN for NaN.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13)
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 {
		// Normal: keep 10 of 23 mantissa bits. A carry out of the mantissa
		// bumps the exponent, and from the largest exponent yields Inf (0x7c00).
		h := uint32(e)<<10 | mant>>13
		rem := mant & 0x1fff
		if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	// Subnormal result in units of 2⁻²⁴: the value is m × 2^(exp−150), so the
	// shift is 126 − exp (float32 subnormals behave as exp = 1 without the
	// implicit bit).
	m := mant | 0x800000
	if exp == 0 {
		m = mant
		exp = 1
	}
	shift := uint32(126 - exp)
	if shift >= 26 {
		// m < 2²⁴ ≤ half a unit: rounds to zero.
		return sign
	}
	h := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && h&1 == 1) {
		h++ // may carry into the smallest normal, which is the right bit pattern
	}
	return sign | uint16(h)
}
