package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// fusionGraph is a graph over parameters of the given shapes; build returns its outputs.
type fusionGraph struct {
	params []shapes.Shape
	build  func(bld backends.Builder, p []backends.Op) []backends.Op
}

// randomInputs returns random flat inputs for g's parameters (randFlat).
func (g fusionGraph) randomInputs(rng *rand.Rand) []any {
	inputs := make([]any, len(g.params))
	for i, s := range g.params {
		inputs[i] = randFlat(rng, s.DType, s.Size())
	}
	return inputs
}

// compileAndRun compiles g on b and runs it on inputs (flat slices, one per parameter),
// returning the outputs' flat slices and the number of BroadcastInDim steps the program kept.
func (g fusionGraph) compileAndRun(t *testing.T, b *Backend, inputs []any) (outs []any, broadcasts int) {
	t.Helper()
	bld := b.Builder(t.Name())
	ps := make([]backends.Op, len(g.params))
	for i, s := range g.params {
		var err error
		if ps[i], err = bld.Parameter(fmt.Sprintf("p%d", i), s, nil); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := bld.Compile(g.build(bld, ps), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range exe.(*Executable).steps {
		if s.n.op == backends.OpTypeBroadcastInDim {
			broadcasts++
		}
	}
	bufs := make([]backends.Buffer, len(inputs))
	for i, in := range inputs {
		if bufs[i], err = b.BufferFromFlatData(0, in, g.params[i]); err != nil {
			t.Fatal(err)
		}
	}
	res, err := exe.Execute(bufs, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		outs = append(outs, r.(*Buffer).flat)
	}
	return outs, broadcasts
}

// randFlat returns n random values of dt: floats with a few zeros of both signs, infinities
// and NaNs among them; integers (never zero, so they divide) and bools.
func randFlat(rng *rand.Rand, dt dtypes.DType, n int) any {
	special := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN()}
	f := func() float64 {
		if rng.IntN(50) == 0 {
			return special[rng.IntN(len(special))]
		}
		return rng.NormFloat64() * 3
	}
	switch dt {
	case dtypes.Float32:
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(f())
		}
		return x
	case dtypes.Float64:
		x := make([]float64, n)
		for i := range x {
			x[i] = f()
		}
		return x
	case dtypes.Int32:
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(rng.IntN(9) + 1)
		}
		return x
	case dtypes.Int64:
		x := make([]int64, n)
		for i := range x {
			x[i] = int64(rng.IntN(9) + 1)
		}
		return x
	case dtypes.Uint8:
		x := make([]uint8, n)
		for i := range x {
			x[i] = uint8(rng.IntN(9) + 1)
		}
		return x
	case dtypes.Bool:
		x := make([]bool, n)
		for i := range x {
			x[i] = rng.IntN(2) == 1
		}
		return x
	}
	panic(dt)
}

// sameFlatBits reports whether two flat slices hold the same values bit for bit (any NaN equals
// any NaN: Go leaves NaN payloads unspecified).
func sameFlatBits(a, b any) error {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	if av.Type() != bv.Type() || av.Len() != bv.Len() {
		return fmt.Errorf("%T[%d] vs %T[%d]", a, av.Len(), b, bv.Len())
	}
	for i := range av.Len() {
		x, y := av.Index(i), bv.Index(i)
		switch x.Kind() {
		case reflect.Float32, reflect.Float64:
			xf, yf := x.Float(), y.Float()
			if math.IsNaN(xf) && math.IsNaN(yf) {
				continue
			}
			if math.Float64bits(xf) != math.Float64bits(yf) {
				return fmt.Errorf("element %d: %v vs %v", i, xf, yf)
			}
		default:
			if x.Interface() != y.Interface() {
				return fmt.Errorf("element %d: %v vs %v", i, x.Interface(), y.Interface())
			}
		}
	}
	return nil
}

// TestBroadcastFusionSameBits runs graphs whose binary ops read broadcasts, with and without
// fusion, and requires identical outputs; it also checks which broadcasts fusion removes.
func TestBroadcastFusionSameBits(t *testing.T) {
	fused, unfused := &Backend{}, &Backend{noFuse: true}

	type pattern struct {
		name string
		// big is the full operand's dims, small the broadcast operand's, axes where its axes
		// go; smallFirst puts the broadcast on the left.
		big, small, axes []int
		smallFirst       bool
		kept             int // BroadcastInDim steps left after fusion
	}
	patterns := []pattern{
		{name: "rows", big: []int{37, 300}, small: []int{300}, axes: []int{1}},
		{name: "rows-left", big: []int{37, 300}, small: []int{300}, axes: []int{1}, smallFirst: true},
		{name: "columns", big: []int{37, 300}, small: []int{37}, axes: []int{0}},
		{name: "columns-keepdim", big: []int{37, 300}, small: []int{37, 1}, axes: []int{0, 1}, smallFirst: true},
		{name: "scalar", big: []int{37, 300}, small: nil, axes: nil},
		{name: "short-rows", big: []int{5, 20}, small: []int{20}, axes: []int{1}},
		{name: "middle-axis", big: []int{3, 7, 40}, small: []int{3, 40}, axes: []int{0, 2}},
		{name: "outer-and-inner", big: []int{4, 9, 3, 32}, small: []int{9, 1}, axes: []int{1, 2}},
		{name: "parallel-rows", big: []int{300, 260}, small: []int{260}, axes: []int{1}},
		{name: "parallel-columns", big: []int{300, 260}, small: []int{300, 1}, axes: []int{0, 1}, smallFirst: true},
		// Not fused: runs shorter than fuseMinInner, and a broadcast that transposes.
		{name: "tiny-runs", big: []int{50, 4}, small: []int{4}, axes: []int{1}, kept: 1},
		{name: "transposing", big: []int{30, 20}, small: []int{20, 30}, axes: []int{1, 0}, kept: 1},
	}
	type opCase struct {
		op     func(bld backends.Builder, x, y backends.Op) (backends.Op, error)
		name   string
		dtypes []dtypes.DType
	}
	numbers := []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64, dtypes.Uint8}
	floats := []dtypes.DType{dtypes.Float32, dtypes.Float64}
	ops := []opCase{
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Add(x, y) }, "Add", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Sub(x, y) }, "Sub", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Mul(x, y) }, "Mul", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Div(x, y) }, "Div", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Max(x, y) }, "Max", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Min(x, y) }, "Min", floats},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Pow(x, y) }, "Pow", floats},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Rem(x, y) }, "Rem", []dtypes.DType{dtypes.Int32}},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.GreaterThan(x, y) }, "GreaterThan", numbers},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Equal(x, y) }, "Equal", []dtypes.DType{dtypes.Int32}},
		{func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.LogicalXor(x, y) }, "LogicalXor", []dtypes.DType{dtypes.Bool}},
	}
	rng := rand.New(rand.NewPCG(18, 1))
	for _, p := range patterns {
		for _, oc := range ops {
			for _, dt := range oc.dtypes {
				t.Run(fmt.Sprintf("%s/%s/%s", p.name, oc.name, dt), func(t *testing.T) {
					big, small := shapes.Make(dt, p.big...), shapes.Make(dt, p.small...)
					g := fusionGraph{params: []shapes.Shape{big, small}, build: func(bld backends.Builder, ps []backends.Op) []backends.Op {
						bc := must(bld.BroadcastInDim(ps[1], big, p.axes))
						x, y := ps[0], bc
						if p.smallFirst {
							x, y = y, x
						}
						return []backends.Op{must(oc.op(bld, x, y))}
					}}
					inputs := []any{randFlat(rng, dt, big.Size()), randFlat(rng, dt, small.Size())}
					want, n := g.compileAndRun(t, unfused, inputs)
					if n != 1 {
						t.Fatalf("unfused program has %d broadcasts, want 1", n)
					}
					got, n := g.compileAndRun(t, fused, inputs)
					if n != p.kept {
						t.Errorf("fused program has %d broadcasts, want %d", n, p.kept)
					}
					if err := sameFlatBits(got[0], want[0]); err != nil {
						t.Errorf("fused vs unfused: %v", err)
					}
				})
			}
		}
	}
}

// TestBroadcastFusionGraphs covers the graphs around a fused broadcast: one that is also an
// output or has a non-elementwise reader stays materialised; two broadcasts on one op; an
// operand broadcast by the op itself as well; a broadcast of a broadcast; fused ops written
// in place into their dying full-size operands.
func TestBroadcastFusionGraphs(t *testing.T) {
	fused, unfused := &Backend{}, &Backend{noFuse: true}
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	full := f32(64, 48)
	tests := []struct {
		name string
		g    fusionGraph
		kept int
	}{
		{"broadcast-is-output", fusionGraph{[]shapes.Shape{full, f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			bc := must(b.BroadcastInDim(p[1], full, []int{1}))
			return []backends.Op{must(b.Mul(p[0], bc)), bc}
		}}, 1},
		{"broadcast-reshaped-output", fusionGraph{[]shapes.Shape{full, f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			bc := must(b.BroadcastInDim(p[1], full, []int{1}))
			return []backends.Op{must(b.Reshape(bc, 64*48)), must(b.Add(bc, p[0]))}
		}}, 1},
		{"non-elementwise-reader", fusionGraph{[]shapes.Shape{full, f32(64)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			bc := must(b.BroadcastInDim(p[1], full, []int{0}))
			sum := must(b.ReduceSum(bc, 0))
			tr := must(b.Transpose(bc, 1, 0))
			return []backends.Op{must(b.Sub(p[0], bc)), sum, tr}
		}}, 1},
		{"operand-broadcast-by-op", fusionGraph{[]shapes.Shape{f32(64, 1)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			// Add's other operand is broadcast by the op itself along the same (innermost)
			// axis: fused, one value per row, repeated.
			return []backends.Op{must(b.Add(p[0], must(b.BroadcastInDim(p[0], full, []int{0, 1}))))}
		}}, 0},
		{"outer-product", fusionGraph{[]shapes.Shape{f32(64), f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			l := must(b.BroadcastInDim(p[0], full, []int{0}))
			r := must(b.BroadcastInDim(p[1], full, []int{1}))
			return []backends.Op{must(b.Mul(l, r))}
		}}, 0},
		{"same-broadcast-twice", fusionGraph{[]shapes.Shape{f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			bc := must(b.BroadcastInDim(p[0], full, []int{1}))
			return []backends.Op{must(b.Mul(bc, bc))}
		}}, 0},
		{"broadcast-of-broadcast", fusionGraph{[]shapes.Shape{f32(3, 64, 48), f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			bc := must(b.BroadcastInDim(p[1], full, []int{1}))
			bc2 := must(b.BroadcastInDim(bc, f32(3, 64, 48), []int{1, 2}))
			return []backends.Op{must(b.Div(p[0], bc2))}
		}}, 1},
		{"in-place-chain", fusionGraph{[]shapes.Shape{full, f32(64, 1), f32(48)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			// x - max, exp, / sum, * w: every intermediate dies at the next op.
			e := must(b.Exp(must(b.Sub(p[0], must(b.BroadcastInDim(p[1], full, []int{0, 1}))))))
			s := must(b.ReduceSum(e, 1))
			d := must(b.Div(e, must(b.BroadcastInDim(s, full, []int{0}))))
			return []backends.Op{must(b.Mul(must(b.BroadcastInDim(p[2], full, []int{1})), d)), s}
		}}, 0},
		// Chains (chain.go) are built over the fused program: a fused op inside a chain reads
		// the broadcast's operand, and the broadcast is not computed.
		{"chain-over-fused-scalar", fusionGraph{[]shapes.Shape{f32(128, 128), f32()}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(b.Exp(must(b.Mul(p[0], must(b.BroadcastInDim(p[1], f32(128, 128), nil))))))}
		}}, 0},
		{"chain-then-fused-rows", fusionGraph{[]shapes.Shape{f32(128, 128), f32(128)}, func(b backends.Builder, p []backends.Op) []backends.Op {
			return []backends.Op{must(b.Mul(must(b.Exp(must(b.Neg(p[0])))), must(b.BroadcastInDim(p[1], f32(128, 128), []int{1}))))}
		}}, 0},
		{"bool-where-condition", fusionGraph{[]shapes.Shape{shapes.Make(dtypes.Bool, 64, 48), shapes.Make(dtypes.Bool, 48), full}, func(b backends.Builder, p []backends.Op) []backends.Op {
			c := must(b.LogicalAnd(p[0], must(b.BroadcastInDim(p[1], shapes.Make(dtypes.Bool, 64, 48), []int{1}))))
			return []backends.Op{must(b.Where(c, p[2], must(b.Neg(p[2]))))}
		}}, 0},
	}
	rng := rand.New(rand.NewPCG(18, 2))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inputs := tc.g.randomInputs(rng)
			want, _ := tc.g.compileAndRun(t, unfused, inputs)
			got, n := tc.g.compileAndRun(t, fused, inputs)
			if n != tc.kept {
				t.Errorf("fused program has %d broadcasts, want %d", n, tc.kept)
			}
			for i := range want {
				if err := sameFlatBits(got[i], want[i]); err != nil {
					t.Errorf("output #%d: fused vs unfused: %v", i, err)
				}
			}
		})
	}
}

// BenchmarkBroadcastFusion times the RMSNorm- and softmax-shaped ops a Llama step runs, as
// one program each, with and without broadcast fusion.
func BenchmarkBroadcastFusion(b *testing.B) {
	f32 := func(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
	full := f32(2048, 256)
	cases := []struct {
		name  string
		small shapes.Shape
		axes  []int
		op    func(bld backends.Builder, x, y backends.Op) (backends.Op, error)
	}{
		{"rows-mul", f32(256), []int{1}, func(bld backends.Builder, x, y backends.Op) (backends.Op, error) { return bld.Mul(x, y) }},
		{"columns-sub", f32(2048, 1), []int{0, 1}, func(bld backends.Builder, x, y backends.Op) (backends.Op, error) { return bld.Sub(x, y) }},
	}
	for _, c := range cases {
		for _, be := range []struct {
			name string
			b    *Backend
		}{{"fused", &Backend{}}, {"unfused", &Backend{noFuse: true}}} {
			b.Run(c.name+"/"+be.name, func(b *testing.B) {
				bld := be.b.Builder("bench")
				x := must(bld.Parameter("x", full, nil))
				y := must(bld.Parameter("y", c.small, nil))
				out := must(c.op(bld, x, must(bld.BroadcastInDim(y, full, c.axes))))
				exe, err := bld.Compile([]backends.Op{out}, nil)
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				xb, _ := be.b.BufferFromFlatData(0, randFlat(rng, dtypes.Float32, full.Size()), full)
				yb, _ := be.b.BufferFromFlatData(0, randFlat(rng, dtypes.Float32, c.small.Size()), c.small)
				b.SetBytes(int64(full.Size() * 4))
				for b.Loop() {
					outs, err := exe.Execute([]backends.Buffer{xb, yb}, nil, 0)
					if err != nil {
						b.Fatal(err)
					}
					_ = be.b.BufferFinalize(outs[0])
				}
			})
		}
	}
}
