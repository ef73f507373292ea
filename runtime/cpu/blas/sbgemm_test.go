package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSbgemm: Sbgemm (cblas_sbgemm where the library exports it, else the float32 fallback)
// multiplies bfloat16 operands with float32 accumulation: within float32 summation error of
// the float64 product of the widened operands, for each combination of transposes, with row
// strides, alpha, beta, on the pool and on one thread.
func TestSbgemm(t *testing.T) {
	t.Logf("cblas_sbgemm exported: %v; bfloat16 instructions: %q; fast: %v", HasSbgemm(), CPUBF16(), SbgemmFast())
	rng := rand.New(rand.NewPCG(5, 6))
	bits := func(n int) []uint16 {
		s := make([]uint16, n)
		for i := range s {
			s[i] = uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
		}
		return s
	}
	for _, s := range []struct{ m, n, k, pad int }{{1, 1, 1, 0}, {3, 5, 7, 2}, {5, 4, 0, 0}, {200, 150, 100, 1}, {8, 700, 3000, 0}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, oneThread := range []bool{false, true} {
				transA, transB := tr[0], tr[1]
				rowsA, colsA, rowsB, colsB := s.m, s.k, s.k, s.n
				if transA {
					rowsA, colsA = colsA, rowsA
				}
				if transB {
					rowsB, colsB = colsB, rowsB
				}
				lda, ldb, ldc := colsA+s.pad, colsB+s.pad, s.n+s.pad
				a, b := bits(max(rowsA*lda, 1)), bits(max(rowsB*ldb, 1))
				c := randSlice(rng, max(s.m*ldc, 1))
				alpha, beta := float32(0.5), float32(0.25)
				want := refGemm(transA, transB, s.m, s.n, s.k, alpha, WidenBF16(a), lda, WidenBF16(b), ldb, beta, c, ldc)
				mag := refGemm(transA, transB, s.m, s.n, s.k, 1, absAll(WidenBF16(a)), lda, absAll(WidenBF16(b)), ldb, 0, c, ldc)
				f := Sbgemm
				if oneThread {
					f = SbgemmOneThread
				}
				f(transA, transB, s.m, s.n, s.k, alpha, a, lda, b, ldb, beta, c, ldc)
				for i := range s.m {
					for j := range s.n {
						got, w := float64(c[i*ldc+j]), want[i*s.n+j]
						tol := 2*float64(s.k+2)*0x1p-24*(mag[i*s.n+j]+math.Abs(w)) + 1e-30
						if math.Abs(got-w) > tol {
							t.Fatalf("%dx%dx%d trans %v one thread %v: c[%d,%d] = %v, want %v (±%.3g)", s.m, s.n, s.k, tr, oneThread, i, j, got, w, tol)
						}
					}
				}
			}
		}
	}
}

func absAll(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(math.Abs(float64(v)))
	}
	return out
}
