// Package blas gives the cpu backend a single-precision matrix multiply: OpenBLAS's cblas_sgemm
// when the library can be loaded, otherwise a portable Go implementation.
//
// OpenBLAS is opened with dlopen at first use rather than linked: stx then builds on machines
// without libopenblas-dev (and without its headers), a binary built on one machine still runs on
// another that lacks the library, and the choice is reported at run time (Name) instead of
// failing at link time. Build with -tags noopenblas, or with cgo disabled, to leave it out.
package blas

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major float32 matrices, where op(X) is X
// or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb and ldc are the row strides
// of A, B and C as stored. It uses OpenBLAS when Available, else the Go implementation.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(parallelSgemm, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmOneThread is Sgemm on the calling thread only: for callers that run several products
// side by side, one per core.
func SgemmOneThread(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(singleSgemm, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemm checks the operands, handles empty products, and runs the rest with withOpenBLAS when
// OpenBLAS is Available, else with the Go implementation.
func sgemm(withOpenBLAS func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int),
	transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	switch {
	case k == 0:
		scaleC(m, n, beta, c, ldc)
	case Available():
		withOpenBLAS(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	default:
		GoSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// checkArgs panics on operand slices too short for the given shapes and strides: a C library
// would read or write past them.
func checkArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkLens("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
}

// checkLens is checkArgs on the operands' lengths.
func checkLens(fn string, transA, transB bool, m, n, k int, lenA, lda, lenB, ldb, lenC, ldc int) {
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	need := func(name string, n, rows, cols, ld int) {
		if cols > 0 && ld < cols {
			panic(fmt.Sprintf("blas.%s: ld%s=%d < %d columns", fn, name, ld, cols))
		}
		if rows > 0 && n < (rows-1)*ld+cols {
			panic(fmt.Sprintf("blas.%s: %s has %d elements, needs %d", fn, name, n, (rows-1)*ld+cols))
		}
	}
	need("a", lenA, rowsA, colsA, lda)
	need("b", lenB, rowsB, colsB, ldb)
	need("c", lenC, m, n, ldc)
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

// Products of fewer FLOPs (2·m·n·k) than parallelMinFLOPs run as one OpenBLAS call on the
// calling thread: any hand-off to another thread costs more. Larger ones are split into
// single-threaded calls on blocks of C, one per core, except those with at least thinRows rows
// and poolMinFLOPs, which run on OpenBLAS's own thread pool.
const (
	parallelMinFLOPs = 1 << 20
	poolMinFLOPs     = 1 << 22
	thinRows         = 16
)

// poolLock guards OpenBLAS's thread count, a setting of the whole library rather than of a
// call: a product on its pool holds it for writing, and any other call for reading, so that no
// call runs while the count is not 1 (OpenBLAS would thread it too, and round differently).
var poolLock sync.RWMutex

// singleSgemm is one OpenBLAS call on the calling thread.
func singleSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	poolLock.RLock()
	defer poolLock.RUnlock()
	openblasSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// parallelSgemm spreads a product over the cores. Large products run on OpenBLAS's own thread
// pool, which shares the packed panels of A and B between its threads (1.2-2x the speed of
// splitting C between single-threaded calls on 2 cores: 2048×704×256 at 275-293 GFLOP/s against
// 136-238); thin products (a decode step's: 8 rows) are split by columns of C across
// goroutines, where OpenBLAS's threads gain little or lose (8×4864×896: 50-63 GFLOP/s split,
// 36-50 on its pool). The way a product is divided changes its rounding, so it depends only on
// the shape and GOMAXPROCS: a product waits for the pool rather than take another path when
// another goroutine holds it.
func parallelSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	workers := runtime.GOMAXPROCS(0)
	flops := 2 * m * n * k
	if workers == 1 || flops < parallelMinFLOPs {
		singleSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if forPool(m, flops) {
		poolLock.Lock()
		ran := openblasSgemmThreads(workers, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		poolLock.Unlock()
		if ran {
			return
		}
	}
	splitSgemm(workers, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// forPool says whether parallelSgemm hands a product of m rows and flops to OpenBLAS's pool.
func forPool(m, flops int) bool {
	return m >= thinRows && flops >= poolMinFLOPs
}

// UsesPool reports whether Sgemm runs an m×n×k product on OpenBLAS's thread pool. A caller
// with two independent such products may rather run them side by side, each with
// SgemmOneThread: neither then waits on the pool's threads to share its panels.
func UsesPool(m, n, k int) bool {
	return runtime.GOMAXPROCS(0) > 1 && forPool(m, 2*m*n*k) && poolAvailable()
}

// SideBySidePays reports whether two independent products that UsesPool sends to the pool
// take less time side by side, each with SgemmOneThread, than one after the other on the
// pool. It depends on OpenBLAS's kernels. Measured on 2 cores (Zen 5, OpenBLAS 0.3.21) on the
// bench model's products, the fastest of many alternated runs: with the AVX-512 kernels
// (SkylakeX) the pool reaches 240-300 GFLOP/s and a pair 280-325; with Haswell's the pool
// already reaches 170-190, 85-95 % of two threads' 2×100, and pairs 165-190, so there is
// nothing to gain (and OpenBLAS's pool rounds some elements of those products differently
// from one thread, which pairing would change for nothing).
func SideBySidePays() bool {
	switch strings.ToLower(CoreName()) {
	case "skylakex", "cooperlake", "sapphirerapids":
		return true
	}
	return false
}

// splitSgemm runs single-threaded OpenBLAS calls on blocks of C, one per core: rows of C when
// there are enough of them, else columns.
func splitSgemm(workers int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	var wg sync.WaitGroup
	if m >= 16*workers || m >= n {
		chunk := (m + workers - 1) / workers
		for i0 := 0; i0 < m; i0 += chunk {
			rows := min(chunk, m-i0)
			aOff := i0 * lda // row i0 of A
			if transA {
				aOff = i0 // column i0 of Aᵀ's storage
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				singleSgemm(transA, transB, rows, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[i0*ldc:], ldc)
			}()
		}
	} else {
		chunk := (n + workers - 1) / workers
		for j0 := 0; j0 < n; j0 += chunk {
			cols := min(chunk, n-j0)
			bOff := j0 // column j0 of B
			if transB {
				bOff = j0 * ldb // row j0 of Bᵀ's storage
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				singleSgemm(transA, transB, m, cols, k, alpha, a, lda, b[bOff:], ldb, beta, c[j0:], ldc)
			}()
		}
	}
	wg.Wait()
}
