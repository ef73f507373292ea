// Package blas gives the cpu backend a single-precision matrix multiply: OpenBLAS's cblas_sgemm
// when the library can be loaded, otherwise a portable Go implementation.
//
// OpenBLAS is opened with dlopen at first use rather than linked: stx then builds on machines
// without libopenblas-dev (and without its headers), a binary built on one machine still runs on
// another that lacks the library, and the choice is reported at run time (Name) instead of
// failing at link time. Build with -tags noopenblas, or with cgo disabled, to leave it out.
package blas

import "fmt"

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major float32 matrices, where op(X) is X
// or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb and ldc are the row strides
// of A, B and C as stored. It uses OpenBLAS when Available, else the Go implementation.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if Available() {
		openblasSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	GoSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// checkArgs panics on operand slices too short for the given shapes and strides: a C library
// would read or write past them.
func checkArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	need := func(name string, s []float32, rows, cols, ld int) {
		if cols > 0 && ld < cols {
			panic(fmt.Sprintf("blas.Sgemm: ld%s=%d < %d columns", name, ld, cols))
		}
		if rows > 0 && len(s) < (rows-1)*ld+cols {
			panic(fmt.Sprintf("blas.Sgemm: %s has %d elements, needs %d", name, len(s), (rows-1)*ld+cols))
		}
	}
	need("a", a, rowsA, colsA, lda)
	need("b", b, rowsB, colsB, ldb)
	need("c", c, m, n, ldc)
}

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = 0
			} else {
				row[j] *= beta
			}
		}
	}
}
