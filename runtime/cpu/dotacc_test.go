package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"stx.dev/stx/runtime/cpu/blas"
)

// TestDotAccumulateSameBits runs sums of products shaped like a chunked head's weight gradient
// (Gᵢᵀ·hᵢ over chunks of K rows, summed from the first product, and added to a parameter)
// with and without fusion, and requires identical bits and the expected number of fused steps:
// every Add of a product within dotAccMaxK, none beyond it.
func TestDotAccumulateSameBits(t *testing.T) {
	fused, unfused := &Backend{}, &Backend{noFuse: true}
	rng := rand.New(rand.NewPCG(11, 12))
	const vocab, d = 600, 96
	for _, c := range []struct {
		k, chunks int
		toParam   bool // the sum starts from a parameter, which the step may not overwrite
		fusedAdds int
	}{
		{dotAccMaxK, 3, false, 2},
		{dotAccMaxK, 2, true, 2},
		{64, 4, false, 3},
		{dotAccMaxK + 1, 2, false, 0},
	} {
		t.Run(fmt.Sprintf("k%d-chunks%d-param%v", c.k, c.chunks, c.toParam), func(t *testing.T) {
			var params []shapes.Shape
			for range c.chunks {
				params = append(params, shapes.Make(dtypes.Float32, c.k, vocab), shapes.Make(dtypes.Float32, c.k, d))
			}
			if c.toParam {
				params = append(params, shapes.Make(dtypes.Float32, vocab, d))
			}
			g := fusionGraph{params, func(b backends.Builder, p []backends.Op) []backends.Op {
				var sum backends.Op
				if c.toParam {
					sum = p[len(p)-1]
				}
				for i := range c.chunks {
					gh := must(b.DotGeneral(p[2*i], []int{0}, nil, p[2*i+1], []int{0}, nil)) // Gᵀ·h
					if sum == nil {
						sum = gh
					} else {
						sum = must(b.Add(sum, gh))
					}
				}
				return []backends.Op{sum}
			}}
			inputs := make([]any, len(params))
			for i, s := range params {
				x := make([]float32, s.Size())
				for j := range x {
					x[j] = float32(rng.NormFloat64())
				}
				inputs[i] = x
			}
			want, _ := g.compileAndRun(t, unfused, inputs)
			got, _ := g.compileAndRun(t, fused, inputs)
			w, o := want[0].([]float32), got[0].([]float32)
			for i := range w {
				if math.Float32bits(w[i]) != math.Float32bits(o[i]) {
					t.Fatalf("element %d: fused %v, unfused %v", i, o[i], w[i])
				}
			}
			bld := fused.Builder(t.Name())
			ps := make([]backends.Op, len(params))
			for i, s := range params {
				ps[i] = must(bld.Parameter(fmt.Sprintf("p%d", i), s, nil))
			}
			exe, err := bld.Compile(g.build(bld, ps), nil)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range exe.(*Executable).steps {
				if _, ok := s.n.data.(*dotAcc); ok {
					n++
				}
			}
			if !blas.Available() {
				c.fusedAdds = 0 // the Go GEMM adds term by term: nothing may be fused
			}
			if n != c.fusedAdds {
				t.Errorf("%d products summed in place, want %d", n, c.fusedAdds)
			}
		})
	}
}
