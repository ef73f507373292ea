package cpu

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// number is an element type the arithmetic kernels handle.
type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

type float interface{ ~float32 | ~float64 }

// outputFor returns the buffer a same-dtype elementwise op writes into: an owned input of the
// output's size (in place), else a pooled buffer.
func outputFor(r *execution, n *node, in []*Buffer, owned []bool) *Buffer {
	size := n.shape.Size()
	for i, b := range in {
		if owned[i] && b.shape.DType == n.shape.DType && b.shape.Size() == size {
			return b
		}
	}
	return r.newBuffer(n.shape)
}

// execUnary runs the same-dtype unary ops.
func execUnary(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	out := outputFor(r, n, in, owned)
	op := n.op
	var err error
	switch x := in[0].flat.(type) {
	case []float32:
		o := out.flat.([]float32)
		parallelFor(len(x), len(x), func(lo, hi int) {
			// C kernels first (long slices, when compiled in), then expf32's loops, then Go's.
			if !vecUnary(op, o[lo:hi], x[lo:hi]) && !unaryFloat32Fast(op, o[lo:hi], x[lo:hi]) {
				unaryFloat(op, o[lo:hi], x[lo:hi])
			}
		})
	case []float64:
		o := out.flat.([]float64)
		parallelFor(len(x), len(x), func(lo, hi int) { unaryFloat(op, o[lo:hi], x[lo:hi]) })
	case []int32:
		err = unaryInt(op, out.flat.([]int32), x)
	case []int64:
		err = unaryInt(op, out.flat.([]int64), x)
	case []uint8:
		err = unaryInt(op, out.flat.([]uint8), x)
	case []bool:
		if op != backends.OpTypeLogicalNot {
			return nil, fmt.Errorf("%s on bool", op)
		}
		o := out.flat.([]bool)
		for i, v := range x {
			o[i] = !v
		}
	default:
		return nil, fmt.Errorf("%s: unsupported dtype %s", op, in[0].shape.DType)
	}
	return out, err
}

// float64Math are the float unary ops computed through a float64 function of package math (the
// float32 hot ones have faster kernels in fastmath.go and vec.c, tried first).
var float64Math = map[backends.OpType]func(float64) float64{
	backends.OpTypeAbs:   math.Abs,
	backends.OpTypeExp:   math.Exp,
	backends.OpTypeExpm1: math.Expm1,
	backends.OpTypeLog:   math.Log,
	backends.OpTypeLog1p: math.Log1p,
	backends.OpTypeCeil:  math.Ceil,
	backends.OpTypeFloor: math.Floor,
	backends.OpTypeRound: math.RoundToEven,
	backends.OpTypeSqrt:  math.Sqrt,
	backends.OpTypeRsqrt: func(v float64) float64 { return 1 / math.Sqrt(v) },
	backends.OpTypeCos:   math.Cos,
	backends.OpTypeSin:   math.Sin,
	backends.OpTypeTanh:  math.Tanh,
	backends.OpTypeErf:   math.Erf,
	// Never exponentiates a large positive number: no overflow to Inf/Inf.
	backends.OpTypeLogistic: func(v float64) float64 {
		if v >= 0 {
			return 1 / (1 + math.Exp(-v))
		}
		e := math.Exp(v)
		return e / (1 + e)
	},
}

func unaryFloat[T float](op backends.OpType, out, x []T) {
	switch op {
	case backends.OpTypeNeg:
		for i, v := range x {
			out[i] = -v
		}
	case backends.OpTypeSign:
		for i, v := range x {
			switch {
			case v > 0:
				out[i] = 1
			case v < 0:
				out[i] = -1
			default:
				out[i] = v // ±0 and NaN
			}
		}
	default:
		f, ok := float64Math[op]
		if !ok {
			panic(fmt.Sprintf("unary op %s has no float kernel", op))
		}
		for i, v := range x {
			out[i] = T(f(float64(v)))
		}
	}
}

func unaryInt[T ~int32 | ~int64 | ~uint8](op backends.OpType, out, x []T) error {
	switch op {
	case backends.OpTypeNeg:
		for i, v := range x {
			out[i] = -v
		}
	case backends.OpTypeAbs:
		for i, v := range x {
			if v < 0 {
				v = -v
			}
			out[i] = v
		}
	case backends.OpTypeSign:
		for i, v := range x {
			switch {
			case v > 0:
				out[i] = 1
			case v < 0:
				out[i] = 0
				out[i]-- // -1; written so that it also compiles for uint8, where v < 0 never holds
			default:
				out[i] = 0
			}
		}
	default:
		return fmt.Errorf("%s is not defined on integers", op)
	}
	return nil
}

// execFloatPredicate runs IsFinite and IsNaN.
func execFloatPredicate(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	out := r.newBuffer(n.shape)
	o := out.flat.([]bool)
	isNaN := n.op == backends.OpTypeIsNaN
	switch x := in[0].flat.(type) {
	case []float32:
		floatPredicate(o, x, isNaN)
	case []float64:
		floatPredicate(o, x, isNaN)
	default:
		return nil, fmt.Errorf("%s: unsupported dtype %s", n.op, in[0].shape.DType)
	}
	return out, nil
}

func floatPredicate[T float](out []bool, x []T, isNaN bool) {
	for i, v := range x {
		f := float64(v)
		if isNaN {
			out[i] = math.IsNaN(f)
		} else {
			out[i] = !math.IsNaN(f) && !math.IsInf(f, 0)
		}
	}
}

// execBinary runs the arithmetic and logical binary ops.
func execBinary(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	out := outputFor(r, n, in, owned)
	p := n.data.(*bcastPlan)
	switch a := in[0].flat.(type) {
	case []float32:
		binaryFloat32(n.op, p, out.flat.([]float32), a, in[1].flat.([]float32))
	case []float64:
		binaryNumber(n.op, p, out.flat.([]float64), a, in[1].flat.([]float64))
	case []int32:
		binaryNumber(n.op, p, out.flat.([]int32), a, in[1].flat.([]int32))
	case []int64:
		binaryNumber(n.op, p, out.flat.([]int64), a, in[1].flat.([]int64))
	case []uint8:
		binaryNumber(n.op, p, out.flat.([]uint8), a, in[1].flat.([]uint8))
	case []bool:
		op := n.op
		applyBinary(p, out.flat.([]bool), a, in[1].flat.([]bool),
			func(o, x, y []bool) {
				for i := range o {
					o[i] = logical(op, x[i], y[i])
				}
			},
			func(o, x []bool, y bool) {
				for i := range o {
					o[i] = logical(op, x[i], y)
				}
			},
			func(o []bool, x bool, y []bool) {
				for i := range o {
					o[i] = logical(op, x, y[i])
				}
			})
	default:
		return nil, fmt.Errorf("%s: unsupported dtype %s", n.op, in[0].shape.DType)
	}
	return out, nil
}

func logical(op backends.OpType, a, b bool) bool {
	switch op {
	case backends.OpTypeLogicalAnd:
		return a && b
	case backends.OpTypeLogicalOr:
		return a || b
	case backends.OpTypeLogicalXor:
		return a != b
	}
	panic(fmt.Sprintf("%s is not defined on bool", op))
}

func binaryNumber[T number](op backends.OpType, p *bcastPlan, out, a, b []T) {
	applyBinary(p, out, a, b,
		func(o, x, y []T) { binVV(op, o, x, y) },
		func(o, x []T, y T) { binVS(op, o, x, y) },
		func(o []T, x T, y []T) { binSV(op, o, x, y) })
}

// binVV: out[i] = x[i] op y[i]. The hot ops have their own loops so the compiler keeps them
// tight; the rest go through scalarOp.
func binVV[T number](op backends.OpType, out, x, y []T) {
	x, y = x[:len(out)], y[:len(out)]
	switch op {
	case backends.OpTypeAdd:
		for i := range out {
			out[i] = x[i] + y[i]
		}
	case backends.OpTypeSub:
		for i := range out {
			out[i] = x[i] - y[i]
		}
	case backends.OpTypeMul:
		for i := range out {
			out[i] = x[i] * y[i]
		}
	case backends.OpTypeDiv:
		for i := range out {
			out[i] = x[i] / y[i]
		}
	case backends.OpTypeMax:
		for i := range out {
			out[i] = max(x[i], y[i])
		}
	case backends.OpTypeMin:
		for i := range out {
			out[i] = min(x[i], y[i])
		}
	default:
		for i := range out {
			out[i] = scalarOp(op, x[i], y[i])
		}
	}
}

func binVS[T number](op backends.OpType, out, x []T, y T) {
	x = x[:len(out)]
	if op == backends.OpTypePow && powScalar(out, x, y) {
		return
	}
	switch op {
	case backends.OpTypeAdd:
		for i := range out {
			out[i] = x[i] + y
		}
	case backends.OpTypeSub:
		for i := range out {
			out[i] = x[i] - y
		}
	case backends.OpTypeMul:
		for i := range out {
			out[i] = x[i] * y
		}
	case backends.OpTypeDiv:
		for i := range out {
			out[i] = x[i] / y
		}
	case backends.OpTypeMax:
		for i := range out {
			out[i] = max(x[i], y)
		}
	case backends.OpTypeMin:
		for i := range out {
			out[i] = min(x[i], y)
		}
	default:
		for i := range out {
			out[i] = scalarOp(op, x[i], y)
		}
	}
}

func binSV[T number](op backends.OpType, out []T, x T, y []T) {
	y = y[:len(out)]
	switch op {
	case backends.OpTypeAdd:
		for i := range out {
			out[i] = x + y[i]
		}
	case backends.OpTypeSub:
		for i := range out {
			out[i] = x - y[i]
		}
	case backends.OpTypeMul:
		for i := range out {
			out[i] = x * y[i]
		}
	case backends.OpTypeDiv:
		for i := range out {
			out[i] = x / y[i]
		}
	case backends.OpTypeMax:
		for i := range out {
			out[i] = max(x, y[i])
		}
	case backends.OpTypeMin:
		for i := range out {
			out[i] = min(x, y[i])
		}
	default:
		for i := range out {
			out[i] = scalarOp(op, x, y[i])
		}
	}
}

// powScalar computes x^y for the constant exponents models use (1, and 2 in norms) without
// math.Pow; it reports whether y was one of them.
func powScalar[T number](out, x []T, y T) bool {
	switch {
	case y == 1:
		copy(out, x)
	case y == 2:
		for i, v := range x {
			out[i] = v * v
		}
	default:
		return false
	}
	return true
}

// scalarOp computes the less frequent binary ops one element at a time.
func scalarOp[T number](op backends.OpType, x, y T) T {
	switch op {
	case backends.OpTypeAdd:
		return x + y
	case backends.OpTypeSub:
		return x - y
	case backends.OpTypeMul:
		return x * y
	case backends.OpTypeDiv:
		return x / y
	case backends.OpTypeMax:
		return max(x, y)
	case backends.OpTypeMin:
		return min(x, y)
	case backends.OpTypeRem:
		if isFloat[T]() {
			return T(math.Mod(float64(x), float64(y)))
		}
		return intRem(x, y)
	case backends.OpTypePow:
		if isFloat[T]() {
			return T(math.Pow(float64(x), float64(y)))
		}
		return intPow(x, y)
	}
	panic(fmt.Sprintf("binary op %s has no kernel", op))
}

func isFloat[T number]() bool {
	var z T
	switch any(z).(type) {
	case float32, float64:
		return true
	}
	return false
}

// intRem is Go's % (the sign follows the dividend, as XLA); a zero divisor panics, which
// Execute reports as an error.
func intRem[T number](x, y T) T {
	switch xv := any(x).(type) {
	case int32:
		return T(xv % any(y).(int32))
	case int64:
		return T(xv % any(y).(int64))
	case uint8:
		return T(xv % any(y).(uint8))
	}
	panic("intRem on a float")
}

// intPow raises x to a non-negative integer power by squaring; negative powers give 0 (the
// truncated reciprocal) except for bases 1 and -1.
func intPow[T number](x, y T) T {
	if y < 0 {
		minusOne := T(0)
		minusOne--
		switch {
		case x == 1:
			return 1
		case x == minusOne:
			if int64(y)%2 == 0 {
				return 1
			}
			return x
		}
		return 0
	}
	result := T(1)
	for e := int64(y); e > 0; e >>= 1 {
		if e&1 == 1 {
			result *= x
		}
		x *= x
	}
	return result
}

// execCompare runs the comparisons (bool output).
func execCompare(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	out := r.newBuffer(n.shape)
	o := out.flat.([]bool)
	p := n.data.(*bcastPlan)
	switch a := in[0].flat.(type) {
	case []float32:
		compareNumber(n.op, p, o, a, in[1].flat.([]float32))
	case []float64:
		compareNumber(n.op, p, o, a, in[1].flat.([]float64))
	case []int32:
		compareNumber(n.op, p, o, a, in[1].flat.([]int32))
	case []int64:
		compareNumber(n.op, p, o, a, in[1].flat.([]int64))
	case []uint8:
		compareNumber(n.op, p, o, a, in[1].flat.([]uint8))
	default:
		return nil, fmt.Errorf("%s: unsupported dtype %s", n.op, in[0].shape.DType)
	}
	return out, nil
}

func compareNumber[T number](op backends.OpType, p *bcastPlan, out []bool, a, b []T) {
	cmp := func(x, y T) bool {
		switch op {
		case backends.OpTypeEqual:
			return x == y
		case backends.OpTypeNotEqual:
			return x != y
		case backends.OpTypeGreaterOrEqual:
			return x >= y
		case backends.OpTypeGreaterThan:
			return x > y
		case backends.OpTypeLessOrEqual:
			return x <= y
		case backends.OpTypeLessThan:
			return x < y
		}
		panic(fmt.Sprintf("comparison %s has no kernel", op))
	}
	applyBinary(p, out, a, b,
		func(o []bool, x, y []T) {
			for i := range o {
				o[i] = cmp(x[i], y[i])
			}
		},
		func(o []bool, x []T, y T) {
			for i := range o {
				o[i] = cmp(x[i], y)
			}
		},
		func(o []bool, x T, y []T) {
			for i := range o {
				o[i] = cmp(x, y[i])
			}
		})
}

// execWhere selects between onTrue and onFalse; any of the three may be a scalar.
func execWhere(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	if c, ok := in[0].flat.([]bool); ok && len(c) == 1 {
		// One condition for all (the trainer's "apply the update only if the gradients are
		// finite"): the result is one operand whole. Hand it over when it dies here, else copy.
		pick := 2
		if c[0] {
			pick = 1
		}
		if src := in[pick]; src.shape.Size() == n.shape.Size() {
			if owned[pick] {
				return src, nil
			}
			out := outputFor(r, n, in[1:], owned[1:])
			copyFlat(out.flat, src.flat)
			return out, nil
		}
	}
	// Only onTrue/onFalse may be overwritten: the condition is bool.
	out := outputFor(r, n, in[1:], owned[1:])
	cond := in[0].flat.([]bool)
	switch o := out.flat.(type) {
	case []float32:
		where(o, cond, in[1].flat.([]float32), in[2].flat.([]float32))
	case []float64:
		where(o, cond, in[1].flat.([]float64), in[2].flat.([]float64))
	case []int32:
		where(o, cond, in[1].flat.([]int32), in[2].flat.([]int32))
	case []int64:
		where(o, cond, in[1].flat.([]int64), in[2].flat.([]int64))
	case []uint8:
		where(o, cond, in[1].flat.([]uint8), in[2].flat.([]uint8))
	case []bool:
		where(o, cond, in[1].flat.([]bool), in[2].flat.([]bool))
	default:
		return nil, fmt.Errorf("Where: unsupported dtype %s", n.shape.DType)
	}
	return out, nil
}

func where[T any](out []T, cond []bool, t, f []T) {
	step := func(s []T) int {
		if len(s) == 1 {
			return 0
		}
		return 1
	}
	cs := 1
	if len(cond) == 1 {
		cs = 0
	}
	ts, fs := step(t), step(f)
	parallelFor(len(out), len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if cond[i*cs] {
				out[i] = t[i*ts]
			} else {
				out[i] = f[i*fs]
			}
		}
	})
}

// execConvert converts between any two supported dtypes: to bool is x != 0, from bool 0 or 1,
// float to integer truncates (Go's conversion, as SimpleGo).
func execConvert(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	out := r.newBuffer(n.shape)
	if n.shape.DType == dtypes.BFloat16 || in[0].shape.DType == dtypes.BFloat16 {
		if err := convertBF16(r, out, in[0]); err != nil {
			return nil, err
		}
		return out, nil
	}
	switch x := in[0].flat.(type) {
	case []float32:
		convertFrom(out.flat, x)
	case []float64:
		convertFrom(out.flat, x)
	case []int32:
		convertFrom(out.flat, x)
	case []int64:
		convertFrom(out.flat, x)
	case []uint8:
		convertFrom(out.flat, x)
	case []bool:
		switch o := out.flat.(type) {
		case []float32:
			fromBool(o, x)
		case []float64:
			fromBool(o, x)
		case []int32:
			fromBool(o, x)
		case []int64:
			fromBool(o, x)
		case []uint8:
			fromBool(o, x)
		default:
			return nil, fmt.Errorf("ConvertDType bool to %s", n.shape.DType)
		}
	default:
		return nil, fmt.Errorf("ConvertDType from %s", in[0].shape.DType)
	}
	return out, nil
}

func convertFrom[F number](out any, x []F) {
	switch o := out.(type) {
	case []float32:
		convert(o, x)
	case []float64:
		convert(o, x)
	case []int32:
		convert(o, x)
	case []int64:
		convert(o, x)
	case []uint8:
		convert(o, x)
	case []bool:
		for i, v := range x {
			o[i] = v != 0
		}
	default:
		panic(fmt.Sprintf("ConvertDType to %s", flatDType(out)))
	}
}

func convert[T, F number](out []T, x []F) {
	parallelFor(len(x), len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = T(x[i])
		}
	})
}

func fromBool[T number](out []T, x []bool) {
	for i, v := range x {
		if v {
			out[i] = 1
		} else {
			out[i] = 0
		}
	}
}
