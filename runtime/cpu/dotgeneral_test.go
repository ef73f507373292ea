package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

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
				sgemmBatch(oneThread, transA, transB, batch, m, n, k, a, lda, nil, b, ldb, nil, out)
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
				sgemmBatch(false, false, s.transB, s.batch, s.m, s.n, s.k, a, s.k, nil, w, ldb, nil, out)
			}
			b.ReportMetric(2*float64(s.batch*s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestDotGeneralStridedItems checks that products whose batch axes lie between the matrix
// axes (attention's [B,T,heads,hd] operands batched over B and heads) read float32 items in
// place, and that this gives the same bits as the same product of operands transposed first
// into [batch, M, K] / [batch, K, N], over every path of sgemmBatch.
func TestDotGeneralStridedItems(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	for _, c := range []struct {
		name     string
		lhs, rhs []int // dims
		// axes of the product: lhs/rhs contracting and batch axes
		lc, lb, rc, rb []int
		// permutations taking each operand to batch-first layouts with the same strides in
		// each item, and the contracting axis there: the same sgemmBatch path and bits
		lperm, rperm []int
		lk, rk       int
		lView, rView bool // read in place, not transposed
	}{
		{"scores-tiny", []int{2, 8, 3, 4}, []int{2, 8, 3, 4}, []int{3}, []int{0, 2}, []int{3}, []int{0, 2}, []int{0, 2, 1, 3}, []int{0, 2, 1, 3}, 3, 3, true, true},
		{"scores", []int{2, 64, 4, 64}, []int{2, 64, 4, 64}, []int{3}, []int{0, 2}, []int{3}, []int{0, 2}, []int{0, 2, 1, 3}, []int{0, 2, 1, 3}, 3, 3, true, true},
		{"values", []int{2, 4, 64, 64}, []int{2, 64, 4, 32}, []int{3}, []int{0, 1}, []int{1}, []int{0, 2}, nil, []int{0, 2, 1, 3}, 3, 2, false, true},
		{"values-tiny", []int{2, 4, 8, 8}, []int{2, 8, 4, 4}, []int{3}, []int{0, 1}, []int{1}, []int{0, 2}, nil, []int{0, 2, 1, 3}, 3, 2, false, true},
		{"large-items", []int{1, 300, 2, 200}, []int{1, 170, 2, 200}, []int{3}, []int{0, 2}, []int{3}, []int{0, 2}, []int{0, 2, 1, 3}, []int{0, 2, 1, 3}, 3, 3, true, true},
		{"transA", []int{2, 5, 3, 40}, []int{2, 3, 5, 6}, []int{1}, []int{0, 2}, []int{2}, []int{0, 1}, []int{0, 2, 1, 3}, nil, 2, 2, true, false},
		// The batch axis last leaves no unit-stride axis: transposed as before.
		{"batch-last", []int{4, 5, 3}, []int{5, 6, 3}, []int{1}, []int{2}, []int{0}, []int{2}, []int{2, 0, 1}, []int{2, 0, 1}, 2, 1, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ls, rs := shapes.Make(dtypes.Float32, c.lhs...), shapes.Make(dtypes.Float32, c.rhs...)
			p, _, err := planDotGeneral(ls, c.lc, c.lb, rs, c.rc, c.rb)
			if err != nil {
				t.Fatal(err)
			}
			if (p.lhsView != nil) != c.lView || (p.rhsView != nil) != c.rView {
				t.Fatalf("in place: lhs %v rhs %v, want %v %v", p.lhsView != nil, p.rhsView != nil, c.lView, c.rView)
			}
			a, b := randTensor(rng, dtypes.Float32, c.lhs...), randTensor(rng, dtypes.Float32, c.rhs...)
			cpu, _ := testBackends()
			got, err := run(t, cpu, func(a, b *graph.Node) *graph.Node {
				return graph.DotGeneral(a, c.lc, c.lb, b, c.rc, c.rb)
			}, a, b)
			if err != nil {
				t.Fatal(err)
			}
			// The same product with both operands transposed into the standard layout first.
			nb := len(c.lb)
			want, err := run(t, cpu, func(a, b *graph.Node) *graph.Node {
				if c.lperm != nil {
					a = graph.TransposeAllAxes(a, c.lperm...)
				}
				if c.rperm != nil {
					b = graph.TransposeAllAxes(b, c.rperm...)
				}
				batch := make([]int, nb)
				for i := range batch {
					batch[i] = i
				}
				return graph.DotGeneral(a, []int{c.lk}, batch, b, []int{c.rk}, batch)
			}, a, b)
			if err != nil {
				t.Fatal(err)
			}
			g, w := flatOf(got[0]).([]float32), flatOf(want[0]).([]float32)
			if !got[0].Shape().Equal(want[0].Shape()) {
				t.Fatalf("shape %s, want %s", got[0].Shape(), want[0].Shape())
			}
			for i := range g {
				if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
					t.Fatalf("element %d: %v, transposed first %v", i, g[i], w[i])
				}
			}
		})
	}
}
