package kernels

// Cross-checks against GoMLX's SimpleGo backend executing the same backend op on the same
// random inputs: an independent implementation of the same XLA semantics. (SimpleGo v0.26 has
// no Pad or Reverse; those are checked against the references only.)

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

var simpleGo = sync.OnceValues(func() (backends.Backend, error) {
	return backends.NewWithConfig("go:ops_sequential")
})

type param struct {
	flat  any
	dtype dtypes.DType
	dims  []int
}

// execSimpleGo builds one graph of the ops build returns over params, runs it on SimpleGo
// and copies the single output into out, returning the output's dims.
func execSimpleGo(t *testing.T, params []param, out any, build func(b backends.Builder, ps []backends.Op) (backends.Op, error)) []int {
	t.Helper()
	be, err := simpleGo()
	if err != nil {
		t.Fatalf("SimpleGo backend: %v", err)
	}
	b := be.Builder(t.Name())
	ops := make([]backends.Op, len(params))
	for i, p := range params {
		if ops[i], err = b.Parameter(fmt.Sprintf("p%d", i), shapes.Make(p.dtype, p.dims...), nil); err != nil {
			t.Fatalf("Parameter %d: %v", i, err)
		}
	}
	o, err := build(b, ops)
	if err != nil {
		t.Fatalf("building the op: %v", err)
	}
	outShape, err := b.OpShape(o)
	if err != nil {
		t.Fatalf("OpShape: %v", err)
	}
	exe, err := b.Compile([]backends.Op{o}, nil)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	defer exe.Finalize()
	bufs := make([]backends.Buffer, len(params))
	for i, p := range params {
		if bufs[i], err = be.BufferFromFlatData(0, p.flat, shapes.Make(p.dtype, p.dims...)); err != nil {
			t.Fatalf("BufferFromFlatData %d: %v", i, err)
		}
	}
	outs, err := exe.Execute(bufs, make([]bool, len(bufs)), 0)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if err := be.BufferToFlatData(outs[0], out); err != nil {
		t.Fatalf("BufferToFlatData: %v", err)
	}
	return outShape.Dimensions
}

func randFloat32(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestSimpleGoTranspose(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	for rank := 1; rank <= 4; rank++ {
		for _, perm := range permutations(rank) {
			dims := randDims(rng, rank, 5, false)
			src := randFloat32(rng, product(dims))
			want := make([]float32, len(src))
			execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
				return b.Transpose(ps[0], perm...)
			})
			got := make([]float32, len(src))
			Transpose(got, src, dims, perm)
			if !slices.Equal(got, want) {
				t.Fatalf("Transpose(dims=%v, perm=%v) differs from SimpleGo", dims, perm)
			}
		}
	}
}

func TestSimpleGoReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	builders := map[ReduceOp]func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error){
		ReduceSum: func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error) {
			return b.ReduceSum(x, axes...)
		},
		ReduceProduct: func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error) {
			return b.ReduceProduct(x, axes...)
		},
		ReduceMax: func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error) {
			return b.ReduceMax(x, axes...)
		},
		ReduceMin: func(b backends.Builder, x backends.Op, axes ...int) (backends.Op, error) {
			return b.ReduceMin(x, axes...)
		},
	}
	for trial := range 200 {
		dims := randDims(rng, 1+rng.IntN(4), 7, false)
		axes := randAxes(rng, len(dims))
		if len(axes) == 0 {
			// The backend API reads "no axes" as "all axes"; the kernel reads it literally (the
			// executor expands it), so compare on a non-empty set.
			axes = []int{rng.IntN(len(dims))}
		}
		op := allOps[trial%4]
		src := randFloat32(rng, product(dims))
		if op == ReduceProduct {
			for i := range src {
				src[i] = 1 + src[i]/20
			}
		}
		_, absSum, dstDims := refReduce(src, dims, axes, op)
		want := make([]float32, product(dstDims))
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return builders[op](b, ps[0], axes...)
		})
		got := make([]float32, len(want))
		Reduce(got, src, dims, axes, op)
		n := float64(len(src)) / float64(len(got))
		for i := range got {
			tol := 2.4e-7 * n * absSum[i] // both sides round, in different orders
			if d := math.Abs(float64(got[i] - want[i])); d > tol {
				t.Fatalf("Reduce%s(dims=%v, axes=%v)[%d] = %v, SimpleGo %v", op, dims, axes, i, got[i], want[i])
			}
		}
	}
}

func TestSimpleGoGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(55, 56))
	specs := make([]gatherSpec, 0, 400)
	for _, f := range gatherForms {
		specs = append(specs, f.spec)
	}
	for len(specs) < cap(specs) {
		specs = append(specs, randGatherSpec(rng))
	}
	compared := 0
	defer func() {
		if compared < 150 {
			t.Errorf("only %d of %d Gather specs compared with SimpleGo", compared, len(specs))
		}
	}()
	for trial, g := range specs {
		if product(g.indicesDims) == 0 || product(g.dstDims()) == 0 || g.indexVectorAxis == len(g.indicesDims) || g.indexVectorAxis > len(g.operandDims) {
			// SimpleGo v0.26 fails on empty buffers; its shape inference indexes past the
			// indices' dims for an implicit index vector, and checks indexVectorAxis against
			// the operand's rank instead of the indices'.
			continue
		}
		operand := randFloat32(rng, product(g.operandDims))
		indices := randGatherIndices(rng, g)
		want := make([]float32, product(g.dstDims()))
		sgDims := execSimpleGo(t, []param{{operand, dtypes.Float32, g.operandDims}, {indices, dtypes.Int32, g.indicesDims}}, want,
			func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
				return b.Gather(ps[0], ps[1], g.indexVectorAxis, g.offsetOutputAxes, g.collapsedSliceAxes, g.startIndexMap, g.sliceSizes, false)
			})
		if !slices.Equal(sgDims, g.dstDims()) && !(len(sgDims) == 0 && len(g.dstDims()) == 0) {
			t.Fatalf("trial %d: SimpleGo's Gather shape %v, the test's %v", trial, sgDims, g.dstDims())
		}
		got := make([]float32, len(want))
		Gather(got, operand, g.operandDims, indices, g.indicesDims, g.indexVectorAxis,
			g.offsetOutputAxes, g.collapsedSliceAxes, g.startIndexMap, g.sliceSizes, g.dstDims())
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Gather(%+v, indices %v) = %v, SimpleGo %v", trial, g, indices, got, want)
		}
		compared++
	}
}

func TestSimpleGoScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 58))
	specs := make([]scatterSpec, 0, 400)
	for _, f := range scatterForms {
		specs = append(specs, f.spec)
	}
	for len(specs) < cap(specs) {
		specs = append(specs, randScatterSpec(rng))
	}
	compared := 0
	defer func() {
		if compared < 150 {
			t.Errorf("only %d of %d Scatter specs compared with SimpleGo", compared, len(specs))
		}
	}()
	for trial, s := range specs {
		if product(s.indicesDims) == 0 || product(s.updatesDims) == 0 || !simpleGoScatterCorrect(s) {
			continue
		}
		op := []ReduceOp{ReduceSum, ReduceMax, ReduceMin}[trial%3]
		operand := randFloat32(rng, product(s.operandDims))
		updates := randFloat32(rng, product(s.updatesDims))
		// SimpleGo does not check bounds: in-bounds windows only (skipping is tested above).
		indices := randScatterIndices(rng, s, true)
		want := make([]float32, len(operand))
		execSimpleGo(t, []param{{operand, dtypes.Float32, s.operandDims}, {indices, dtypes.Int32, s.indicesDims}, {updates, dtypes.Float32, s.updatesDims}}, want,
			func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
				switch op {
				case ReduceMax:
					return b.ScatterMax(ps[0], ps[1], ps[2], s.indexVectorAxis, s.updateWindowAxes, s.insertedWindowAxes, s.scatterAxesToOperandAxes, false, false)
				case ReduceMin:
					return b.ScatterMin(ps[0], ps[1], ps[2], s.indexVectorAxis, s.updateWindowAxes, s.insertedWindowAxes, s.scatterAxesToOperandAxes, false, false)
				}
				return b.ScatterSum(ps[0], ps[1], ps[2], s.indexVectorAxis, s.updateWindowAxes, s.insertedWindowAxes, s.scatterAxesToOperandAxes, false, false)
			})
		got := slices.Clone(operand)
		runScatter(op, got, s, indices, updates, 0)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Scatter%s(%+v, indices %v) = %v, SimpleGo %v", trial, op, s, indices, got, want)
		}
		compared++
	}
}

func TestSimpleGoLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(59, 60))
	for trial := range 100 {
		dims := randDims(rng, 1+rng.IntN(4), 5, false)
		src := randFloat32(rng, product(dims))
		rank := len(dims)

		// Slice.
		starts, limits, strides := make([]int, rank), make([]int, rank), make([]int, rank)
		for i, d := range dims {
			starts[i] = rng.IntN(d)
			limits[i] = starts[i] + 1 + rng.IntN(d-starts[i])
			strides[i] = 1 + rng.IntN(3)
		}
		want := make([]float32, product(sliceDims(starts, limits, strides)))
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return b.Slice(ps[0], starts, limits, strides)
		})
		got := make([]float32, len(want))
		Slice(got, src, dims, starts, limits, strides)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Slice differs from SimpleGo", trial)
		}

		// Concatenate with itself along a random axis.
		axis := rng.IntN(rank)
		want = make([]float32, 2*len(src))
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return b.Concatenate(axis, ps[0], ps[0])
		})
		got = make([]float32, len(want))
		Concatenate(got, [][]float32{src, src}, [][]int{dims, dims}, axis)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Concatenate differs from SimpleGo", trial)
		}

		// BroadcastInDim into one more leading and one more trailing axis.
		dst := append(append([]int{3}, dims...), 2)
		bAxes := make([]int, rank)
		for i := range bAxes {
			bAxes[i] = i + 1
		}
		want = make([]float32, product(dst))
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return b.BroadcastInDim(ps[0], shapes.Make(dtypes.Float32, dst...), bAxes)
		})
		got = make([]float32, len(want))
		BroadcastInDim(got, src, dims, dst, bAxes)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: BroadcastInDim differs from SimpleGo", trial)
		}

		// ArgMinMax and Iota along a random axis.
		isMin := trial%2 == 0
		wantIdx := make([]int32, len(src)/dims[axis])
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, wantIdx, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return b.ArgMinMax(ps[0], axis, dtypes.Int32, isMin)
		})
		gotIdx := make([]int32, len(wantIdx))
		ArgMinMax(gotIdx, src, dims, axis, isMin)
		if !slices.Equal(gotIdx, wantIdx) {
			t.Fatalf("trial %d: ArgMinMax differs from SimpleGo", trial)
		}
		want = make([]float32, len(src))
		execSimpleGo(t, []param{{src, dtypes.Float32, dims}}, want, func(b backends.Builder, ps []backends.Op) (backends.Op, error) {
			return b.Iota(shapes.Make(dtypes.Float32, dims...), axis)
		})
		got = make([]float32, len(src))
		Iota(got, dims, axis)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Iota differs from SimpleGo", trial)
		}
	}
}

// simpleGoScatterCorrect reports whether SimpleGo v0.26 scatters s correctly. It walks each
// window with an iterator over the operand's full dims, so a window narrower than the operand on
// any but its outermost axis wraps into the wrong elements: e.g. a window [2,1,3] at (0,9,4) of
// a [2,10,10] operand writes (0,9,7..9) instead of (1,9,4..6). That is the form of the gradient
// of GatherSlices; the kernel follows the XLA definition there (TestScatterForms checks it
// against the reference). Compare only where SimpleGo's windows span the inner axes in full,
// which includes graph.ScatterSum's form and the gradient of graph.Gather.
func simpleGoScatterCorrect(s scatterSpec) bool {
	w := s.windowSizes()
	first := true
	for a, d := range s.operandDims {
		if slices.Contains(s.insertedWindowAxes, a) {
			continue
		}
		if !first && w[a] != d {
			return false
		}
		first = false
	}
	return true
}
