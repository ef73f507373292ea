package safetensors

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// The references below compute values from the IEEE 754 definitions in
// float64 (math.Ldexp) and round by searching the table of representable
// values, independently of the bit manipulation in dtype.go.

// refF16 is the value of a binary16 bit pattern: (−1)^s × 2^(e−15) × 1.m,
// or 2^(−14) × 0.m for e = 0.
func refF16(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return s * math.Inf(1)
	case 0:
		return s * math.Ldexp(m, -24)
	}
	return s * math.Ldexp(1024+m, e-25)
}

// refBF16 is the value of a bfloat16 bit pattern (8 exponent bits like
// float32, 7 mantissa bits).
func refBF16(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>7) & 0xff
	m := float64(h & 0x7f)
	switch e {
	case 0xff:
		if m != 0 {
			return math.NaN()
		}
		return s * math.Inf(1)
	case 0:
		return s * math.Ldexp(m, -133)
	}
	return s * math.Ldexp(128+m, e-134)
}

// rounder rounds to the nearest entry of a table of the non-negative finite
// values of a 16-bit format, in increasing order, extended by one entry for
// Inf whose value is where the next binade would start, which yields IEEE
// overflow: values at or past the midpoint to it round to Inf (ties go to
// the even pattern, and Inf's pattern is even). Ties go to the even bit pattern.
type rounder struct {
	vals []float64
	bits []uint16
}

func newRounder(ref func(uint16) float64, inf uint16, infAt float64) rounder {
	var r rounder
	for h := uint16(0); h < inf; h++ {
		r.vals = append(r.vals, ref(h))
		r.bits = append(r.bits, h)
	}
	r.vals = append(r.vals, infAt)
	r.bits = append(r.bits, inf)
	return r
}

func (r rounder) round(x float32) uint16 {
	v := float64(x)
	sign := uint16(0)
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	last := len(r.vals) - 1
	if v >= r.vals[last] {
		return sign | r.bits[last]
	}
	i := sort.SearchFloat64s(r.vals, v) // first index with vals[i] >= v
	if r.vals[i] == v {
		return sign | r.bits[i]
	}
	lo, hi := i-1, i
	dl, dh := v-r.vals[lo], r.vals[hi]-v // exact: both operands have ≤ 24 significant bits
	switch {
	case dl < dh:
		return sign | r.bits[lo]
	case dh < dl:
		return sign | r.bits[hi]
	case r.bits[lo]&1 == 0:
		return sign | r.bits[lo]
	}
	return sign | r.bits[hi]
}

func sameFloat(a float32, b float64) bool {
	if math.IsNaN(b) {
		return a != a
	}
	return float64(a) == b && math.Signbit(float64(a)) == math.Signbit(b)
}

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if got, want := f16ToF32(h), refF16(h); !sameFloat(got, want) {
			t.Fatalf("f16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if got, want := bf16ToF32(h), refBF16(h); !sameFloat(got, want) {
			t.Fatalf("bf16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

// narrowCases returns float32 inputs that exercise rounding: every
// representable value of the narrow format, every midpoint between neighbours
// and the float32 values on either side of it, the subnormal range, values
// around overflow, and random bit patterns.
func narrowCases(r rounder) []float32 {
	var xs []float32
	for i, v := range r.vals {
		xs = append(xs, float32(v))
		if i+1 < len(r.vals) {
			mid := float32((v + r.vals[i+1]) / 2) // exact: one more bit than the format
			xs = append(xs, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	xs = append(xs, 0, float32(math.Inf(1)), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-30, 65519.99, 65520, 65536)
	n := len(xs)
	for i := range n {
		xs = append(xs, -xs[i])
	}
	return xs
}

func TestF32ToF16Rounding(t *testing.T) {
	// Inf sits where exponent 31 would start: 2^16.
	r := newRounder(refF16, 0x7c00, 65536)
	for _, x := range narrowCases(r) {
		if x != x {
			continue
		}
		if got, want := f32ToF16(x), r.round(x); got != want {
			t.Fatalf("f32ToF16(%g [%#08x]) = %#04x (%g), want %#04x (%g)",
				x, math.Float32bits(x), got, refF16(got), want, refF16(want))
		}
	}
}

func TestF32ToBF16Rounding(t *testing.T) {
	// Inf sits where exponent 255 would start: 2^128.
	r := newRounder(refBF16, 0x7f80, math.Ldexp(1, 128))
	for _, x := range narrowCases(r) {
		if x != x {
			continue
		}
		if got, want := f32ToBF16(x), r.round(x); got != want {
			t.Fatalf("f32ToBF16(%g [%#08x]) = %#04x (%g), want %#04x (%g)",
				x, math.Float32bits(x), got, refBF16(got), want, refBF16(want))
		}
	}
}

func TestNarrowSpecials(t *testing.T) {
	nan := math.Float32frombits(0x7fc00000)
	tinyPayloadNaN := math.Float32frombits(0x7f800001) // payload lost by truncation
	negNaN := math.Float32frombits(0xffc00000)
	cases := []struct {
		name     string
		x        float32
		f16, b16 uint16
		nan      bool
	}{
		{"+0", 0, 0x0000, 0x0000, false},
		{"-0", float32(math.Copysign(0, -1)), 0x8000, 0x8000, false},
		{"+inf", float32(math.Inf(1)), 0x7c00, 0x7f80, false},
		{"-inf", float32(math.Inf(-1)), 0xfc00, 0xff80, false},
		{"1", 1, 0x3c00, 0x3f80, false},
		{"-2", -2, 0xc000, 0xc000, false},
		// 65504 lies between bf16 65280 (0x477f) and 65536 (0x4780), nearer 65536.
		{"f16 max", 65504, 0x7bff, 0x4780, false},
		{"f16 smallest subnormal", float32(math.Ldexp(1, -24)), 0x0001, 0x3380, false},
		{"half of smallest f16 subnormal ties to 0", float32(math.Ldexp(1, -25)), 0x0000, 0x3300, false},
		{"f32 max overflows", math.MaxFloat32, 0x7c00, 0x7f80, false},
		{"nan", nan, 0, 0, true},
		{"nan with low payload", tinyPayloadNaN, 0, 0, true},
		{"negative nan", negNaN, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, b := f32ToF16(c.x), f32ToBF16(c.x)
			if c.nan {
				if v := f16ToF32(h); v == v {
					t.Errorf("f16 of NaN = %#04x, not NaN", h)
				}
				if v := bf16ToF32(b); v == v {
					t.Errorf("bf16 of NaN = %#04x, not NaN", b)
				}
				if math.Signbit(float64(c.x)) != (h&0x8000 != 0) || math.Signbit(float64(c.x)) != (b&0x8000 != 0) {
					t.Errorf("NaN sign lost: f16 %#04x bf16 %#04x", h, b)
				}
				return
			}
			if h != c.f16 {
				t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.x, h, c.f16)
			}
			if b != c.b16 {
				t.Errorf("f32ToBF16(%g) = %#04x, want %#04x", c.x, b, c.b16)
			}
		})
	}
}
