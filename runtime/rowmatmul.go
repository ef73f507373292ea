package runtime

import "fmt"

// The host decoder's decode-step products go through rowMatMul rather than OpenBLAS: OpenBLAS
// rounds a row of x·Wᵀ differently depending on how many rows the call has (measured: row 0
// of an 8-row 896×1152 product differs from the same row alone in about a third of its
// outputs), so a sequence's samples would depend on which other sequences share its batch and
// would change whenever a finished row leaves it or a new request joins. rowMatMul computes
// every output as the same function of one input row and one weight row (see the C kernel's
// order of summation), whatever the number of rows, the tile or the split across workers; it
// reads the weights as stored, [out, in], so they need no transposed copy and no packing per
// call.

// rowMatMul sets out[r·outDim+j] = x_r·w_j for x [rows, inDim] and w [outDim, inDim], the
// output columns split across workers.
func rowMatMul(workers int, out, w, x []float32, rows, outDim, inDim int) {
	parallelFor(rowParts(workers, rows, outDim, inDim), outDim, func(_, lo, hi int) { rowMatMulSpan(out, outDim, w, x, rows, inDim, lo, hi, kernelBest) })
}

// rowMatMulBF16 is rowMatMul with w holding bfloat16 values: the same bits as rowMatMul on the
// weights widened to float32, reading half the bytes.
func rowMatMulBF16(workers int, out []float32, w []uint16, x []float32, rows, outDim, inDim int) {
	parallelFor(rowParts(workers, rows, outDim, inDim), outDim, func(_, lo, hi int) { rowMatMulSpanBF16(out, outDim, w, x, rows, inDim, lo, hi, kernelBest) })
}

// rowParts is the number of spans of output columns: at least 64 weight rows each, so that
// each worker's call streams a long run of weights, and one for a product of fewer than
// 2²⁰ multiply-adds, which a hand-off to another goroutine would cost more than it saves.
func rowParts(workers, rows, outDim, inDim int) int {
	if rows*outDim*inDim < 1<<20 {
		return 1
	}
	return max(1, min(workers, outDim/64))
}

// checkRowMatMul panics on operands too short for the product (the C kernel would read or
// write past them); lenW is the number of weight values.
func checkRowMatMul(out []float32, ldo int, lenW int, x []float32, rows, k, j1 int) {
	if len(x) < rows*k || lenW < j1*k || len(out) < (rows-1)*ldo+j1 || ldo < j1 {
		panic(fmt.Sprintf("rowMatMul: operands too short: x %d (need %d), w %d (need %d), out %d (need %d)",
			len(x), rows*k, lenW, j1*k, len(out), (rows-1)*ldo+j1))
	}
}

// The kernels rowMatMulSpan can be limited to (tests compare them): the scalar C code, AVX2,
// and the widest the CPU has (AVX-512 where present).
const (
	kernelScalar = 0
	kernelAVX2   = 1
	kernelBest   = 2
)

// rowDotGo is one output of rowMatMul computed in Go, in the kernel's order of summation (see
// rowmatmul_cgo.go): sixteen partial sums over k ≡ l (mod 16), reduced pairwise, then the tail.
// Go does not fuse the multiply and add here, so it rounds like the kernels only where no
// product is inexact; it is the whole kernel of builds without cgo, where it is used for
// every row alike.
func rowDotGo(x, w []float32) float32 {
	k := len(x)
	w = w[:k]
	var s [16]float32
	k16 := k &^ 15
	for i := 0; i < k16; i += 16 {
		for l := range 16 {
			s[l] += x[i+l] * w[i+l]
		}
	}
	var a [8]float32
	for l := range 8 {
		a[l] = s[l] + s[l+8]
	}
	r := ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
	for i := k16; i < k; i++ {
		r += x[i] * w[i]
	}
	return r
}
