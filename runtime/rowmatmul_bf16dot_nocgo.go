//go:build !cgo || noopenblas

package runtime

// bf16DotLevels: builds without cgo have one bfloat16 dot-product kernel, the Go emulation.
const bf16DotLevels = 1

// rowMatMulSpanBF16Dot sets out[r·ldo+j] for r < rows and j0 ≤ j < j1 to the bfloat16 dot
// product of x_r and w_j (see rowmatmul_bf16dot.go), in Go: the instruction's bits.
func rowMatMulSpanBF16Dot(out []float32, ldo int, w, x []uint16, rows, k, j0, j1 int, _ int) {
	if rows == 0 || j0 >= j1 {
		return
	}
	checkRowMatMulBF16Dot(out, ldo, w, x, rows, k, j1)
	rowMatMulSpanBF16DotGo(out, ldo, w, x, rows, k, j0, j1)
}

// bf16DotInstruction: builds without cgo cannot run the instruction (see the cgo build's).
func bf16DotInstruction(_ []float32, _, _ []uint16) bool { return false }
