package runtime

import (
	"fmt"
	"math"
)

// The bfloat16 dot-product kernels: the decode products of a model computing in bfloat16 with
// both operands bfloat16 (the input rounded once per product, as the graph rounds it) and the
// products accumulated in float32 by VDPBF16PS (AVX512_BF16), twice the multiply-adds per
// instruction of the float32 kernels and no widening of the weights. Every output is defined
// as what that instruction computes, whatever the machine:
//
//   - the input and weight rows are split in blocks of 32 values (the last one padded with
//     zeros); in every block, lane l (l < 16) of sixteen float32 partial sums takes the pair of
//     values 2l and 2l+1: s_l ← F(s_l + x[2l+1]·w[2l+1]), then s_l ← F(s_l + x[2l]·w[2l]);
//   - each step is one fused multiply-add: the exact s_l + x·w (x and w bfloat16 values whose
//     denormals count as zeros of their sign) rounded once to nearest even, F flushing a tiny
//     result (below 2⁻¹²⁶ when rounded to 24 bits with an unbounded exponent) to a zero of its
//     sign; a NaN is the first NaN of x, w, s_l (quieted), else the default NaN 0xffc00000;
//   - the sixteen sums are then reduced as the float32 kernels reduce theirs (stx_reduce16).
//
// That is Intel's pseudo-code for VDPBF16PS (odd element first, DAZ, FTZ, round to nearest
// even, MXCSR unused), and TestBF16DotMatchesInstruction checks it bit for bit against the
// instruction on this machine's CPU wherever it has it (AMD Zen 5 when written: random and
// edge-case operands, NaN payloads included; the tininess rule above, after rounding with an
// unbounded exponent, is what it measured: 2⁻¹²⁶ − 2⁻¹⁵¹ gives 2⁻¹²⁶, 2⁻¹²⁶ − 2⁻¹⁵⁰ gives 0).
// Machines without the instruction run an emulation of it (C, or Go without cgo) with the
// same bits, so samples never depend on the CPU. The output depends on one input row and one
// weight row only, as rowMatMul's does.

// bf16DAZ is a bfloat16 value as VDPBF16PS reads it: denormals are zeros of their sign.
func bf16DAZ(b uint16) float32 {
	if b&0x7f80 == 0 {
		b &= 0x8000
	}
	return math.Float32frombits(uint32(b) << 16)
}

// bf16MulAdd is one step of VDPBF16PS: F(acc + x·w) for the bfloat16 values x and w (see the
// comment above). The usual case is two float32 operations: a product of two normal bfloat16
// values has 16 significant bits, exact in float32 unless it leaves float32's normal range,
// so the float32 sum is the fused one; the rest (and a denormal acc, which the kernels never
// pass) take bf16MulAddExact.
func bf16MulAdd(acc float32, xb, wb uint16) float32 {
	x, y := bf16DAZ(xb), bf16DAZ(wb)
	// The conversion keeps Go from fusing the product with the sum below; a denormal acc
	// reads as zero.
	p := float32(x * y)
	normal := math.Float32bits(acc)&0x7f800000 != 0 || acc == 0
	if ap := abs32(p); normal && ((ap >= 0x1p-126 && ap <= math.MaxFloat32) || x == 0 || y == 0) {
		r := acc + p
		if ar := abs32(r); ar > 0x1p-126 || r == 0 {
			return r // an infinity too; a NaN fails both tests
		} else if ar < 0x1p-126 {
			return float32(math.Copysign(0, float64(r)))
		}
	}
	return bf16MulAddExact(acc, xb, wb)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// bf16MulAddExact is bf16MulAdd for every operand: the sum in float64 rounded to odd (the
// exact sum's information kept in the last bit, so that rounding it to float32 rounds the exact
// sum once), the tininess test on the sum rounded to 24 bits with an unbounded exponent, and
// the instruction's NaN rules.
func bf16MulAddExact(acc float32, xb, wb uint16) float32 {
	const quiet = 1 << 22
	x, y := bf16DAZ(xb), bf16DAZ(wb)
	switch {
	case x != x:
		return math.Float32frombits(math.Float32bits(x) | quiet)
	case y != y:
		return math.Float32frombits(math.Float32bits(y) | quiet)
	case acc != acc:
		return math.Float32frombits(math.Float32bits(acc) | quiet)
	}
	if math.Float32bits(acc)&0x7f800000 == 0 {
		acc = float32(math.Copysign(0, float64(acc))) // DAZ on the accumulator too
	}
	a, p := float64(acc), float64(x)*float64(y) // exact: 16 significant bits, |p| < 2²⁵⁶
	s := a + p
	if s != s {
		return math.Float32frombits(0xffc00000) // ∞ − ∞ or ∞·0
	}
	if !math.IsInf(s, 0) {
		bb := s - a
		if e := (a - (s - bb)) + (p - bb); e != 0 && math.Float64bits(s)&1 == 0 {
			if (e > 0) == (s > 0) {
				s = math.Float64frombits(math.Float64bits(s) + 1)
			} else {
				s = math.Float64frombits(math.Float64bits(s) - 1)
			}
		}
	}
	as := math.Abs(s)
	switch {
	case as >= 0x1p128-0x1p103: // rounds past the largest float32
		return float32(math.Copysign(math.Inf(1), s))
	case as < 0x1p-120 && as != 0:
		// Scaled into float32's normal range, the rounding to 24 bits is the unbounded one.
		if abs32(float32(s*0x1p64)) < 0x1p-62 {
			return float32(math.Copysign(0, s))
		}
	}
	return float32(s)
}

// rowDotBF16Go is one output of the bfloat16 dot-product kernels (x and w bfloat16 bits of
// the same length), computed in Go: the definition above, step by step.
func rowDotBF16Go(x, w []uint16) float32 {
	k := len(x)
	w = w[:k]
	var s [16]float32
	at := func(v []uint16, i int) uint16 {
		if i < k {
			return v[i]
		}
		return 0
	}
	for b := 0; b < k; b += 32 {
		for l := range 16 {
			i := b + 2*l
			s[l] = bf16MulAdd(s[l], at(x, i+1), at(w, i+1))
			s[l] = bf16MulAdd(s[l], at(x, i), at(w, i))
		}
	}
	var a [8]float32
	for l := range 8 {
		a[l] = s[l] + s[l+8]
	}
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// bf16DotKernel is the level rowMatMulBF16Dot runs its kernels at: kernelBest (the instruction
// where the CPU has it); tests set kernelScalar to decode with the emulation.
var bf16DotKernel = kernelBest

// rowMatMulBF16Dot sets out[r·outDim+j] to the bfloat16 dot product (see above) of x_r and w_j
// for x [rows, inDim] and w [outDim, inDim], both bfloat16 bits, the output columns split
// across workers as rowMatMul splits them.
func rowMatMulBF16Dot(workers int, out []float32, w, x []uint16, rows, outDim, inDim int) {
	parallelFor(rowParts(workers, rows, outDim, inDim), outDim, func(_, lo, hi int) {
		rowMatMulSpanBF16Dot(out, outDim, w, x, rows, inDim, lo, hi, bf16DotKernel)
	})
}

// rowMatMulSpanBF16DotGo is rowMatMulSpanBF16Dot in Go (builds without cgo, and the C
// emulation's rare outputs it leaves to the exact code).
func rowMatMulSpanBF16DotGo(out []float32, ldo int, w, x []uint16, rows, k, j0, j1 int) {
	for j := j0; j < j1; j++ {
		wj := w[j*k : (j+1)*k]
		for r := range rows {
			out[r*ldo+j] = rowDotBF16Go(x[r*k:(r+1)*k], wj)
		}
	}
}

// checkRowMatMulBF16Dot panics on operands too short for the product (the C kernels would
// read or write past them).
func checkRowMatMulBF16Dot(out []float32, ldo int, w, x []uint16, rows, k, j1 int) {
	if len(x) < rows*k || len(w) < j1*k || len(out) < (rows-1)*ldo+j1 || ldo < j1 {
		panic(fmt.Sprintf("rowMatMulBF16Dot: operands too short: x %d (need %d), w %d (need %d), out %d (need %d)",
			len(x), rows*k, len(w), j1*k, len(out), (rows-1)*ldo+j1))
	}
}
