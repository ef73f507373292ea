package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

type unaryFn = func(*graph.Node) *graph.Node
type binaryFn = func(*graph.Node, *graph.Node) *graph.Node

// Shapes every elementwise op runs on: scalar, empty, small, and one above the parallel
// threshold (several goroutines).
var elementwiseDims = [][]int{{}, {0, 4}, {3, 5}, {2, 3, 4}, {70001}}

func TestUnaryFloatOps(t *testing.T) {
	ops := map[string]unaryFn{
		"Abs": graph.Abs, "Neg": graph.Neg, "Sign": graph.Sign, "Exp": graph.Exp, "Expm1": graph.Expm1,
		"Logistic": graph.Logistic, "Ceil": graph.Ceil, "Floor": graph.Floor, "Round": graph.Round,
		"Cos": graph.Cos, "Sin": graph.Sin, "Tanh": graph.Tanh, "Erf": graph.Erf,
		"IsFinite": graph.IsFinite, "IsNaN": graph.IsNaN,
	}
	positiveOps := map[string]unaryFn{"Log": graph.Log, "Log1p": graph.Log1p, "Sqrt": graph.Sqrt, "Rsqrt": graph.Rsqrt}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64} {
		for name, fn := range ops {
			for _, dims := range elementwiseDims {
				t.Run(name+"/"+dt.String()+"/"+shapes.Make(dt, dims...).String(), func(t *testing.T) {
					check(t, fn, randTensor(rng, dt, dims...))
				})
			}
		}
		for name, fn := range positiveOps {
			for _, dims := range elementwiseDims {
				t.Run(name+"/"+dt.String()+"/"+shapes.Make(dt, dims...).String(), func(t *testing.T) {
					x := positiveF32(rng, dims...)
					check(t, func(x *graph.Node) *graph.Node { return fn(graph.ConvertDType(x, dt)) }, x)
				})
			}
		}
	}
}

func TestUnarySpecialValues(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x := tensors.FromValue([]float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 1.5, -1.5, 0.4, 1e30, -1e30})
	for name, fn := range map[string]unaryFn{
		"IsFinite": graph.IsFinite, "IsNaN": graph.IsNaN, "Round": graph.Round,
		"Logistic": graph.Logistic, "Abs": graph.Abs, "Exp": graph.Exp, "Tanh": graph.Tanh,
	} {
		t.Run(name, func(t *testing.T) { check(t, fn, x) })
	}
}

// TestWhereSimpleGoDiffers pins the cases where SimpleGo departs from the documented (and
// XLA's) semantics, which the cpu backend follows: Sign(NaN) is NaN (SimpleGo: 0), Round
// rounds half to even (SimpleGo: away from zero), and size-1 axes broadcast against empty
// ones (SimpleGo panics).
func TestWhereSimpleGoDiffers(t *testing.T) {
	cpu, _ := testBackends()
	nan := float32(math.NaN())
	cases := []struct {
		name   string
		fn     any
		inputs []any
		want   *tensors.Tensor
	}{
		{"Sign", graph.Sign, []any{[]float32{nan, -0.5, 2, 0}}, tensors.FromValue([]float32{nan, -1, 1, 0})},
		{"Round", graph.Round, []any{[]float32{-2.5, -1.5, 0.5, 1.5, 2.5, 2.6}}, tensors.FromValue([]float32{-2, -2, 0, 2, 2, 3})},
		{"Add-empty", graph.Add, []any{tensors.FromShape(shapes.Make(dtypes.Float32, 0, 4)), [][]float32{{1, 2, 3, 4}}},
			tensors.FromShape(shapes.Make(dtypes.Float32, 0, 4))},
		{"Mul-empty-middle", graph.Mul, []any{tensors.FromShape(shapes.Make(dtypes.Float32, 2, 0, 3)), [][][]float32{{{1, 2, 3}}, {{4, 5, 6}}}},
			tensors.FromShape(shapes.Make(dtypes.Float32, 2, 0, 3))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := run(t, cpu, c.fn, c.inputs...)
			if err != nil {
				t.Fatal(err)
			}
			requireClose(t, c.name, got[0], c.want)
		})
	}
}

func TestUnaryIntOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []dtypes.DType{dtypes.Int32, dtypes.Int64} {
		for name, fn := range map[string]unaryFn{"Abs": graph.Abs, "Neg": graph.Neg, "Sign": graph.Sign} {
			t.Run(name+"/"+dt.String(), func(t *testing.T) { check(t, fn, randTensor(rng, dt, 4, 6)) })
		}
	}
	t.Run("LogicalNot", func(t *testing.T) { check(t, graph.LogicalNot, randTensor(rng, dtypes.Bool, 3, 7)) })
}

// binaryShapes are operand pairs covering GoMLX's implicit broadcasting: equal shapes,
// scalars on either side, size-1 axes on either or both sides, empty dimensions and a large
// case that runs on several goroutines.
var binaryShapes = [][2][]int{
	{{3, 4}, {3, 4}},
	{{}, {3, 4}},
	{{3, 4}, {}},
	{{}, {}},
	{{3, 1}, {1, 4}},
	{{2, 3, 4}, {2, 1, 4}},
	{{2, 1, 4}, {1, 3, 1}},
	{{5, 1, 1}, {5, 6, 7}},
	{{0, 4}, {0, 4}},
	{{300, 300}, {300, 1}},
	{{1, 300}, {300, 300}},
	{{70001}, {70001}},
}

func TestBinaryOps(t *testing.T) {
	ops := map[string]binaryFn{
		"Add": graph.Add, "Sub": graph.Sub, "Mul": graph.Mul, "Div": graph.Div, "Max": graph.Max, "Min": graph.Min,
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64, dtypes.Uint8} {
		for name, fn := range ops {
			for _, s := range binaryShapes {
				lhs, rhs := randTensor(rng, dt, s[0]...), randTensor(rng, dt, s[1]...)
				if name == "Div" && dt.IsInt() {
					rhs = nonZero(rng, dt, s[1]...)
				}
				t.Run(name+"/"+dt.String()+"/"+lhs.Shape().String()+"/"+rhs.Shape().String(), func(t *testing.T) {
					check(t, fn, lhs, rhs)
				})
			}
		}
	}
	// Pow and Rem: positive float bases (Pow of a negative base to a fractional power is NaN
	// on both), integer exponents and divisors away from zero.
	for _, s := range binaryShapes[:8] {
		t.Run("Pow/float32", func(t *testing.T) { check(t, graph.Pow, positiveF32(rng, s[0]...), randF32(rng, s[1]...)) })
		t.Run("Rem/float32", func(t *testing.T) { check(t, graph.Rem, randF32(rng, s[0]...), positiveF32(rng, s[1]...)) })
		t.Run("Rem/int32", func(t *testing.T) {
			check(t, graph.Rem, randTensor(rng, dtypes.Int32, s[0]...), nonZero(rng, dtypes.Int32, s[1]...))
		})
		t.Run("Pow/int32", func(t *testing.T) {
			check(t, graph.Pow, randTensor(rng, dtypes.Int32, s[0]...), indicesAs(rng, dtypes.Int32, 0, 5, s[1]...))
		})
	}
}

func TestPowScalarExponents(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, e := range []float64{1, 2, 3, 0.5, -1} {
		t.Run("float32", func(t *testing.T) {
			check(t, func(x *graph.Node) *graph.Node { return graph.Pow(x, graph.Const(x.Graph(), float32(e))) }, positiveF32(rng, 5, 7))
		})
		t.Run("float64-negative-base", func(t *testing.T) {
			check(t, func(x *graph.Node) *graph.Node { return graph.Pow(x, graph.Const(x.Graph(), e)) }, randTensor(rng, dtypes.Float64, 5, 7))
		})
		if e >= 1 && e == math.Trunc(e) {
			t.Run("int32", func(t *testing.T) {
				check(t, func(x *graph.Node) *graph.Node { return graph.Pow(x, graph.Const(x.Graph(), int32(e))) }, randTensor(rng, dtypes.Int32, 5, 7))
			})
		}
	}
}

func TestLogicalOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for name, fn := range map[string]binaryFn{"And": graph.LogicalAnd, "Or": graph.LogicalOr, "Xor": graph.LogicalXor} {
		for _, s := range binaryShapes[:9] {
			t.Run(name, func(t *testing.T) {
				check(t, fn, randTensor(rng, dtypes.Bool, s[0]...), randTensor(rng, dtypes.Bool, s[1]...))
			})
		}
	}
}

func TestComparisons(t *testing.T) {
	ops := map[string]binaryFn{
		"Equal": graph.Equal, "NotEqual": graph.NotEqual, "GreaterOrEqual": graph.GreaterOrEqual,
		"GreaterThan": graph.GreaterThan, "LessOrEqual": graph.LessOrEqual, "LessThan": graph.LessThan,
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Int32, dtypes.Int64, dtypes.Uint8, dtypes.Float64} {
		for name, fn := range ops {
			for _, s := range binaryShapes {
				// Small integers make ties common, so equality is exercised for floats too.
				l, r := indicesAs(rng, dt, 0, 4, s[0]...), indicesAs(rng, dt, 0, 4, s[1]...)
				t.Run(name+"/"+dt.String(), func(t *testing.T) { check(t, fn, l, r) })
			}
		}
	}
	nan := float32(math.NaN())
	x := tensors.FromValue([]float32{nan, 1, nan, float32(math.Inf(1))})
	y := tensors.FromValue([]float32{nan, nan, 1, float32(math.Inf(1))})
	for name, fn := range ops {
		t.Run(name+"/NaN", func(t *testing.T) { check(t, fn, x, y) })
	}
}

func TestWhereAndClamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cond := randTensor(rng, dtypes.Bool, 3, 4)
	a, b := randF32(rng, 3, 4), randF32(rng, 3, 4)
	t.Run("full", func(t *testing.T) { check(t, graph.Where, cond, a, b) })
	t.Run("scalar-true", func(t *testing.T) { check(t, graph.Where, cond, randF32(rng), b) })
	t.Run("scalar-false", func(t *testing.T) { check(t, graph.Where, cond, a, randF32(rng)) })
	t.Run("scalar-cond", func(t *testing.T) { check(t, graph.Where, randTensor(rng, dtypes.Bool), a, b) })
	t.Run("all-scalar-operands", func(t *testing.T) { check(t, graph.Where, cond, randF32(rng), randF32(rng)) })
	// A scalar condition picks one operand whole: handed over when it dies at the Where (the
	// intermediates here), copied when the caller still owns it (x), possibly into the other
	// operand's dying storage.
	for _, c := range []bool{true, false} {
		cv := tensors.FromValue(c)
		t.Run(fmt.Sprintf("scalar-cond-intermediates-%v", c), func(t *testing.T) {
			check(t, func(c, x *graph.Node) []*graph.Node {
				w := graph.Where(c, graph.Add(x, x), graph.Mul(x, x))
				return []*graph.Node{graph.Neg(w), graph.Sub(x, w)}
			}, cv, a)
		})
		t.Run(fmt.Sprintf("scalar-cond-parameter-%v", c), func(t *testing.T) {
			check(t, func(c, x *graph.Node) []*graph.Node {
				w := graph.Where(c, x, graph.Mul(x, x))
				return []*graph.Node{w, graph.Add(x, w)}
			}, cv, a)
		})
	}
	t.Run("int32-large", func(t *testing.T) {
		check(t, graph.Where, randTensor(rng, dtypes.Bool, 70001), randTensor(rng, dtypes.Int32, 70001), randTensor(rng, dtypes.Int32, 70001))
	})
	t.Run("Clamp-scalar", func(t *testing.T) {
		check(t, func(x *graph.Node) *graph.Node {
			return graph.Clamp(graph.Const(x.Graph(), float32(-0.5)), x, graph.Const(x.Graph(), float32(0.5)))
		}, a)
	})
	t.Run("Clamp-full", func(t *testing.T) { check(t, graph.Clamp, randF32(rng, 3, 4), a, positiveF32(rng, 3, 4)) })
}

func TestConvertDTypeEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, from := range supportedDTypes {
		for _, to := range supportedDTypes {
			if from == dtypes.BFloat16 || to == dtypes.BFloat16 {
				continue // SimpleGo truncates to bfloat16: TestBF16ConvertEveryPair checks them
			}
			x := randTensor(rng, from, 4, 5)
			if from.IsFloat() {
				// Values that truncate, are negative, zero and in uint8 range.
				x = scaled(x, 7)
			}
			if from.IsFloat() && to == dtypes.Uint8 {
				x = positiveF32(rng, 4, 5)
				if from == dtypes.Float64 {
					x = tensors.FromValue([][]float64{{0, 0.5, 1.9, 200.7, 255}})
				}
			}
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				check(t, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, to) }, x)
			})
		}
	}
}

// nonZero returns integers of dt with magnitude in [1, 10], of random sign unless unsigned.
func nonZero(rng *rand.Rand, dt dtypes.DType, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(1 + rng.IntN(10))
		if dt != dtypes.Uint8 && rng.IntN(2) == 0 {
			vals[i] = -vals[i]
		}
	}
	return fromFloat64s(dt, vals, dims)
}

// indicesAs returns values in [lo, hi) converted to dt.
func indicesAs(rng *rand.Rand, dt dtypes.DType, lo, hi int, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(lo + rng.IntN(hi-lo))
	}
	return fromFloat64s(dt, vals, dims)
}

func fromFloat64s(dt dtypes.DType, vals []float64, dims []int) *tensors.Tensor {
	switch dt {
	case dtypes.Float32:
		f := make([]float32, len(vals))
		for i, v := range vals {
			f[i] = float32(v)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Float64:
		return tensors.FromFlatDataAndDimensions(vals, dims...)
	case dtypes.Int32:
		f := make([]int32, len(vals))
		for i, v := range vals {
			f[i] = int32(v)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Int64:
		f := make([]int64, len(vals))
		for i, v := range vals {
			f[i] = int64(v)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	case dtypes.Uint8:
		f := make([]uint8, len(vals))
		for i, v := range vals {
			f[i] = uint8(v)
		}
		return tensors.FromFlatDataAndDimensions(f, dims...)
	}
	panic("fromFloat64s: " + dt.String())
}

// scaled multiplies a float tensor by k.
func scaled(x *tensors.Tensor, k float64) *tensors.Tensor {
	switch f := flatOf(x).(type) {
	case []float32:
		for i := range f {
			f[i] *= float32(k)
		}
		return tensors.FromFlatDataAndDimensions(f, x.Shape().Dimensions...)
	case []float64:
		for i := range f {
			f[i] *= k
		}
		return tensors.FromFlatDataAndDimensions(f, x.Shape().Dimensions...)
	}
	return x
}
