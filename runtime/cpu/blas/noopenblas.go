//go:build !cgo || noopenblas

package blas

// CompiledIn says whether this binary can use OpenBLAS (cgo, no noopenblas tag).
const CompiledIn = false

// Available reports whether OpenBLAS was loaded: never in this build.
func Available() bool { return false }

// Name describes the GEMM in use.
func Name() string { return "pure Go (built without OpenBLAS: no cgo or -tags noopenblas)" }

// CoreName is the name of the CPU whose kernels OpenBLAS uses: none in this build.
func CoreName() string { return "" }

func poolAvailable() bool { return false }

func openblasSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("blas: OpenBLAS is not compiled in")
}

func openblasSgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	panic("blas: OpenBLAS is not compiled in")
}

func openblasHasSbgemm() bool { return false }

func openblasSbgemm(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	panic("blas: OpenBLAS is not compiled in")
}

func openblasSbgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) bool {
	panic("blas: OpenBLAS is not compiled in")
}
