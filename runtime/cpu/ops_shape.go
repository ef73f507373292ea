package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"stx.dev/stx/runtime/cpu/kernels"
)

// This file holds the builder methods of the ops that move, reshape, reduce or multiply data;
// their execution is in exec_data.go and dotgeneral.go.

// Reshape implements backends.Builder; it never copies at run time.
func (b *Builder) Reshape(x backends.Op, dims ...int) (backends.Op, error) {
	nodes, err := b.checkOps("Reshape", x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ReshapeOp(nodes[0].shape, dims)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Reshape: %w", err)
	}
	return b.newNode(backends.OpTypeReshape, shape, nil, nodes[0]), nil
}

// Transpose implements backends.Builder.
func (b *Builder) Transpose(x backends.Op, permutation ...int) (backends.Op, error) {
	nodes, err := b.checkOps("Transpose", x)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.TransposeOp(nodes[0].shape, permutation)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Transpose: %w", err)
	}
	return b.newNode(backends.OpTypeTranspose, shape, slices.Clone(permutation), nodes[0]), nil
}

// BroadcastInDim implements backends.Builder.
func (b *Builder) BroadcastInDim(x backends.Op, outputShape shapes.Shape, broadcastAxes []int) (backends.Op, error) {
	nodes, err := b.checkOps("BroadcastInDim", x)
	if err != nil {
		return nil, err
	}
	if err := shapeinference.BroadcastInDimOp(nodes[0].shape, outputShape, broadcastAxes); err != nil {
		return nil, fmt.Errorf("cpu backend BroadcastInDim: %w", err)
	}
	return b.newNode(backends.OpTypeBroadcastInDim, outputShape.Clone(), slices.Clone(broadcastAxes), nodes[0]), nil
}

type sliceParams struct{ starts, limits, strides []int }

// Slice implements backends.Builder.
func (b *Builder) Slice(x backends.Op, starts, limits, strides []int) (backends.Op, error) {
	nodes, err := b.checkOps("Slice", x)
	if err != nil {
		return nil, err
	}
	rank := nodes[0].shape.Rank()
	if len(strides) == 0 {
		strides = make([]int, rank)
		for i := range strides {
			strides[i] = 1
		}
	}
	shape, err := shapeinference.SliceOp(nodes[0].shape, starts, limits, strides)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Slice: %w", err)
	}
	p := sliceParams{slices.Clone(starts), slices.Clone(limits), slices.Clone(strides)}
	return b.newNode(backends.OpTypeSlice, shape, p, nodes[0]), nil
}

// Concatenate implements backends.Builder.
func (b *Builder) Concatenate(axis int, operands ...backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps("Concatenate", operands...)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("cpu backend Concatenate: no operands")
	}
	if len(nodes) == 1 {
		return b.Identity(operands[0])
	}
	inShapes := make([]shapes.Shape, len(nodes))
	for i, n := range nodes {
		inShapes[i] = n.shape
	}
	shape, err := shapeinference.ConcatenateOp(inShapes, axis)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Concatenate: %w", err)
	}
	if axis < 0 {
		axis += shape.Rank()
	}
	return b.newNode(backends.OpTypeConcatenate, shape, axis, nodes...), nil
}

type gatherParams struct {
	indexVectorAxis                                                 int
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int
}

// Gather implements backends.Builder (XLA semantics; start indices are clamped).
func (b *Builder) Gather(operand, startIndices backends.Op, indexVectorAxis int,
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (backends.Op, error) {
	nodes, err := b.checkOps("Gather", operand, startIndices)
	if err != nil {
		return nil, err
	}
	if !nodes[1].shape.DType.IsInt() {
		return nil, fmt.Errorf("cpu backend Gather: indices must be integers, got %s", nodes[1].shape)
	}
	shape, err := shapeinference.Gather(nodes[0].shape, nodes[1].shape, indexVectorAxis, offsetOutputAxes,
		collapsedSliceAxes, startIndexMap, sliceSizes, indicesAreSorted)
	if err != nil {
		return nil, fmt.Errorf("cpu backend Gather: %w", err)
	}
	p := gatherParams{indexVectorAxis, slices.Clone(offsetOutputAxes), slices.Clone(collapsedSliceAxes),
		slices.Clone(startIndexMap), slices.Clone(sliceSizes)}
	return b.newNode(backends.OpTypeGather, shape, p, nodes...), nil
}

type scatterParams struct {
	indexVectorAxis                                                int
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int
}

func (b *Builder) scatter(op backends.OpType, operand, indices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), operand, indices, updates)
	if err != nil {
		return nil, err
	}
	if !nodes[1].shape.DType.IsInt() {
		return nil, fmt.Errorf("cpu backend %s: indices must be integers, got %s", op, nodes[1].shape)
	}
	if nodes[0].shape.DType == dtypes.Bool {
		return nil, fmt.Errorf("cpu backend %s: bool operands are not supported", op)
	}
	shape, err := shapeinference.ScatterOp(nodes[0].shape, nodes[1].shape, nodes[2].shape, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes)
	if err != nil {
		return nil, fmt.Errorf("cpu backend %s: %w", op, err)
	}
	p := scatterParams{indexVectorAxis, slices.Clone(updateWindowAxes), slices.Clone(insertedWindowAxes),
		slices.Clone(scatterAxesToOperandAxes)}
	return b.newNode(op, shape, p, nodes...), nil
}

// ScatterSum implements backends.Builder.
func (b *Builder) ScatterSum(operand, indices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterSum, operand, indices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes)
}

// ScatterMax implements backends.Builder.
func (b *Builder) ScatterMax(operand, indices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterMax, operand, indices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes)
}

// ScatterMin implements backends.Builder.
func (b *Builder) ScatterMin(operand, indices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterMin, operand, indices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes)
}

type reduceParams struct {
	axes []int
	op   kernels.ReduceOp
}

func (b *Builder) reduce(op backends.OpType, kop kernels.ReduceOp, x backends.Op, axes []int) (backends.Op, error) {
	nodes, err := b.checkOps(op.String(), x)
	if err != nil {
		return nil, err
	}
	if nodes[0].shape.DType == dtypes.Bool {
		return nil, fmt.Errorf("cpu backend %s: bool operands are not supported", op)
	}
	rank := nodes[0].shape.Rank()
	if len(axes) == 0 {
		// No axes means all of them.
		axes = make([]int, rank)
		for i := range axes {
			axes[i] = i
		}
	}
	axes, err = normalizeAxes(op.String(), axes, rank)
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ReduceOp(nodes[0].shape, axes)
	if err != nil {
		return nil, fmt.Errorf("cpu backend %s: %w", op, err)
	}
	return b.newNode(op, shape, reduceParams{axes, kop}, nodes[0]), nil
}

// ReduceSum implements backends.Builder.
func (b *Builder) ReduceSum(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceSum, kernels.ReduceSum, x, axes)
}

// ReduceProduct implements backends.Builder.
func (b *Builder) ReduceProduct(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceProduct, kernels.ReduceProduct, x, axes)
}

// ReduceMax implements backends.Builder.
func (b *Builder) ReduceMax(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMax, kernels.ReduceMax, x, axes)
}

// ReduceMin implements backends.Builder.
func (b *Builder) ReduceMin(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMin, kernels.ReduceMin, x, axes)
}

type argMinMaxParams struct {
	axis  int
	isMin bool
}

// ArgMinMax implements backends.Builder.
func (b *Builder) ArgMinMax(x backends.Op, axis int, outputDType dtypes.DType, isMin bool) (backends.Op, error) {
	nodes, err := b.checkOps("ArgMinMax", x)
	if err != nil {
		return nil, err
	}
	if err := checkDType("ArgMinMax", outputDType); err != nil {
		return nil, err
	}
	axis, err = normalizeAxis("ArgMinMax", axis, nodes[0].shape.Rank())
	if err != nil {
		return nil, err
	}
	shape, err := shapeinference.ArgMinMaxOp(nodes[0].shape, axis, outputDType)
	if err != nil {
		return nil, fmt.Errorf("cpu backend ArgMinMax: %w", err)
	}
	return b.newNode(backends.OpTypeArgMinMax, shape, argMinMaxParams{axis, isMin}, nodes[0]), nil
}

// Iota implements backends.Builder.
func (b *Builder) Iota(shape shapes.Shape, iotaAxis int) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("Iota: builder %q was already compiled", b.name)
	}
	if err := checkDType("Iota", shape.DType); err != nil {
		return nil, err
	}
	if shape.DType == dtypes.Bool {
		return nil, fmt.Errorf("cpu backend Iota: bool is not a number")
	}
	axis, err := normalizeAxis("Iota", iotaAxis, shape.Rank())
	if err != nil {
		return nil, err
	}
	return b.newNode(backends.OpTypeIota, shape.Clone(), axis), nil
}

// Pad implements backends.Builder (XLA semantics: negative start/end crop, interior >= 0).
func (b *Builder) Pad(x, fillValue backends.Op, axesConfig ...backends.PadAxis) (backends.Op, error) {
	nodes, err := b.checkOps("Pad", x, fillValue)
	if err != nil {
		return nil, err
	}
	operand, fill := nodes[0].shape, nodes[1].shape
	if !fill.IsScalar() || fill.DType != operand.DType {
		return nil, fmt.Errorf("cpu backend Pad: fill value must be a scalar of %s, got %s", operand.DType, fill)
	}
	if len(axesConfig) > operand.Rank() {
		return nil, fmt.Errorf("cpu backend Pad: %d axes configured for rank %d", len(axesConfig), operand.Rank())
	}
	axes := make([]kernels.PadAxis, operand.Rank())
	dims := make([]int, operand.Rank())
	for i, d := range operand.Dimensions {
		if i < len(axesConfig) {
			c := axesConfig[i]
			if c.Interior < 0 {
				return nil, fmt.Errorf("cpu backend Pad: negative interior padding %d on axis %d", c.Interior, i)
			}
			axes[i] = kernels.PadAxis{Start: c.Start, End: c.End, Interior: c.Interior}
		}
		dims[i] = d + axes[i].Start + axes[i].End
		if d > 0 {
			dims[i] += (d - 1) * axes[i].Interior
		}
		if dims[i] < 0 {
			return nil, fmt.Errorf("cpu backend Pad: axis %d of %s would have negative size %d", i, operand, dims[i])
		}
	}
	return b.newNode(backends.OpTypePad, shapes.Make(operand.DType, dims...), axes, nodes...), nil
}

// Reverse implements backends.Builder.
func (b *Builder) Reverse(x backends.Op, axes ...int) (backends.Op, error) {
	nodes, err := b.checkOps("Reverse", x)
	if err != nil {
		return nil, err
	}
	axes, err = normalizeAxes("Reverse", axes, nodes[0].shape.Rank())
	if err != nil {
		return nil, err
	}
	return b.newNode(backends.OpTypeReverse, nodes[0].shape, axes, nodes[0]), nil
}

// Dot implements backends.Builder for vectors and matrices, through DotGeneral.
func (b *Builder) Dot(lhs, rhs backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps("Dot", lhs, rhs)
	if err != nil {
		return nil, err
	}
	lr, rr := nodes[0].shape.Rank(), nodes[1].shape.Rank()
	if lr < 1 || lr > 2 || rr < 1 || rr > 2 {
		return nil, fmt.Errorf("cpu backend Dot: operands must be vectors or matrices, got %s and %s", nodes[0].shape, nodes[1].shape)
	}
	return b.DotGeneral(lhs, []int{lr - 1}, nil, rhs, []int{0}, nil)
}

// DotGeneral implements backends.Builder; see dotgeneral.go.
func (b *Builder) DotGeneral(lhs backends.Op, lhsContractingAxes, lhsBatchAxes []int,
	rhs backends.Op, rhsContractingAxes, rhsBatchAxes []int) (backends.Op, error) {
	nodes, err := b.checkOps("DotGeneral", lhs, rhs)
	if err != nil {
		return nil, err
	}
	p, shape, err := planDotGeneral(nodes[0].shape, lhsContractingAxes, lhsBatchAxes,
		nodes[1].shape, rhsContractingAxes, rhsBatchAxes)
	if err != nil {
		return nil, fmt.Errorf("cpu backend DotGeneral: %w", err)
	}
	return b.newNode(backends.OpTypeDotGeneral, shape, p, nodes...), nil
}
