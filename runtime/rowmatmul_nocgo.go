//go:build !cgo || noopenblas

package runtime

import (
	"math"

	"stx.dev/stx/runtime/cpu"
)

// kernelLevels: builds without cgo have one kernel, in Go.
const kernelLevels = 1

// rowMatMulSpan sets out[r·ldo+j] = x_r·w_j for r < rows and j0 ≤ j < j1 (see rowMatMul),
// in Go: builds without cgo have no C kernels (level changes nothing).
func rowMatMulSpan(out []float32, ldo int, w, x []float32, rows, k, j0, j1 int, _ int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	for j := j0; j < j1; j++ {
		wj := w[j*k : (j+1)*k]
		for r := range rows {
			out[r*ldo+j] = rowDotGo(x[r*k:(r+1)*k], wj)
		}
	}
}

// rowMatMulSpanBF16 is rowMatMulSpan with w holding bfloat16 values, widened a row at a time.
func rowMatMulSpanBF16(out []float32, ldo int, w []uint16, x []float32, rows, k, j0, j1 int, _ int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMul(out, ldo, len(w), x, rows, k, j1)
	wj := make([]float32, k)
	for j := j0; j < j1; j++ {
		for i, b := range w[j*k : (j+1)*k] {
			wj[i] = math.Float32frombits(uint32(b) << 16)
		}
		for r := range rows {
			out[r*ldo+j] = rowDotGo(x[r*k:(r+1)*k], wj)
		}
	}
}

// rowNarrowBF16 sets dst[i] to src[i] rounded to the nearest bfloat16 (cpu.RoundBF16).
func rowNarrowBF16(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = uint16(cpu.RoundBF16(v))
	}
}
