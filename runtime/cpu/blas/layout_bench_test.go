package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSgemmLayouts reports GFLOP/s of a 0.5B training step's products (Qwen2.5-0.5B,
// 4 × 256 tokens) with each operand as stored (N) or transposed (T).
func BenchmarkSgemmLayouts(b *testing.B) {
	if !Available() {
		b.Skip(Name())
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1024, 4864, 896}, {1024, 896, 4864}, {4864, 896, 1024}} {
		m, n, k := s[0], s[1], s[2]
		x, y, z := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		for _, t := range [][2]bool{{false, false}, {false, true}, {true, false}} {
			lda, ldb := k, n
			if t[0] {
				lda = m
			}
			if t[1] {
				ldb = k
			}
			b.Run(fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v", m, n, k, t[0], t[1]), func(b *testing.B) {
				for b.Loop() {
					Sgemm(t[0], t[1], m, n, k, 1, x, lda, y, ldb, 0, z, n)
				}
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
