package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Every kernel must give bit-identical results whatever the number of workers: the internal
// functions take the worker count, forced here (the public ones use GOMAXPROCS above a size
// threshold).

var workerCounts = []int{2, 3, 5, 8}

func bitsEqual32(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func TestWorkersReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	shapes := [][]int{{300, 200}, {40, 1200}, {3, 20, 600}, {4, 64, 96}, {2, 3, 50, 7}, {1000}, {5, 1, 300}}
	for _, dims := range shapes {
		src := make([]float32, product(dims))
		for i := range src {
			src[i] = float32(rng.NormFloat64())
		}
		for mask := range 1 << len(dims) {
			var axes []int
			for a := range dims {
				if mask&(1<<a) != 0 {
					axes = append(axes, a)
				}
			}
			outN := 1
			for a, d := range dims {
				if !slices.Contains(axes, a) {
					outN *= d
				}
			}
			for _, op := range []ReduceOp{ReduceSum, ReduceMax} {
				one := make([]float32, outN)
				reduce(one, src, dims, axes, op, 1)
				for _, w := range workerCounts {
					many := make([]float32, outN)
					reduce(many, src, dims, axes, op, w)
					if !bitsEqual32(one, many) {
						t.Fatalf("Reduce%s(dims=%v, axes=%v): %d workers differ from 1", op, dims, axes, w)
					}
				}
			}
		}
	}
}

func TestWorkersArgMinMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	dims := []int{6, 70, 300}
	src := randData(rng, product(dims))
	for axis := range dims {
		n := len(src) / dims[axis]
		one := make([]int32, n)
		argMinMax(one, src, dims, axis, true, 1)
		for _, w := range workerCounts {
			many := make([]int32, n)
			argMinMax(many, src, dims, axis, true, w)
			if !slices.Equal(one, many) {
				t.Fatalf("ArgMin(axis %d): %d workers differ from 1", axis, w)
			}
		}
	}
}

func TestWorkersLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	dims := []int{4, 33, 5, 70}
	src := randData(rng, product(dims))
	n := len(src)
	check := func(name string, fn func(dst []float64, workers int)) {
		t.Helper()
		one := make([]float64, n*4)
		fn(one, 1)
		for _, w := range workerCounts {
			many := make([]float64, n*4)
			fn(many, w)
			if !slices.Equal(one, many) {
				t.Fatalf("%s: %d workers differ from 1", name, w)
			}
		}
	}
	for _, perm := range permutations(4) {
		check("Transpose", func(dst []float64, w int) { transpose(dst[:n], src, dims, perm, w) })
	}
	check("BroadcastInDim", func(dst []float64, w int) {
		broadcastInDim(dst, src, dims, []int{4, 4, 33, 5, 70}, []int{1, 2, 3, 4}, w)
	})
	check("BroadcastInDim middle", func(dst []float64, w int) {
		broadcastInDim(dst[:4*33*70], src[:33], []int{33}, []int{4, 33, 70}, []int{1}, w)
	})
	check("Slice", func(dst []float64, w int) {
		slice(dst[:2*11*5*35], src, dims, []int{1, 0, 0, 1}, []int{4, 33, 5, 70}, []int{2, 3, 1, 2}, w)
	})
	check("Concatenate axis 0", func(dst []float64, w int) {
		concatenate(dst[:2*n], [][]float64{src, src}, [][]int{dims, dims}, 0, w)
	})
	check("Concatenate axis 2", func(dst []float64, w int) {
		concatenate(dst[:2*n], [][]float64{src, src}, [][]int{dims, dims}, 2, w)
	})
	check("Pad", func(dst []float64, w int) {
		axes := []PadAxis{{1, -1, 0}, {0, 2, 1}, {-2, 0, 0}, {3, 3, 0}}
		pad(dst[:product(padDims(dims, axes))], src, dims, 0.5, axes, w)
	})
	check("Reverse", func(dst []float64, w int) { reverse(dst[:n], src, dims, []int{1, 3}, w) })
	check("Iota", func(dst []float64, w int) { iotaFill(dst[:n], dims, 2, w) })
}

func TestWorkersGatherScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	// Embedding form on a larger table, then the random specs.
	table := randData(rng, 64*40)
	idx := make([]int32, 300)
	for i := range idx {
		idx[i] = int32(rng.IntN(70) - 3)
	}
	one := make([]float64, 300*40)
	gather(one, table, []int{64, 40}, idx, []int{300, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 40}, []int{300, 40}, 1)
	for _, w := range workerCounts {
		many := make([]float64, len(one))
		gather(many, table, []int{64, 40}, idx, []int{300, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 40}, []int{300, 40}, w)
		if !slices.Equal(one, many) {
			t.Fatalf("Gather: %d workers differ from 1", w)
		}
	}
	emb := scatterSpec{[]int{64, 40}, []int{300, 1}, []int{300, 40}, 1, []int{1}, []int{0}, []int{0}}
	updates := randData(rng, 300*40)
	specs := []scatterSpec{emb}
	for range 200 {
		specs = append(specs, randScatterSpec(rng))
	}
	for i, s := range specs {
		operand := randData(rng, product(s.operandDims))
		up := updates[:product(s.updatesDims)]
		if i > 0 {
			up = randData(rng, product(s.updatesDims))
		}
		ix := idx
		if i > 0 {
			ix = randScatterIndices(rng, s, false)
		}
		for _, op := range []ReduceOp{ReduceSum, ReduceMin} {
			one := slices.Clone(operand)
			runScatter(op, one, s, ix, up, 1)
			for _, w := range workerCounts {
				many := slices.Clone(operand)
				runScatter(op, many, s, ix, up, w)
				if !slices.Equal(one, many) {
					t.Fatalf("Scatter%s(%+v): %d workers differ from 1", op, s, w)
				}
			}
		}
	}
}
