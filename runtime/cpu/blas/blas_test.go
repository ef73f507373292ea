package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// refGemm is an independent float64 reference of C = alpha·op(A)·op(B) + beta·C.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = float64(alpha)*s + float64(beta)*float64(c[i*ldc+j])
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func TestSgemm(t *testing.T) {
	type impl struct {
		name string
		fn   func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)
	}
	impls := []impl{{"go", GoSgemm}}
	if Available() {
		impls = append(impls, impl{"openblas", Sgemm})
	} else {
		t.Logf("OpenBLAS not used: %s", Name())
	}
	shapes := []struct{ m, n, k, pad int }{
		{1, 1, 1, 0}, {3, 5, 7, 0}, {17, 9, 33, 2}, {64, 48, 40, 3}, {5, 4, 0, 0}, {130, 70, 90, 1},
		// Large enough for OpenBLAS's thread pool, and a thin one split by columns of C.
		{200, 150, 100, 1}, {8, 700, 3000, 0},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, im := range impls {
		for _, s := range shapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, ab := range [][2]float32{{1, 0}, {0.5, 1.5}} {
						name := fmt.Sprintf("%s/%dx%dx%d/ta=%v/tb=%v/alpha=%v", im.name, s.m, s.n, s.k, ta, tb, ab[0])
						t.Run(name, func(t *testing.T) {
							ra, ca := s.m, s.k
							if ta {
								ra, ca = s.k, s.m
							}
							rb, cb := s.k, s.n
							if tb {
								rb, cb = s.n, s.k
							}
							lda, ldb, ldc := ca+s.pad, cb+s.pad, s.n+s.pad
							a := randSlice(r, max(ra*lda, 1))
							b := randSlice(r, max(rb*ldb, 1))
							c := randSlice(r, s.m*ldc)
							want := refGemm(ta, tb, s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
							padding := append([]float32(nil), c...)
							im.fn(ta, tb, s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
							for i := range s.m {
								for j := range s.n {
									got, w := float64(c[i*ldc+j]), want[i*s.n+j]
									if math.Abs(got-w) > 1e-4+1e-4*math.Abs(w) {
										t.Fatalf("C[%d,%d] = %v, want %v", i, j, got, w)
									}
								}
								for j := s.n; j < ldc && i*ldc+j < len(c); j++ {
									if c[i*ldc+j] != padding[i*ldc+j] {
										t.Fatalf("padding C[%d,%d] written", i, j)
									}
								}
							}
						})
					}
				}
			}
		}
	}
}

func TestSgemmShortSlicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a too-short operand did not panic")
		}
	}()
	Sgemm(false, false, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
}

func benchmarkGemm(b *testing.B, fn func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int), m, n, k int) {
	r := rand.New(rand.NewPCG(3, 4))
	x, y, z := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
	b.ResetTimer()
	for b.Loop() {
		fn(false, true, m, n, k, 1, x, k, y, k, 0, z, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemm reports GFLOP/s for a bench-model-sized product (2048 tokens × 256 → 704),
// a square one and a decode step's (8 rows), with OpenBLAS (when available) and the Go
// fallback, in one run.
func BenchmarkSgemm(b *testing.B) {
	for _, s := range [][3]int{{2048, 704, 256}, {1024, 1024, 1024}, {8, 704, 256}} {
		if Available() {
			b.Run(fmt.Sprintf("openblas/%dx%dx%d", s[0], s[1], s[2]), func(b *testing.B) { benchmarkGemm(b, Sgemm, s[0], s[1], s[2]) })
		}
		b.Run(fmt.Sprintf("go/%dx%dx%d", s[0], s[1], s[2]), func(b *testing.B) { benchmarkGemm(b, GoSgemm, s[0], s[1], s[2]) })
	}
}

// TestSgemmConcurrentSameBits checks that a product's bits do not depend on what else runs:
// the way parallelSgemm divides a product (one call, OpenBLAS's pool, blocks of C) changes the
// rounding, so it must depend only on the product's shape and the number of cores, never on
// another goroutine holding OpenBLAS's pool (data-parallel replicas multiply concurrently).
func TestSgemmConcurrentSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// A product for the pool, a thin one split by columns, a tall one, and one below the
	// threshold that OpenBLAS itself would thread if its thread count were not 1 at the time.
	shapes := []struct{ m, n, k int }{{200, 150, 100}, {8, 700, 3000}, {513, 64, 300}, {100, 100, 60}}
	type operands struct{ a, b, want []float32 }
	ops := make([]operands, len(shapes))
	product := func(i int) []float32 {
		s, o := shapes[i], ops[i]
		c := make([]float32, s.m*s.n)
		Sgemm(false, true, s.m, s.n, s.k, 1, o.a, s.k, o.b, s.k, 0, c, s.n)
		return c
	}
	for i, s := range shapes {
		ops[i] = operands{a: randSlice(r, s.m*s.k), b: randSlice(r, s.k*s.n)}
		ops[i].want = product(i)
	}
	const rounds = 6
	results := make([][]float32, rounds*len(shapes))
	var wg sync.WaitGroup
	for j := range results {
		wg.Go(func() { results[j] = product(j % len(shapes)) })
	}
	wg.Wait()
	for j, got := range results {
		s, want := shapes[j%len(shapes)], ops[j%len(shapes)].want
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%dx%dx%d run beside the others: c[%d] = %v, alone %v", s.m, s.n, s.k, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkSgemmPair reports GFLOP/s for pairs of independent products that the cpu backend
// runs side by side in the bench model's train step (forward: q and k, gate and up; backward:
// a Linear's dX and dW): one after the other, each on OpenBLAS's pool, against side by side,
// each on one thread.
func BenchmarkSgemmPair(b *testing.B) {
	if !Available() {
		b.Skip(Name())
	}
	type product struct {
		m, n, k        int
		transA, transB bool
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, pair := range [][2]product{
		{{2048, 256, 256, false, true}, {2048, 256, 256, false, true}},
		{{2048, 704, 256, false, true}, {2048, 704, 256, false, true}},
		{{2048, 256, 256, false, false}, {256, 256, 2048, true, false}},
		{{2048, 256, 704, false, false}, {704, 256, 2048, true, false}},
		{{2048, 256, 2048, false, false}, {2048, 256, 2048, true, false}},
	} {
		var runs [2]func(func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int))
		flops := 0.0
		for i, p := range pair {
			a, w, c := randSlice(r, p.m*p.k), randSlice(r, p.k*p.n), make([]float32, p.m*p.n)
			lda, ldb := p.k, p.n
			if p.transA {
				lda = p.m
			}
			if p.transB {
				ldb = p.k
			}
			runs[i] = func(sgemm func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)) {
				sgemm(p.transA, p.transB, p.m, p.n, p.k, 1, a, lda, w, ldb, 0, c, p.n)
			}
			flops += 2 * float64(p.m) * float64(p.n) * float64(p.k)
		}
		name := fmt.Sprintf("%dx%dx%d+%dx%dx%d", pair[0].m, pair[0].n, pair[0].k, pair[1].m, pair[1].n, pair[1].k)
		b.Run("pool/"+name, func(b *testing.B) {
			for b.Loop() {
				runs[0](Sgemm)
				runs[1](Sgemm)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run("sidebyside/"+name, func(b *testing.B) {
			for b.Loop() {
				var wg sync.WaitGroup
				wg.Go(func() { runs[1](SgemmOneThread) })
				runs[0](SgemmOneThread)
				wg.Wait()
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
