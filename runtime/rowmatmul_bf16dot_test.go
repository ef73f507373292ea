package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Of is the bfloat16 bits of v truncated (exact for the values the tests build).
func bf16Of(v float32) uint16 { return uint16(math.Float32bits(v) >> 16) }

// randBF16 draws bfloat16 bits of one of several kinds: ordinary values, values whose products
// land near float32's smallest normal, denormals, zeros, infinities, NaNs with payloads,
// anything.
func randBF16(rng *rand.Rand) uint16 {
	sign := uint16(rng.IntN(2)) << 15
	switch rng.IntN(16) {
	case 0:
		return sign | uint16(rng.IntN(128)) // a denormal or zero
	case 1:
		return sign | 0x7f80 | uint16(rng.IntN(128)) // ±Inf or a NaN (quiet or signalling)
	case 2:
		return uint16(rng.Uint32())
	case 3, 4, 5:
		return sign | uint16(54+rng.IntN(20))<<7 | uint16(rng.IntN(128)) // 2^-73 … 2^-54
	case 6:
		return sign | uint16(230+rng.IntN(24))<<7 | uint16(rng.IntN(128)) // up to 2^126
	}
	return sign | uint16(107+rng.IntN(40))<<7 | uint16(rng.IntN(128)) // 2^-20 … 2^19
}

// randAcc draws a float32 accumulator: ordinary, tiny, denormal, zero, huge, Inf or NaN.
func randAcc(rng *rand.Rand) float32 {
	sign := uint32(rng.IntN(2)) << 31
	switch rng.IntN(12) {
	case 0:
		return math.Float32frombits(sign | uint32(rng.IntN(1<<23))) // a denormal or zero
	case 1:
		return math.Float32frombits(sign | 0x7f800000 | uint32(rng.IntN(1<<23)))
	case 2:
		return math.Float32frombits(rng.Uint32())
	case 3, 4, 5:
		return math.Float32frombits(sign | uint32(1+rng.IntN(8))<<23 | uint32(rng.IntN(1<<23)))
	case 6:
		return math.Float32frombits(sign | uint32(250+rng.IntN(5))<<23 | uint32(rng.IntN(1<<23)))
	}
	return float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
}

// TestBF16DotMatchesInstruction: the emulation (bf16MulAdd, odd pair element first, then the
// even one) gives VDPBF16PS's bits, NaN payloads included, on random operands of every kind
// and on the edge cases measured when the definition was written (rowmatmul_bf16dot.go); its
// fast path agrees with the exact code everywhere. Without the instruction only the latter is
// checked.
func TestBF16DotMatchesInstruction(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	f := math.Float32frombits
	type step struct {
		acc    float32
		x0, x1 uint16
		w0, w1 uint16
		why    string
	}
	edge := []step{
		{f(0x00800000), 0, 0x9a00, 0, 0x1980, "2^-126 - 2^-151: rounds to 2^-126 with 24 bits, kept"},
		{f(0x00800000), 0, 0x9a00, 0, 0x1a00, "2^-126 - 2^-150: tiny with an unbounded exponent, flushed"},
		{f(0x00800000), 0x9a00, 0, 0x1980, 0, "the same in the even element"},
		{f(0x00800000), 0, 0x8080, 0, 0x3f00, "2^-126 - 2^-127: a denormal result, flushed"},
		{f(0x80800000), 0, 0x1a00, 0, 0x1980, "-2^-126 + 2^-151"},
		{f(0x80000000), 0, 0, 0, 0, "-0 + 0·0 + 0·0 = +0"},
		{f(0x80000000), 0x8000, 0x8000, 0, 0, "-0 + (-0)·0 + (-0)·0 = -0"},
		{0, 0x0001, 0, 0x7180, 0, "a denormal bfloat16 times 2^100: zero"},
		{f(0x00000001), 0, 0, 0, 0, "a denormal accumulator"},
		{f(0x7fc01234), 0x3f80, 0, 0x3f80, 0, "a quiet NaN accumulator keeps its payload"},
		{f(0x7f801234), 0x3f80, 0, 0x3f80, 0, "a signalling NaN accumulator is quieted"},
		{0, 0x7fc5, 0x7fc9, 0x3f80, 0x3f80, "NaNs in both elements: the even one, added last, wins"},
		{f(0x7fc01234), 0x7fc5, 0, 0x3f80, 0, "x's NaN over the accumulator's"},
		{0, 0x7fc5, 0, 0xffc7, 0, "x's NaN over w's"},
		{f(0x7fc01234), 0x3f80, 0, 0xff85, 0, "w's NaN over the accumulator's, quieted"},
		{0, 0x7f80, 0, 0, 0, "∞·0: the default NaN"},
		{0, 0x7f80, 0xff80, 0x3f80, 0x3f80, "∞ − ∞: the default NaN"},
		{f(0x7f7fffff), 0, 0x7f00, 0, 0x4000, "max + 2^128: ∞"},
		{f(0xff7fffff), 0, 0x7f00, 0, 0x4000, "-max + 2^128 fused: 2^104"},
	}
	for range 200000 {
		edge = append(edge, step{randAcc(rng), randBF16(rng), randBF16(rng), randBF16(rng), randBF16(rng), "random"})
	}
	emulate := func(s step, exact bool) float32 {
		mulAdd := bf16MulAdd
		if exact {
			mulAdd = bf16MulAddExact
		}
		return mulAdd(mulAdd(s.acc, s.x1, s.w1), s.x0, s.w0)
	}
	hw := bf16DotLevels > 1
	if !hw {
		t.Log("this CPU has no VDPBF16PS: checking the emulation's fast path against its exact code only")
	}
	for at := 0; at < len(edge); at += 16 {
		acc, x, w := make([]float32, 16), make([]uint16, 32), make([]uint16, 32)
		for l := range 16 {
			s := edge[min(at+l, len(edge)-1)]
			acc[l], x[2*l], x[2*l+1], w[2*l], w[2*l+1] = s.acc, s.x0, s.x1, s.w0, s.w1
		}
		bf16DotInstruction(acc, x, w)
		for l := range 16 {
			s := edge[min(at+l, len(edge)-1)]
			got, exact := emulate(s, false), emulate(s, true)
			if math.Float32bits(got) != math.Float32bits(exact) {
				t.Fatalf("%s: acc %x x %04x,%04x w %04x,%04x: fast path %08x, exact %08x",
					s.why, math.Float32bits(s.acc), s.x0, s.x1, s.w0, s.w1, math.Float32bits(got), math.Float32bits(exact))
			}
			if hw && math.Float32bits(got) != math.Float32bits(acc[l]) {
				t.Fatalf("%s: acc %x x %04x,%04x w %04x,%04x: emulation %08x, VDPBF16PS %08x",
					s.why, math.Float32bits(s.acc), s.x0, s.x1, s.w0, s.w1, math.Float32bits(got), math.Float32bits(acc[l]))
			}
		}
	}
}

// TestRowMatMulBF16DotRowIndependent: every output of the bfloat16 dot-product kernels is the
// same bits whatever the number of rows in the call, the worker split and the kernel (the
// instruction's tiles, the C emulation), those of the Go definition (rowDotBF16Go), and within
// float32 rounding of a float64 reference; lengths leave partial blocks of 32, and one set of
// operands is scaled so that many sums end near 2⁻¹²⁶ (the emulation's rare cases).
func TestRowMatMulBF16DotRowIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 2))
	randVec := func(n int, scale float64) []uint16 {
		v := make([]uint16, n)
		for i := range v {
			v[i] = bf16Of(float32(rng.NormFloat64() * scale))
		}
		return v
	}
	// Rows whose output the C emulation leaves to the Go code: 2⁻¹²⁶ − 2⁻¹⁵⁰ (fmaf rounds it to
	// 2⁻¹²⁶, the instruction flushes it: 0) and NaNs (the instruction's payload: x's, even
	// element last).
	for _, c := range []struct {
		x, w [2]uint16
		want uint32
	}{{[2]uint16{0x9a00, 0x2000}, [2]uint16{0x1a00, 0x2000}, 0}, {[2]uint16{0x7fc5, 0x3f80}, [2]uint16{0x3f80, 0xffc7}, 0x7fc50000}} {
		for level := range bf16DotLevels {
			got := make([]float32, 1)
			rowMatMulSpanBF16Dot(got, 1, c.w[:], c.x[:], 1, 2, 0, 1, level)
			if math.Float32bits(got[0]) != c.want || math.Float32bits(rowDotBF16Go(c.x[:], c.w[:])) != c.want {
				t.Fatalf("x %04x w %04x kernel %d: %08x (Go definition %08x), want %08x",
					c.x, c.w, level, math.Float32bits(got[0]), math.Float32bits(rowDotBF16Go(c.x[:], c.w[:])), c.want)
			}
		}
	}
	for _, scale := range []float64{1, 0x1p-63} {
		for _, k := range []int{1, 7, 31, 32, 33, 64, 95, 131} {
			for _, n := range []int{1, 3, 8, 11, 37} {
				const maxRows = 13
				x, w := randVec(maxRows*k, scale), randVec(n*k, scale)
				want := make([]float32, maxRows*n)
				for r := range maxRows {
					for j := range n {
						want[r*n+j] = rowDotBF16Go(x[r*k:(r+1)*k], w[j*k:(j+1)*k])
						ref, sum := 0.0, 0.0
						for i := range k {
							p := float64(bf16DAZ(x[r*k+i])) * float64(bf16DAZ(w[j*k+i]))
							ref, sum = ref+p, sum+math.Abs(p)
						}
						if d := math.Abs(float64(want[r*n+j]) - ref); scale == 1 && d > 1e-6*sum {
							t.Fatalf("k=%d n=%d row %d col %d: %v, float64 reference %v", k, n, r, j, want[r*n+j], ref)
						}
					}
				}
				for rows := 1; rows <= maxRows; rows++ {
					for _, workers := range []int{1, 2, 3} {
						for level := range bf16DotLevels {
							got := make([]float32, rows*n)
							parallelFor(workers, n, func(_, lo, hi int) {
								rowMatMulSpanBF16Dot(got, n, w, x, rows, k, lo, hi, level)
							})
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("scale %g k=%d n=%d rows=%d workers=%d kernel %d output %d: %v, Go definition %v",
										scale, k, n, rows, workers, level, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkRowMatMulBF16Dot times the 0.5B shape's decode products (see BenchmarkRowMatMul)
// with bfloat16 weights: the float32-input kernel (rowMatMulBF16: weights widened, float32
// FMAs) against the bfloat16 dot-product one, at 1, 8 and 64 rows.
func BenchmarkRowMatMulBF16Dot(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][2]int{{1152, 896}, {9728, 896}, {896, 4864}} {
		n, k := s[0], s[1]
		w := make([]uint16, n*k)
		for i := range w {
			w[i] = bf16Of(rng.Float32())
		}
		for _, rows := range []int{1, 8, 64} {
			x, xb, out := make([]float32, rows*k), make([]uint16, rows*k), make([]float32, rows*n)
			for i := range x {
				x[i] = float32(bf16DAZ(bf16Of(rng.Float32())))
				xb[i] = bf16Of(x[i])
			}
			for _, kernel := range []string{"f32in", "bf16dot"} {
				b.Run(fmt.Sprintf("%s/%dx%dx%d", kernel, rows, n, k), func(b *testing.B) {
					for b.Loop() {
						if kernel == "f32in" {
							rowMatMulBF16(2, out, w, x, rows, n, k)
						} else {
							rowMatMulBF16Dot(2, out, w, xb, rows, n, k)
						}
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(2*n*k)/sec/1e9, "GB/s")
					b.ReportMetric(float64(2*rows*n*k)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}
