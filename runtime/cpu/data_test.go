package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func TestLayoutOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	x := randF32(rng, 2, 3, 4)
	cases := []struct {
		name   string
		fn     any
		inputs []any
	}{
		{"Reshape", func(x *graph.Node) *graph.Node { return graph.Reshape(x, 4, -1) }, []any{x}},
		{"Reshape-then-Exp", func(x *graph.Node) *graph.Node { return graph.Exp(graph.Reshape(x, 6, 4)) }, []any{x}},
		{"Reshape-output-and-input", func(x *graph.Node) (*graph.Node, *graph.Node) {
			return graph.Reshape(x, 24), graph.Neg(x)
		}, []any{x}},
		{"Transpose", func(x *graph.Node) *graph.Node { return graph.TransposeAllDims(x, 2, 0, 1) }, []any{x}},
		{"Transpose-negative-axes", func(x *graph.Node) *graph.Node { return graph.Transpose(x, -1, 0) }, []any{x}},
		{"Transpose-bool", func(x *graph.Node) *graph.Node { return graph.TransposeAllDims(x, 1, 0) }, []any{randTensor(rng, dtypes.Bool, 3, 5)}},
		{"Transpose-empty", func(x *graph.Node) *graph.Node { return graph.TransposeAllDims(x, 1, 0) }, []any{randF32(rng, 0, 5)}},
		{"BroadcastToDims", func(x *graph.Node) *graph.Node { return graph.BroadcastToDims(x, 2, 3, 4) }, []any{randF32(rng, 1, 3, 1)}},
		{"BroadcastPrefix", func(x *graph.Node) *graph.Node { return graph.BroadcastPrefix(x, 5) }, []any{x}},
		{"Broadcast-scalar", func(x *graph.Node) *graph.Node { return graph.BroadcastToDims(x, 3, 3) }, []any{randF32(rng)}},
		{"ExpandAndBroadcast", func(x *graph.Node) *graph.Node {
			return graph.ExpandAndBroadcast(x, []int{2, 4, 3}, []int{1})
		}, []any{randF32(rng, 2, 3)}},
		{"Slice", func(x *graph.Node) *graph.Node {
			return graph.Slice(x, graph.AxisRange(1, 2), graph.AxisRange(), graph.AxisRange(0, 4).Stride(2))
		}, []any{x}},
		{"Slice-negative", func(x *graph.Node) *graph.Node {
			return graph.Slice(x, graph.AxisRange(-1), graph.AxisRange(-2))
		}, []any{x}},
		{"Slice-int32", func(x *graph.Node) *graph.Node { return graph.Slice(x, graph.AxisRange(1, 3)) }, []any{randTensor(rng, dtypes.Int32, 5)}},
		{"Concatenate", func(a, b *graph.Node) *graph.Node { return graph.Concatenate([]*graph.Node{a, b, a}, 1) },
			[]any{randF32(rng, 2, 3, 4), randF32(rng, 2, 1, 4)}},
		{"Concatenate-last-negative", func(a, b *graph.Node) *graph.Node { return graph.Concatenate([]*graph.Node{a, b}, -1) },
			[]any{randF32(rng, 2, 3), randF32(rng, 2, 5)}},
		{"Iota-float", func(g *graph.Graph) *graph.Node { return graph.Iota(g, shapes.Make(dtypes.Float32, 3, 4), 1) }, nil},
		{"Iota-int64", func(g *graph.Graph) *graph.Node { return graph.Iota(g, shapes.Make(dtypes.Int64, 3, 4), 0) }, nil},
		{"IotaFull", func(g *graph.Graph) *graph.Node { return graph.IotaFull(g, shapes.Make(dtypes.Int32, 7)) }, nil},
		{"Const-and-Where", func(x *graph.Node) *graph.Node {
			return graph.Where(graph.GreaterThan(x, graph.ScalarZero(x.Graph(), x.DType())), x, graph.Const(x.Graph(), float32(-7)))
		}, []any{x}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, c.fn, c.inputs...) })
	}
}

func TestReductions(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	type reduceFn = func(*graph.Node, ...int) *graph.Node
	ops := map[string]reduceFn{
		"Sum": graph.ReduceSum, "Max": graph.ReduceMax, "Min": graph.ReduceMin, "Product": graph.ReduceMultiply,
	}
	axesCases := [][]int{nil, {0}, {-1}, {0, 2}, {2, 0}, {1}, {0, 1, 2}}
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64} {
		for name, fn := range ops {
			for _, axes := range axesCases {
				x := randTensor(rng, dt, 3, 4, 5)
				if name == "Product" && dt.IsFloat() {
					x = scaled(x, 0.5)
				}
				t.Run(name+"/"+dt.String(), func(t *testing.T) {
					check(t, func(x *graph.Node) *graph.Node { return fn(x, axes...) }, x)
				})
			}
		}
	}
	// Multiples of 1/8 sum exactly in any order, so the large (multi-worker) reductions are
	// compared exactly even though their summation order differs from SimpleGo's.
	exact := scaled(indicesAs(rng, dtypes.Float32, -64, 64, 300, 300), 0.125)
	t.Run("Sum-large-last-axis", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node { return graph.ReduceSum(x, -1) }, exact)
	})
	t.Run("Sum-large-first-axis", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node { return graph.ReduceSum(x, 0) }, exact)
	})
	t.Run("Max-empty-axis", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node { return graph.ReduceMax(x, 1) }, randF32(rng, 3, 0))
	})
	t.Run("Sum-empty-axis", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node { return graph.ReduceSum(x, 0) }, randF32(rng, 0, 3))
	})
	t.Run("Sum-scalar", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node { return graph.ReduceAllSum(x) }, randF32(rng))
	})
	for _, axis := range []int{0, 1, -1} {
		x := indicesAs(rng, dtypes.Float32, 0, 3, 4, 6) // ties: the first index must win
		t.Run("ArgMax", func(t *testing.T) {
			check(t, func(x *graph.Node) *graph.Node { return graph.ArgMax(x, axis) }, x)
		})
		t.Run("ArgMin-int64", func(t *testing.T) {
			check(t, func(x *graph.Node) *graph.Node { return graph.ArgMin(x, axis, dtypes.Int64) }, x)
		})
		t.Run("ArgMax-int32-input", func(t *testing.T) {
			check(t, func(x *graph.Node) *graph.Node { return graph.ArgMax(x, axis) }, randTensor(rng, dtypes.Int32, 4, 6))
		})
	}
}

func TestGatherAndScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	table := randF32(rng, 10, 6)
	gather := func(x, idx *graph.Node) *graph.Node { return graph.Gather(x, idx) }
	cases := []struct {
		name   string
		fn     any
		inputs []any
	}{
		// Embedding lookup: indices [B,T,1] into a [V,D] table.
		{"Gather-embedding", gather, []any{table, indices(rng, 0, 10, 4, 5, 1)}},
		// Out of range and negative indices are clamped.
		{"Gather-clamped", gather, []any{table, tensors.FromValue([][]int32{{-3}, {9}, {10}, {100}})}},
		{"Gather-int64-indices", gather, []any{table, tensors.FromValue([][]int64{{1}, {3}})}},
		{"Gather-two-axes", gather, []any{randF32(rng, 5, 6, 3), indices(rng, 0, 5, 7, 2)}},
		{"Gather-full-index", gather, []any{randF32(rng, 5, 6), indices(rng, 0, 5, 3, 2)}},
		{"Gather-int32-values", gather, []any{randTensor(rng, dtypes.Int32, 8, 2), indices(rng, 0, 8, 3, 1)}},
		{"GatherSlices", func(x, start *graph.Node) *graph.Node {
			return graph.GatherSlices(x, []int{1}, start, []int{3}, false)
		}, []any{randF32(rng, 4, 10), indices(rng, 0, 10, 5, 1)}},
		{"Gather-index-vector-not-last", func(x, idx *graph.Node) *graph.Node {
			// indexVectorAxis 0: indices [1, N] select rows.
			return graph.BackendGather(x, idx, 0, []int{1}, []int{0}, []int{0}, []int{1, 6}, false)
		}, []any{table, indices(rng, 0, 10, 1, 4)}},
		{"ScatterSum-repeated", func(x, idx, upd *graph.Node) *graph.Node { return graph.ScatterSum(x, idx, upd, false, false) },
			[]any{randF32(rng, 6, 3), tensors.FromValue([][]int32{{1}, {4}, {1}, {1}, {0}}), randF32(rng, 5, 3)}},
		{"ScatterMax", func(x, idx, upd *graph.Node) *graph.Node { return graph.ScatterMax(x, idx, upd, false, false) },
			[]any{randF32(rng, 6, 3), indices(rng, 0, 6, 8, 1), randF32(rng, 8, 3)}},
		{"ScatterMin", func(x, idx, upd *graph.Node) *graph.Node { return graph.ScatterMin(x, idx, upd, false, false) },
			[]any{randF32(rng, 6, 3), indices(rng, 0, 6, 8, 1), randF32(rng, 8, 3)}},
		{"ScatterSum-int32-2d-index", func(x, idx, upd *graph.Node) *graph.Node { return graph.ScatterSum(x, idx, upd, false, false) },
			[]any{randTensor(rng, dtypes.Int32, 4, 5), indices(rng, 0, 4, 7, 2), randTensor(rng, dtypes.Int32, 7)}},
		{"ScatterSum-large", func(x, idx, upd *graph.Node) *graph.Node { return graph.ScatterSum(x, idx, upd, false, false) },
			[]any{randF32(rng, 300, 256), indices(rng, 0, 300, 600, 1), randF32(rng, 600, 256)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, c.fn, c.inputs...) })
	}
}

func TestDotGeneral(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	cases := []struct {
		name     string
		fn       any
		lhs, rhs []int
	}{
		{"matmul", graph.Dot, []int{5, 7}, []int{7, 3}},
		{"matvec", graph.Dot, []int{5, 7}, []int{7}},
		{"vecvec", graph.Dot, []int{7}, []int{7}},
		{"batched", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bij,bjk->bik", a, b) }, []int{3, 4, 5}, []int{3, 5, 6}},
		{"transA", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bji,bjk->bik", a, b) }, []int{3, 5, 4}, []int{3, 5, 6}},
		{"transB", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bij,bkj->bik", a, b) }, []int{3, 4, 5}, []int{3, 6, 5}},
		{"batch-in-middle", func(a, b *graph.Node) *graph.Node { return graph.Einsum("ibj,bkj->bik", a, b) }, []int{4, 3, 5}, []int{3, 6, 5}},
		{"batch-last", func(a, b *graph.Node) *graph.Node { return graph.Einsum("ijb,jkb->bik", a, b) }, []int{4, 5, 3}, []int{5, 6, 3}},
		{"two-contracting", func(a, b *graph.Node) *graph.Node { return graph.Einsum("ijk,jkl->il", a, b) }, []int{4, 3, 5}, []int{3, 5, 2}},
		{"two-contracting-swapped", func(a, b *graph.Node) *graph.Node { return graph.Einsum("ijk,kjl->il", a, b) }, []int{4, 3, 5}, []int{5, 3, 2}},
		{"attention-scores", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bhqd,bhkd->bhqk", a, b) }, []int{2, 3, 8, 4}, []int{2, 3, 8, 4}},
		{"attention-values", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bhqk,bhkd->bqhd", a, b) }, []int{2, 3, 8, 8}, []int{2, 3, 8, 4}},
		{"weights-out-in", func(a, b *graph.Node) *graph.Node { return graph.Einsum("btd,od->bto", a, b) }, []int{2, 5, 8}, []int{6, 8}},
		{"outer", func(a, b *graph.Node) *graph.Node { return graph.Einsum("i,j->ij", a, b) }, []int{4}, []int{3}},
		{"large", graph.Dot, []int{130, 300}, []int{300, 170}},
		// Products blas.Sgemm splits across cores (by rows or by columns), with A or B transposed,
		// and a batch of small products run in parallel.
		{"medium-transA", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bji,bjk->bik", a, b) }, []int{3, 200, 70}, []int{3, 200, 90}},
		{"medium-transB", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bij,bkj->bik", a, b) }, []int{3, 70, 200}, []int{3, 90, 200}},
		{"medium-columns", func(a, b *graph.Node) *graph.Node { return graph.Einsum("ij,kj->ik", a, b) }, []int{8, 256}, []int{2048, 256}},
		{"small-batch", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bij,bkj->bik", a, b) }, []int{32, 1, 256}, []int{32, 64, 256}},
		// Batch axes between the matrix axes: float32 items are read in place (strided).
		{"strided-scores", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bqhd,bkhd->bhqk", a, b) }, []int{2, 8, 3, 4}, []int{2, 8, 3, 4}},
		{"strided-values", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bhqk,bkhd->bhqd", a, b) }, []int{2, 3, 8, 8}, []int{2, 8, 3, 4}},
		{"strided-transA", func(a, b *graph.Node) *graph.Node { return graph.Einsum("bjhi,bhjk->bhik", a, b) }, []int{2, 5, 3, 4}, []int{2, 3, 5, 6}},
		{"explicit-axes", func(a, b *graph.Node) *graph.Node {
			return graph.DotGeneral(a, []int{-1}, []int{0}, b, []int{1}, []int{0})
		}, []int{3, 4, 5}, []int{3, 5, 6}},
	}
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64} {
		for _, c := range cases {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				a, b := randTensor(rng, dt, c.lhs...), randTensor(rng, dt, c.rhs...)
				if c.name == "large" || strings.HasPrefix(c.name, "medium") || c.name == "small-batch" {
					// Multiples of 1/8 up to 8: every partial sum is exact in float32, so
					// OpenBLAS's summation order cannot differ from SimpleGo's.
					a, b = scaled(indicesAs(rng, dt, -64, 64, c.lhs...), 0.125), scaled(indicesAs(rng, dt, -64, 64, c.rhs...), 0.125)
				}
				check(t, c.fn, a, b)
			})
		}
	}
	// SimpleGo's batched int32 DotGeneral panics (index out of range in dotgeneral_large.go),
	// so integer products are checked against SimpleGo's float64 product of the same small
	// integers, which is exact.
	cpu, ref := testBackends()
	for _, c := range cases {
		t.Run(c.name+"/Int32", func(t *testing.T) {
			fn := c.fn.(func(a, b *graph.Node) *graph.Node)
			a, b := randTensor(rng, dtypes.Int32, c.lhs...), randTensor(rng, dtypes.Int32, c.rhs...)
			want, err := run(t, ref, func(a, b *graph.Node) *graph.Node {
				return fn(graph.ConvertDType(a, dtypes.Float64), graph.ConvertDType(b, dtypes.Float64))
			}, localClones([]any{a, b})...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(t, cpu, func(a, b *graph.Node) *graph.Node {
				return graph.ConvertDType(fn(a, b), dtypes.Float64)
			}, localClones([]any{a, b})...)
			if err != nil {
				t.Fatal(err)
			}
			requireClose(t, c.name, got[0], want[0])
		})
	}
}

// TestAgainstHandWrittenValues checks what SimpleGo cannot serve as a reference for (Pad and
// Reverse, which it lacks; out-of-bounds scatter and empty concatenation, where it panics)
// against values written out by hand.
func TestAgainstHandWrittenValues(t *testing.T) {
	cpu, _ := testBackends()
	x := tensors.FromValue([][]float32{{1, 2, 3}, {4, 5, 6}})
	cases := []struct {
		name  string
		fn    any
		want  *tensors.Tensor
		extra []any
	}{
		{"Pad", func(x *graph.Node) *graph.Node {
			return graph.Pad(x, graph.Const(x.Graph(), float32(-1)), backends.PadAxis{Start: 1}, backends.PadAxis{End: 1, Interior: 1})
		}, tensors.FromValue([][]float32{{-1, -1, -1, -1, -1, -1}, {1, -1, 2, -1, 3, -1}, {4, -1, 5, -1, 6, -1}}), nil},
		{"Pad-negative-crops", func(x *graph.Node) *graph.Node {
			return graph.Pad(x, graph.Const(x.Graph(), float32(0)), backends.PadAxis{}, backends.PadAxis{Start: -1, End: 1})
		}, tensors.FromValue([][]float32{{2, 3, 0}, {5, 6, 0}}), nil},
		{"Reverse", func(x *graph.Node) *graph.Node { return graph.Reverse(x, 1) },
			tensors.FromValue([][]float32{{3, 2, 1}, {6, 5, 4}}), nil},
		{"Reverse-both-negative", func(x *graph.Node) *graph.Node { return graph.Reverse(x, 0, -1) },
			tensors.FromValue([][]float32{{6, 5, 4}, {3, 2, 1}}), nil},
		{"Concatenate-empty", func(x, e *graph.Node) *graph.Node { return graph.Concatenate([]*graph.Node{e, x, e}, 0) },
			x, []any{tensors.FromShape(shapes.Make(dtypes.Float32, 0, 3))}},
		{"Dot-empty-rows", func(x, e *graph.Node) *graph.Node { return graph.Dot(e, x) },
			tensors.FromShape(shapes.Make(dtypes.Float32, 0, 3)), []any{tensors.FromShape(shapes.Make(dtypes.Float32, 0, 2))}},
		{"Dot-empty-contraction", func(x, a, b *graph.Node) *graph.Node { return graph.Add(graph.Dot(a, b), x) },
			x, []any{tensors.FromShape(shapes.Make(dtypes.Float32, 2, 0)), tensors.FromShape(shapes.Make(dtypes.Float32, 0, 3))}},
		// Row 2 and row -1 are out of bounds: skipped. Row 1 gets two updates.
		{"ScatterSum-out-of-bounds-skipped", func(x, idx, upd *graph.Node) *graph.Node {
			return graph.ScatterSum(x, idx, upd, false, false)
		}, tensors.FromValue([][]float32{{1, 2, 3}, {4 + 10 + 30, 5 + 20 + 40, 6 + 30 + 50}}),
			[]any{[][]int32{{1}, {2}, {-1}, {1}}, [][]float32{{10, 20, 30}, {7, 7, 7}, {8, 8, 8}, {30, 40, 50}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			xc, _ := x.LocalClone()
			got, err := run(t, cpu, c.fn, append([]any{xc}, c.extra...)...)
			if err != nil {
				t.Fatal(err)
			}
			requireClose(t, c.name, got[0], c.want)
		})
	}
}

// TestLargeSumAgainstFloat64 checks a float32 sum of half a million squares (a gradient-norm
// term of the bench model) against a float64 reference. Summation order differs between
// backends, so this, not SimpleGo, is the reference for large reductions.
func TestLargeSumAgainstFloat64(t *testing.T) {
	cpu, _ := testBackends()
	rng := rand.New(rand.NewPCG(29, 30))
	x := randF32(rng, 2048, 256)
	var want float64
	for _, v := range flatOf(x).([]float32) {
		want += float64(v) * float64(v)
	}
	got, err := run(t, cpu, func(x *graph.Node) *graph.Node { return graph.ReduceAllSum(graph.Square(x)) }, x)
	if err != nil {
		t.Fatal(err)
	}
	g := float64(tensors.ToScalar[float32](got[0]))
	if rel := math.Abs(g-want) / want; rel > 1e-5 {
		t.Errorf("sum of squares %v, float64 reference %v (relative error %.2g)", g, want, rel)
	}
}

// TestBroadcastScalarBits: a broadcast scalar arrives bit for bit, zeros (cleared rather than
// filled) and negative zero (which must not be cleared) included.
func TestBroadcastScalarBits(t *testing.T) {
	b := &Backend{}
	for _, v := range []any{[]float32{0}, []float32{float32(math.Copysign(0, -1))}, []float32{1.5}, []float64{0},
		[]float64{math.Copysign(0, -1)}, []int32{0}, []int64{-3}, []uint8{0}, []bool{false}, []bool{true}} {
		dt := flatDType(v)
		for _, n := range []int{5, 70001} {
			t.Run(fmt.Sprintf("%s-%v-%d", dt, v, n), func(t *testing.T) {
				out := shapes.Make(dt, n, 1)
				g := fusionGraph{params: []shapes.Shape{shapes.Make(dt)}, build: func(bld backends.Builder, p []backends.Op) []backends.Op {
					return []backends.Op{must(bld.BroadcastInDim(p[0], out, nil))}
				}}
				got, _ := g.compileAndRun(t, b, []any{v})
				want := reflect.MakeSlice(reflect.TypeOf(v), n, n)
				for i := range n {
					want.Index(i).Set(reflect.ValueOf(v).Index(0))
				}
				// Floats compare by their bits: -0 is not +0.
				if err := sameFlatBits(got[0], want.Interface()); err != nil {
					t.Error(err)
				}
			})
		}
	}
}
