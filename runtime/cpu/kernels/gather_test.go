package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gatherForms are the forms GoMLX emits and the edge cases of the XLA definition.
var gatherForms = []struct {
	name    string
	spec    gatherSpec
	indices []int32
}{
	{
		// graph.Gather of rows: the embedding lookup, indices at and beyond both boundaries.
		name:    "embedding lookup",
		spec:    gatherSpec{[]int{5, 3}, []int{7, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 3}},
		indices: []int32{0, 4, 5, -1, 100, 2, 2},
	},
	{
		// The same with the index vector implicit (indexVectorAxis == rank of indices).
		name:    "implicit index vector",
		spec:    gatherSpec{[]int{5, 3}, []int{4}, 1, []int{1}, []int{0}, []int{0}, []int{1, 3}},
		indices: []int32{4, 0, -3, 9},
	},
	{
		// Take-along-axis: x[b, idx[b,k]] with (b, idx) index pairs, both axes collapsed.
		name:    "take along axis",
		spec:    gatherSpec{[]int{3, 6}, []int{3, 2, 2}, 2, nil, []int{0, 1}, []int{0, 1}, []int{1, 1}},
		indices: []int32{0, 5, 0, 0, 1, 3, 1, 6, 2, -1, 2, 2},
	},
	{
		// Index vector first, start map out of order, the offset axis before the batch axis.
		name:    "index vector axis not last",
		spec:    gatherSpec{[]int{4, 5, 6}, []int{2, 3}, 0, []int{0}, []int{2, 0}, []int{2, 0}, []int{1, 5, 1}},
		indices: []int32{5, 0, 2, 3, 9, -1},
	},
	{
		// Several collapsed axes with slices of size 2 in between.
		name:    "several collapsed axes",
		spec:    gatherSpec{[]int{4, 3, 5, 2}, []int{3, 2, 2}, 2, []int{2, 3}, []int{0, 2}, []int{0, 2}, []int{1, 2, 1, 2}},
		indices: []int32{0, 0, 3, 4, 1, 2, 2, 1, 3, 0, 0, 4},
	},
	{
		// graph.GatherSlices: no collapsed axis, slices clamped at the far boundary.
		name:    "gather slices",
		spec:    gatherSpec{[]int{3, 10, 10}, []int{2, 2}, 1, []int{1, 2, 3}, nil, []int{1, 2}, []int{3, 1, 3}},
		indices: []int32{0, 3, 9, 8},
	},
	{
		name:    "scalar result",
		spec:    gatherSpec{[]int{5}, nil, 0, nil, []int{0}, []int{0}, []int{1}},
		indices: []int32{3},
	},
	{
		name:    "no indices",
		spec:    gatherSpec{[]int{5, 3}, []int{0, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 3}},
		indices: []int32{},
	},
}

func TestGatherForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tc := range gatherForms {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.spec
			operand := randData(rng, product(g.operandDims))
			want := refGather(g, operand, tc.indices)
			got := make([]float64, len(want))
			Gather(got, operand, g.operandDims, tc.indices, g.indicesDims, g.indexVectorAxis,
				g.offsetOutputAxes, g.collapsedSliceAxes, g.startIndexMap, g.sliceSizes, g.dstDims())
			if !slices.Equal(got, want) {
				t.Errorf("Gather = %v, want %v", got, want)
			}
		})
	}
}

func TestGatherKnownValues(t *testing.T) {
	// Rows of a 4×2 table, indices clamped: -1 → row 0, 7 → row 3.
	table := []float32{0, 1, 10, 11, 20, 21, 30, 31}
	got := make([]float32, 6)
	Gather(got, table, []int{4, 2}, []int64{2, -1, 7}, []int{3, 1}, 1, []int{1}, []int{0}, []int{0}, []int{1, 2}, []int{3, 2})
	if want := []float32{20, 21, 0, 1, 30, 31}; !slices.Equal(got, want) {
		t.Errorf("Gather = %v, want %v", got, want)
	}
}

func TestGatherRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for trial := range 1000 {
		g := randGatherSpec(rng)
		operand := randData(rng, product(g.operandDims))
		indices := randGatherIndices(rng, g)
		want := refGather(g, operand, indices)
		got := make([]float64, len(want))
		Gather(got, operand, g.operandDims, indices, g.indicesDims, g.indexVectorAxis,
			g.offsetOutputAxes, g.collapsedSliceAxes, g.startIndexMap, g.sliceSizes, g.dstDims())
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Gather(%+v, indices %v) = %v, want %v", trial, g, indices, got, want)
		}
	}
}

func TestGatherIndexTypes(t *testing.T) {
	// Extreme index values of every width clamp instead of wrapping.
	table := []float64{0, 1, 2, 3, 4}
	check := func(name string, got []float64, want []float64) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	want := []float64{0, 4, 4}
	run := func(indices any) []float64 {
		got := make([]float64, 3)
		spec := func(gatherFn func()) []float64 { gatherFn(); return got }
		switch ix := indices.(type) {
		case []int8:
			return spec(func() { Gather(got, table, []int{5}, ix, []int{3}, 1, nil, []int{0}, []int{0}, []int{1}, []int{3}) })
		case []uint8:
			return spec(func() { Gather(got, table, []int{5}, ix, []int{3}, 1, nil, []int{0}, []int{0}, []int{1}, []int{3}) })
		case []int64:
			return spec(func() { Gather(got, table, []int{5}, ix, []int{3}, 1, nil, []int{0}, []int{0}, []int{1}, []int{3}) })
		case []uint64:
			return spec(func() { Gather(got, table, []int{5}, ix, []int{3}, 1, nil, []int{0}, []int{0}, []int{1}, []int{3}) })
		}
		return nil
	}
	check("int8", run([]int8{math.MinInt8, 4, math.MaxInt8}), want)
	check("uint8", run([]uint8{0, 4, math.MaxUint8}), want)
	check("int64", run([]int64{math.MinInt64, 4, math.MaxInt64}), want)
	check("uint64", run([]uint64{0, math.MaxUint64 - 1, 1 << 63}), want)
}

// scatterForms are the forms GoMLX emits (graph.ScatterSum, the gradient of Gather and of
// GatherSlices) and edge cases.
var scatterForms = []struct {
	name    string
	spec    scatterSpec
	indices []int32
}{
	{
		// The embedding gradient: rows added into a table; repeated rows accumulate, rows at -1
		// and past the end are skipped.
		name:    "embedding gradient",
		spec:    scatterSpec{[]int{5, 3}, []int{7, 1}, []int{7, 3}, 1, []int{1}, []int{0}, []int{0}},
		indices: []int32{0, 4, 5, -1, 2, 2, 2},
	},
	{
		// Scalars into a vector: every operand axis inserted, single-element windows.
		name:    "scalars into vector",
		spec:    scatterSpec{[]int{6}, []int{5}, []int{5}, 1, nil, []int{0}, []int{0}},
		indices: []int32{1, 1, 5, 6, 0},
	},
	{
		// The gradient of GatherSlices: overlapping windows, one past the end skipped entirely.
		name:    "gather slices gradient",
		spec:    scatterSpec{[]int{3, 10, 10}, []int{3, 2}, []int{3, 3, 1, 3}, 1, []int{1, 2, 3}, nil, []int{1, 2}},
		indices: []int32{0, 3, 0, 4, 9, 8},
	},
	{
		// Index vector first, start map out of order, window axis before the batch axis.
		name:    "index vector axis not last",
		spec:    scatterSpec{[]int{4, 5, 6}, []int{2, 3}, []int{5, 3}, 0, []int{0}, []int{0, 2}, []int{2, 0}},
		indices: []int32{5, 0, 2, 3, 3, 1},
	},
}

func TestScatterForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, tc := range scatterForms {
		for _, op := range []ReduceOp{ReduceSum, ReduceMax, ReduceMin} {
			t.Run(tc.name+"/"+op.String(), func(t *testing.T) {
				s := tc.spec
				operand := randData(rng, product(s.operandDims))
				updates := randData(rng, product(s.updatesDims))
				want := refScatter(s, op, operand, tc.indices, updates)
				got := slices.Clone(operand)
				runScatter(op, got, s, tc.indices, updates, 0)
				if !slices.Equal(got, want) {
					t.Errorf("Scatter%s = %v, want %v", op, got, want)
				}
			})
		}
	}
}

func TestScatterSumRepeated(t *testing.T) {
	operand := []float32{1, 2, 3}
	ScatterSum(operand, []int{3}, []uint8{2, 0, 2, 2, 3}, []int{5, 1}, []float32{10, 20, 30, 40, 1000}, []int{5}, 1, nil, []int{0}, []int{0})
	if want := []float32{21, 2, 83}; !slices.Equal(operand, want) {
		t.Errorf("ScatterSum = %v, want %v", operand, want)
	}
}

func TestScatterRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	for trial := range 1000 {
		s := randScatterSpec(rng)
		op := []ReduceOp{ReduceSum, ReduceMax, ReduceMin}[trial%3]
		operand := randData(rng, product(s.operandDims))
		updates := randData(rng, product(s.updatesDims))
		indices := randScatterIndices(rng, s, false)
		want := refScatter(s, op, operand, indices, updates)
		for _, workers := range []int{1, 3} {
			got := slices.Clone(operand)
			runScatter(op, got, s, indices, updates, workers)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d, %d workers: Scatter%s(%+v, indices %v) = %v, want %v", trial, workers, op, s, indices, got, want)
			}
		}
	}
}

func TestScatterIntegers(t *testing.T) {
	// Integer sums wrap like the reference's, max/min use the integer order.
	rng := rand.New(rand.NewPCG(29, 30))
	for trial := range 200 {
		s := randScatterSpec(rng)
		op := []ReduceOp{ReduceSum, ReduceMax, ReduceMin}[trial%3]
		operand := make([]int16, product(s.operandDims))
		updates := make([]int16, product(s.updatesDims))
		for i := range operand {
			operand[i] = int16(rng.IntN(1 << 16))
		}
		for i := range updates {
			updates[i] = int16(rng.IntN(1 << 16))
		}
		indices := randScatterIndices(rng, s, false)
		want := refScatter(s, op, operand, indices, updates)
		got := slices.Clone(operand)
		runScatter(op, got, s, indices, updates, 0)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Scatter%s[int16] = %v, want %v", trial, op, got, want)
		}
	}
}

// runScatter calls the public kernel (workers == 0) or the internal one with a forced worker
// count.
func runScatter[T Number, I Index](op ReduceOp, operand []T, s scatterSpec, indices []I, updates []T, workers int) {
	if workers == 0 {
		fn := map[ReduceOp]func([]T, []int, []I, []int, []T, []int, int, []int, []int, []int){
			ReduceSum: ScatterSum[T, I], ReduceMax: ScatterMax[T, I], ReduceMin: ScatterMin[T, I],
		}[op]
		fn(operand, s.operandDims, indices, s.indicesDims, updates, s.updatesDims, s.indexVectorAxis,
			s.updateWindowAxes, s.insertedWindowAxes, s.scatterAxesToOperandAxes)
		return
	}
	scatter(op, operand, s.operandDims, indices, s.indicesDims, updates, s.updatesDims, s.indexVectorAxis,
		s.updateWindowAxes, s.insertedWindowAxes, s.scatterAxesToOperandAxes, workers)
}
