package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"stx.dev/stx/runtime/cpu/blas"
)

// TestSgemmBatchPaths compares every path of sgemmBatch (Go kernel, batch-parallel, one call
// per item) with a float64 reference, for each combination of transposes, spread over the
// cores and on one thread.
func TestSgemmBatchPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	all := [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}}
	for _, c := range []struct {
		s     [4]int // batch, m, n, k
		trans [][2]bool
	}{
		{[4]int{3, 2, 5, 4}, all},     // Go kernel (A not transposed), else one call
		{[4]int{32, 1, 64, 256}, all}, // batch items in parallel
		{[4]int{2, 8, 704, 256}, all}, // one call per item, split by blas.Sgemm
		{[4]int{1, 130, 170, 200}, all},
	} {
		s := c.s
		batch, m, n, k := s[0], s[1], s[2], s[3]
		for _, tr := range c.trans {
			for _, oneThread := range []bool{false, true} {
				transA, transB := tr[0], tr[1]
				a, b := make([]float32, batch*m*k), make([]float32, batch*k*n)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				lda, ldb := k, n
				if transA {
					lda = m
				}
				if transB {
					ldb = k
				}
				out := make([]float32, batch*m*n)
				sgemmBatch(oneThread, transA, transB, batch, m, n, k, a, lda, b, ldb, out)
				for bi := range batch {
					for i := range m {
						for j := range n {
							var want, mag float64
							for p := range k {
								av, bv := a[bi*m*k+i*k+p], b[bi*k*n+p*n+j]
								if transA {
									av = a[bi*m*k+p*m+i]
								}
								if transB {
									bv = b[bi*k*n+j*k+p]
								}
								want += float64(av) * float64(bv)
								mag += math.Abs(float64(av) * float64(bv))
							}
							// float32 accumulation error grows with k and the terms' magnitude.
							if got := float64(out[bi*m*n+i*n+j]); math.Abs(got-want) > 1e-6*float64(k)*mag+1e-6 {
								t.Fatalf("%v trans %v oneThread %v: [%d,%d,%d] = %v, want %v", s, tr, oneThread, bi, i, j, got, want)
							}
						}
					}
				}
			}
		}
	}
}

func BenchmarkSgemmBatch(b *testing.B) {
	b.Logf("GEMM: %s", blas.Name())
	for _, s := range []struct {
		name           string
		batch, m, n, k int
		transB         bool
	}{
		{"decode-mlp", 1, 8, 704, 256, true},
		{"decode-attention", 32, 1, 64, 256, true},
		{"attention-scores", 32, 256, 256, 64, true},
		{"forward-mlp", 1, 2048, 704, 256, true},
	} {
		a, w, out := make([]float32, s.batch*s.m*s.k), make([]float32, s.batch*s.k*s.n), make([]float32, s.batch*s.m*s.n)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for i := range w {
			w[i] = float32(i%5) - 2
		}
		ldb := s.n
		if s.transB {
			ldb = s.k
		}
		b.Run(fmt.Sprintf("%s/%dx%dx%dx%d", s.name, s.batch, s.m, s.n, s.k), func(b *testing.B) {
			for b.Loop() {
				sgemmBatch(false, false, s.transB, s.batch, s.m, s.n, s.k, a, s.k, w, ldb, out)
			}
			b.ReportMetric(2*float64(s.batch*s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
