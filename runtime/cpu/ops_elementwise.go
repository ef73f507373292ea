package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// This file holds the builder methods of the elementwise ops; their execution is in
// exec_elementwise.go.

func (b *Builder) unary(op backends.OpType, x backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.UnaryOp(op, nodes[0].shape)
	if err != nil {
		return nil, fmt.Errorf("cpu backend %s: %w", op, err)
	}
	return b.newNode(op, shape, nil, nodes[0]), nil
}

func (b *Builder) binary(op backends.OpType, lhs, rhs backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), lhs, rhs)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.BinaryOp(op, nodes[0].shape, nodes[1].shape)
	if err != nil {
		return nil, fmt.Errorf("cpu backend %s: %w", op, err)
	}
	fixEmptyBroadcast(shape, nodes[0].shape, nodes[1].shape)
	return b.newNode(op, shape, newBcastPlan(nodes[0].shape, nodes[1].shape, shape), nodes[0], nodes[1]), nil
}

func (b *Builder) compare(op backends.OpType, lhs, rhs backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), lhs, rhs)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ComparisonOp(op, nodes[0].shape, nodes[1].shape)
	if err != nil {
		return nil, fmt.Errorf("cpu backend %s: %w", op, err)
	}
	fixEmptyBroadcast(shape, nodes[0].shape, nodes[1].shape)
	return b.newNode(op, shape, newBcastPlan(nodes[0].shape, nodes[1].shape, shape), nodes[0], nodes[1]), nil
}

// fixEmptyBroadcast corrects shapeinference's output for an empty axis broadcast against a
// size-1 axis: it takes the larger dimension (1), XLA and NumPy the non-broadcast one (0).
func fixEmptyBroadcast(out, lhs, rhs shapes.Shape) {
	if lhs.Rank() != out.Rank() || rhs.Rank() != out.Rank() {
		return // a scalar operand: out is the other operand's shape
	}
	for i := range out.Dimensions {
		if lhs.Dimensions[i] == 0 || rhs.Dimensions[i] == 0 {
			out.Dimensions[i] = 0
		}
	}
}

// floatPredicate builds IsFinite / IsNaN: float input, bool output of the same dimensions.
func (b *Builder) floatPredicate(op backends.OpType, x backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), x)
	if err != nil {
		return nil, err
	}
	if !nodes[0].shape.DType.IsFloat() {
		return nil, fmt.Errorf("cpu backend %s: operand must be a float, got %s", op, nodes[0].shape)
	}
	shape := nodes[0].shape.Clone()
	shape.DType = dtypes.Bool
	return b.newNode(op, shape, nil, nodes[0]), nil
}

// Abs implements backends.Builder.
func (b *Builder) Abs(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeAbs, x) }

// Neg implements backends.Builder.
func (b *Builder) Neg(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeNeg, x) }

// Sign implements backends.Builder.
func (b *Builder) Sign(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSign, x) }

// Exp implements backends.Builder.
func (b *Builder) Exp(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeExp, x) }

// Expm1 implements backends.Builder.
func (b *Builder) Expm1(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeExpm1, x) }

// Log implements backends.Builder.
func (b *Builder) Log(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeLog, x) }

// Log1p implements backends.Builder.
func (b *Builder) Log1p(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeLog1p, x) }

// Logistic implements backends.Builder.
func (b *Builder) Logistic(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogistic, x)
}

// Ceil implements backends.Builder.
func (b *Builder) Ceil(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeCeil, x) }

// Floor implements backends.Builder.
func (b *Builder) Floor(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeFloor, x) }

// Round implements backends.Builder (half to even).
func (b *Builder) Round(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeRound, x) }

// Rsqrt implements backends.Builder.
func (b *Builder) Rsqrt(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeRsqrt, x) }

// Sqrt implements backends.Builder.
func (b *Builder) Sqrt(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSqrt, x) }

// Cos implements backends.Builder.
func (b *Builder) Cos(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeCos, x) }

// Sin implements backends.Builder.
func (b *Builder) Sin(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeSin, x) }

// Tanh implements backends.Builder.
func (b *Builder) Tanh(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeTanh, x) }

// Erf implements backends.Builder.
func (b *Builder) Erf(x backends.Op) (backends.Op, error) { return b.unary(backends.OpTypeErf, x) }

// LogicalNot implements backends.Builder.
func (b *Builder) LogicalNot(x backends.Op) (backends.Op, error) {
	return b.unary(backends.OpTypeLogicalNot, x)
}

// IsFinite implements backends.Builder.
func (b *Builder) IsFinite(x backends.Op) (backends.Op, error) {
	return b.floatPredicate(backends.OpTypeIsFinite, x)
}

// IsNaN implements backends.Builder.
func (b *Builder) IsNaN(x backends.Op) (backends.Op, error) {
	return b.floatPredicate(backends.OpTypeIsNaN, x)
}

// Add implements backends.Builder.
func (b *Builder) Add(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeAdd, lhs, rhs)
}

// Sub implements backends.Builder.
func (b *Builder) Sub(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeSub, lhs, rhs)
}

// Mul implements backends.Builder.
func (b *Builder) Mul(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMul, lhs, rhs)
}

// Div implements backends.Builder.
func (b *Builder) Div(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeDiv, lhs, rhs)
}

// Rem implements backends.Builder (the sign follows the dividend, as math.Mod and Go's %).
func (b *Builder) Rem(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeRem, lhs, rhs)
}

// Pow implements backends.Builder.
func (b *Builder) Pow(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypePow, lhs, rhs)
}

// Max implements backends.Builder (NaN propagates).
func (b *Builder) Max(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMax, lhs, rhs)
}

// Min implements backends.Builder (NaN propagates).
func (b *Builder) Min(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeMin, lhs, rhs)
}

// LogicalAnd implements backends.Builder.
func (b *Builder) LogicalAnd(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalAnd, lhs, rhs)
}

// LogicalOr implements backends.Builder.
func (b *Builder) LogicalOr(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalOr, lhs, rhs)
}

// LogicalXor implements backends.Builder.
func (b *Builder) LogicalXor(lhs, rhs backends.Op) (backends.Op, error) {
	return b.binary(backends.OpTypeLogicalXor, lhs, rhs)
}

// Equal implements backends.Builder.
func (b *Builder) Equal(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeEqual, lhs, rhs)
}

// NotEqual implements backends.Builder.
func (b *Builder) NotEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeNotEqual, lhs, rhs)
}

// GreaterOrEqual implements backends.Builder.
func (b *Builder) GreaterOrEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeGreaterOrEqual, lhs, rhs)
}

// GreaterThan implements backends.Builder.
func (b *Builder) GreaterThan(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeGreaterThan, lhs, rhs)
}

// LessOrEqual implements backends.Builder.
func (b *Builder) LessOrEqual(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeLessOrEqual, lhs, rhs)
}

// LessThan implements backends.Builder.
func (b *Builder) LessThan(lhs, rhs backends.Op) (backends.Op, error) {
	return b.compare(backends.OpTypeLessThan, lhs, rhs)
}

// Clamp implements backends.Builder as Min(Max(x, lo), hi); lo and hi are scalars or x's shape.
func (b *Builder) Clamp(lo, x, hi backends.Op) (backends.Op, error) {
	m, err := b.binary(backends.OpTypeMax, x, lo)
	if err != nil {
		return nil, fmt.Errorf("Clamp: %w", err)
	}
	m, err = b.binary(backends.OpTypeMin, m, hi)
	if err != nil {
		return nil, fmt.Errorf("Clamp: %w", err)
	}
	return m, nil
}

// Where implements backends.Builder.
func (b *Builder) Where(condition, onTrue, onFalse backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps("Where", condition, onTrue, onFalse)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.WhereOp(nodes[0].shape, nodes[1].shape, nodes[2].shape)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Where: %w", err)
	}
	return b.newNode(backends.OpTypeWhere, shape, nil, nodes...), nil
}

// ConvertDType implements backends.Builder.
func (b *Builder) ConvertDType(x backends.Op, dtype dtypes.DType) (backends.Op, error) {
	nodes, err := b.checkOps("ConvertDType", x)
	if err != nil {
		return nil, err
	}
	if err := checkDType("ConvertDType", dtype); err != nil {
		return nil, err
	}
	if nodes[0].shape.DType == dtype {
		return b.Identity(x)
	}
	shape := shapes.Make(dtype, nodes[0].shape.Dimensions...)
	return b.newNode(backends.OpTypeConvertDType, shape, nil, nodes[0]), nil
}
