package blas

import (
	"math"
	"runtime"
	"sync"

	"golang.org/x/sys/cpu"
)

// Mixed-precision products: bfloat16 operands, float32 accumulation and result.
//
// OpenBLAS's cblas_sbgemm multiplies matrices of bfloat16 values (the upper 16 bits of a
// float32) into a float32 C. It is exported only by libraries built with BUILD_BFLOAT16
// (Debian's 0.3.21 is not), and it is fast only on CPUs with bfloat16 instructions (AVX512-BF16:
// Cooper Lake, Sapphire Rapids and later Xeons, Zen 4 and later; AMX-BF16: Sapphire Rapids and
// later); elsewhere OpenBLAS runs a generic kernel slower than its sgemm. A product of two
// bfloat16 values is exact in float32 (8 + 8 significant bits), so widening the operands to
// float32 and calling Sgemm computes the same sums as a bfloat16 product with float32
// accumulation, at float32 speed: that is what the cpu backend does where SbgemmFast is false.

// HasSbgemm reports whether the loaded OpenBLAS exports cblas_sbgemm.
func HasSbgemm() bool { return openblasHasSbgemm() }

// CPUBF16 names the bfloat16 matrix instructions of this CPU ("AVX512-BF16", "AMX-BF16", both
// joined by "+"), or "" when it has none (or the operating system does not enable them).
func CPUBF16() string {
	var have []string
	if cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512F {
		have = append(have, "AVX512-BF16")
	}
	if cpu.X86.HasAMXBF16 {
		have = append(have, "AMX-BF16")
	}
	switch len(have) {
	case 0:
		return ""
	case 1:
		return have[0]
	}
	return have[0] + "+" + have[1]
}

// SbgemmFast reports whether Sbgemm runs on OpenBLAS's cblas_sbgemm on a CPU with bfloat16
// instructions: the case where it is faster than widening to float32 and Sgemm.
func SbgemmFast() bool { return HasSbgemm() && CPUBF16() != "" }

// Sbgemm computes C = alpha·op(A)·op(B) + beta·C where A and B hold bfloat16 bit patterns and C
// is float32, with Sgemm's conventions (row-major, strides lda, ldb, ldc). It uses
// cblas_sbgemm when HasSbgemm, spread over the cores as Sgemm spreads its products; else the
// operands are widened to float32 and Sgemm runs on them (the same sums).
func Sbgemm(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	sbgemm(false, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SbgemmOneThread is Sbgemm on the calling thread only.
func SbgemmOneThread(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	sbgemm(true, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func sbgemm(oneThread, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkLens("Sbgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if !HasSbgemm() {
		af, bf := WidenBF16(a), WidenBF16(b)
		if oneThread {
			SgemmOneThread(transA, transB, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc)
		} else {
			Sgemm(transA, transB, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc)
		}
		return
	}
	workers := runtime.GOMAXPROCS(0)
	flops := 2 * m * n * k
	if oneThread || workers == 1 || flops < parallelMinFLOPs {
		singleSbgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if forPool(m, flops) {
		poolLock.Lock()
		ran := openblasSbgemmThreads(workers, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		poolLock.Unlock()
		if ran {
			return
		}
	}
	// Blocks of C, one single-threaded call per core (splitSgemm's split).
	var wg sync.WaitGroup
	if m >= 16*workers || m >= n {
		chunk := (m + workers - 1) / workers
		for i0 := 0; i0 < m; i0 += chunk {
			rows := min(chunk, m-i0)
			aOff := i0 * lda
			if transA {
				aOff = i0
			}
			wg.Go(func() {
				singleSbgemm(transA, transB, rows, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[i0*ldc:], ldc)
			})
		}
	} else {
		chunk := (n + workers - 1) / workers
		for j0 := 0; j0 < n; j0 += chunk {
			cols := min(chunk, n-j0)
			bOff := j0
			if transB {
				bOff = j0 * ldb
			}
			wg.Go(func() {
				singleSbgemm(transA, transB, m, cols, k, alpha, a, lda, b[bOff:], ldb, beta, c[j0:], ldc)
			})
		}
	}
	wg.Wait()
}

// singleSbgemm is one cblas_sbgemm call on the calling thread.
func singleSbgemm(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	poolLock.RLock()
	defer poolLock.RUnlock()
	openblasSbgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// WidenBF16 returns bfloat16 bit patterns as float32 values (exact).
func WidenBF16(x []uint16) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out
}
