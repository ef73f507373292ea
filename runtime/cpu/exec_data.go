package cpu

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"stx.dev/stx/runtime/cpu/kernels"
)

// executors maps each implemented op to its execution function; Compile rejects graphs with
// ops missing here. Parameter and Constant have none (their buffers are set before the
// program runs), Reshape and Identity are aliases handled by Execute itself.
var executors = map[backends.OpType]execFn{}

// unaryOps and binaryOps are the ops execUnary and execBinary run.
var (
	unaryOps = []backends.OpType{
		backends.OpTypeAbs, backends.OpTypeNeg, backends.OpTypeSign, backends.OpTypeExp, backends.OpTypeExpm1,
		backends.OpTypeLog, backends.OpTypeLog1p, backends.OpTypeLogistic, backends.OpTypeCeil, backends.OpTypeFloor,
		backends.OpTypeRound, backends.OpTypeRsqrt, backends.OpTypeSqrt, backends.OpTypeCos, backends.OpTypeSin,
		backends.OpTypeTanh, backends.OpTypeErf, backends.OpTypeLogicalNot,
	}
	binaryOps = []backends.OpType{
		backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul, backends.OpTypeDiv, backends.OpTypeRem,
		backends.OpTypePow, backends.OpTypeMax, backends.OpTypeMin,
		backends.OpTypeLogicalAnd, backends.OpTypeLogicalOr, backends.OpTypeLogicalXor,
	}
)

func init() {
	for _, op := range unaryOps {
		executors[op] = execUnary
	}
	for _, op := range binaryOps {
		executors[op] = execBinary
	}
	for _, op := range []backends.OpType{
		backends.OpTypeEqual, backends.OpTypeNotEqual, backends.OpTypeGreaterOrEqual, backends.OpTypeGreaterThan,
		backends.OpTypeLessOrEqual, backends.OpTypeLessThan,
	} {
		executors[op] = execCompare
	}
	executors[backends.OpTypeIsFinite] = execFloatPredicate
	executors[backends.OpTypeIsNaN] = execFloatPredicate
	executors[backends.OpTypeWhere] = execWhere
	executors[backends.OpTypeConvertDType] = execConvert
	executors[backends.OpTypeReshape] = nil // alias, see Execute
	executors[backends.OpTypeIdentity] = nil
	executors[backends.OpTypeTranspose] = execTranspose
	executors[backends.OpTypeBroadcastInDim] = execBroadcastInDim
	executors[backends.OpTypeSlice] = execSlice
	executors[backends.OpTypeConcatenate] = execConcatenate
	executors[backends.OpTypeGather] = execGather
	executors[backends.OpTypeScatterSum] = execScatter
	executors[backends.OpTypeScatterMax] = execScatter
	executors[backends.OpTypeScatterMin] = execScatter
	executors[backends.OpTypeReduceSum] = execReduce
	executors[backends.OpTypeReduceProduct] = execReduce
	executors[backends.OpTypeReduceMax] = execReduce
	executors[backends.OpTypeReduceMin] = execReduce
	executors[backends.OpTypeArgMinMax] = execArgMinMax
	executors[backends.OpTypeIota] = execIota
	executors[backends.OpTypePad] = execPad
	executors[backends.OpTypeReverse] = execReverse
	executors[backends.OpTypeDotGeneral] = execDotGeneral
}

// dataKernels are the data-movement kernels of one element type, so that each executor
// dispatches on the dtype with one table lookup instead of a type switch.
type dataKernels struct {
	transpose func(out, in *Buffer, perm []int)
	broadcast func(out, in *Buffer, axes []int)
	slice     func(out, in *Buffer, p sliceParams)
	concat    func(out *Buffer, ins []*Buffer, axis int)
	gather    func(out, operand, indices *Buffer, p gatherParams) error
	pad       func(out, in, fill *Buffer, axes []kernels.PadAxis)
	reverse   func(out, in *Buffer, axes []int)
	// Number-only kernels; nil for bool.
	scatter func(op backends.OpType, operand, indices, updates *Buffer, p scatterParams) error
	reduce  func(out, in *Buffer, p reduceParams)
	iota    func(out *Buffer, axis int)
	argMM   func(out, in *Buffer, p argMinMaxParams) error
}

var dataKernelsByDType = map[dtypes.DType]*dataKernels{
	dtypes.Float32: numberKernels[float32](),
	dtypes.Float64: numberKernels[float64](),
	dtypes.Int32:   numberKernels[int32](),
	dtypes.Int64:   numberKernels[int64](),
	dtypes.Uint8:   numberKernels[uint8](),
	dtypes.Bool:    anyKernels[bool](),
	// Data movement only: other ops compute bfloat16 in float32 (upcastBF16).
	dtypes.BFloat16: anyKernels[bf16](),
}

func anyKernels[T any]() *dataKernels {
	return &dataKernels{
		transpose: func(out, in *Buffer, perm []int) {
			kernels.Transpose(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, perm)
		},
		broadcast: func(out, in *Buffer, axes []int) {
			kernels.BroadcastInDim(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, out.shape.Dimensions, axes)
		},
		slice: func(out, in *Buffer, p sliceParams) {
			kernels.Slice(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, p.starts, p.limits, p.strides)
		},
		concat: func(out *Buffer, ins []*Buffer, axis int) {
			srcs := make([][]T, len(ins))
			dims := make([][]int, len(ins))
			for i, b := range ins {
				srcs[i], dims[i] = b.flat.([]T), b.shape.Dimensions
			}
			kernels.Concatenate(out.flat.([]T), srcs, dims, axis)
		},
		gather: func(out, operand, indices *Buffer, p gatherParams) error {
			dst, op := out.flat.([]T), operand.flat.([]T)
			od, id := operand.shape.Dimensions, indices.shape.Dimensions
			switch idx := indices.flat.(type) {
			case []int32:
				kernels.Gather(dst, op, od, idx, id, p.indexVectorAxis, p.offsetOutputAxes, p.collapsedSliceAxes, p.startIndexMap, p.sliceSizes, out.shape.Dimensions)
			case []int64:
				kernels.Gather(dst, op, od, idx, id, p.indexVectorAxis, p.offsetOutputAxes, p.collapsedSliceAxes, p.startIndexMap, p.sliceSizes, out.shape.Dimensions)
			case []uint8:
				kernels.Gather(dst, op, od, idx, id, p.indexVectorAxis, p.offsetOutputAxes, p.collapsedSliceAxes, p.startIndexMap, p.sliceSizes, out.shape.Dimensions)
			default:
				return fmt.Errorf("Gather: indices of dtype %s not supported", indices.shape.DType)
			}
			return nil
		},
		pad: func(out, in, fill *Buffer, axes []kernels.PadAxis) {
			kernels.Pad(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, fill.flat.([]T)[0], axes)
		},
		reverse: func(out, in *Buffer, axes []int) {
			kernels.Reverse(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, axes)
		},
	}
}

func numberKernels[T kernels.Number]() *dataKernels {
	k := anyKernels[T]()
	k.scatter = func(op backends.OpType, operand, indices, updates *Buffer, p scatterParams) error {
		switch idx := indices.flat.(type) {
		case []int32:
			scatterT[T](op, operand, idx, indices, updates, p)
		case []int64:
			scatterT[T](op, operand, idx, indices, updates, p)
		case []uint8:
			scatterT[T](op, operand, idx, indices, updates, p)
		default:
			return fmt.Errorf("%s: indices of dtype %s not supported", op, indices.shape.DType)
		}
		return nil
	}
	k.reduce = func(out, in *Buffer, p reduceParams) {
		kernels.Reduce(out.flat.([]T), in.flat.([]T), in.shape.Dimensions, p.axes, p.op)
	}
	k.iota = func(out *Buffer, axis int) {
		kernels.Iota(out.flat.([]T), out.shape.Dimensions, axis)
	}
	k.argMM = func(out, in *Buffer, p argMinMaxParams) error {
		src, dims := in.flat.([]T), in.shape.Dimensions
		switch o := out.flat.(type) {
		case []int32:
			kernels.ArgMinMax(o, src, dims, p.axis, p.isMin)
		case []int64:
			kernels.ArgMinMax(o, src, dims, p.axis, p.isMin)
		case []uint8:
			kernels.ArgMinMax(o, src, dims, p.axis, p.isMin)
		default:
			return fmt.Errorf("ArgMinMax: output dtype %s not supported", out.shape.DType)
		}
		return nil
	}
	return k
}

func scatterT[T kernels.Number, I kernels.Index](op backends.OpType, operand *Buffer, idx []I, indices, updates *Buffer, p scatterParams) {
	o, u := operand.flat.([]T), updates.flat.([]T)
	od, id, ud := operand.shape.Dimensions, indices.shape.Dimensions, updates.shape.Dimensions
	switch op {
	case backends.OpTypeScatterSum:
		kernels.ScatterSum(o, od, idx, id, u, ud, p.indexVectorAxis, p.updateWindowAxes, p.insertedWindowAxes, p.scatterAxesToOperandAxes)
	case backends.OpTypeScatterMax:
		kernels.ScatterMax(o, od, idx, id, u, ud, p.indexVectorAxis, p.updateWindowAxes, p.insertedWindowAxes, p.scatterAxesToOperandAxes)
	default:
		kernels.ScatterMin(o, od, idx, id, u, ud, p.indexVectorAxis, p.updateWindowAxes, p.insertedWindowAxes, p.scatterAxesToOperandAxes)
	}
}

func kernelsFor(dt dtypes.DType) (*dataKernels, error) {
	k, ok := dataKernelsByDType[dt]
	if !ok {
		return nil, fmt.Errorf("dtype %s not supported", dt)
	}
	return k, nil
}

func execTranspose(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	k.transpose(out, in[0], n.data.([]int))
	return out, nil
}

func execBroadcastInDim(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	if zeroScalar(in[0].flat) {
		// Zeros to scatter into (the gradients of gathers): clear only writes, where the
		// broadcast's fill also reads what it copies.
		clearFlat(out.flat)
		return out, nil
	}
	k.broadcast(out, in[0], n.data.([]int))
	return out, nil
}

// zeroScalar reports whether flat holds one element whose bits are all zero (+0 for floats).
func zeroScalar(flat any) bool {
	switch f := flat.(type) {
	case []float32:
		return len(f) == 1 && math.Float32bits(f[0]) == 0
	case []float64:
		return len(f) == 1 && math.Float64bits(f[0]) == 0
	case []int32:
		return len(f) == 1 && f[0] == 0
	case []int64:
		return len(f) == 1 && f[0] == 0
	case []uint8:
		return len(f) == 1 && f[0] == 0
	case []bool:
		return len(f) == 1 && !f[0]
	case []bf16:
		return len(f) == 1 && f[0] == 0
	}
	return false
}

// clearFlat sets every element of a flat slice to its zero value.
func clearFlat(flat any) {
	switch f := flat.(type) {
	case []float32:
		clear(f)
	case []float64:
		clear(f)
	case []int32:
		clear(f)
	case []int64:
		clear(f)
	case []uint8:
		clear(f)
	case []bool:
		clear(f)
	case []bf16:
		clear(f)
	default:
		panic(fmt.Sprintf("cpu backend: unsupported flat type %T", flat))
	}
}

func execSlice(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	k.slice(out, in[0], n.data.(sliceParams))
	return out, nil
}

func execConcatenate(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	k.concat(out, in, n.data.(int))
	return out, nil
}

func execGather(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	if err := k.gather(out, in[0], in[1], n.data.(gatherParams)); err != nil {
		return nil, err
	}
	return out, nil
}

// execScatter updates the operand in place when it dies here, else a copy of it.
func execScatter(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	if k.scatter == nil {
		return nil, fmt.Errorf("%s: dtype %s not supported", n.op, n.shape.DType)
	}
	out := in[0]
	if !owned[0] {
		out = r.newBuffer(n.shape)
		copyFlat(out.flat, in[0].flat)
	}
	if err := k.scatter(n.op, out, in[1], in[2], n.data.(scatterParams)); err != nil {
		return nil, err
	}
	return out, nil
}

func execReduce(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil || k.reduce == nil {
		return nil, fmt.Errorf("%s: dtype %s not supported", n.op, n.shape.DType)
	}
	out := r.newBuffer(n.shape)
	p := n.data.(reduceParams)
	if vecMaxRows(out, in[0], p) {
		return out, nil
	}
	k.reduce(out, in[0], p)
	return out, nil
}

// vecMaxRows runs a float32 max or min over the trailing axes (the softmaxes' max over the
// last axis) in C when the rows are long enough; it reports whether it did. Max and min do not
// depend on the order they combine elements in: the bits are kernels.Reduce's.
func vecMaxRows(out, in *Buffer, p reduceParams) bool {
	x, ok := in.flat.([]float32)
	if !ok || !vecCompiledIn || (p.op != kernels.ReduceMax && p.op != kernels.ReduceMin) || len(x) < vecMinLen {
		return false
	}
	rank := in.shape.Rank()
	trailing := make([]bool, rank)
	for _, a := range p.axes {
		trailing[a] = true
	}
	n := 1
	for a := rank - 1; a >= rank-len(p.axes); a-- {
		if !trailing[a] {
			return false
		}
		n *= in.shape.Dimensions[a]
	}
	if n < 16 {
		return false
	}
	o := out.flat.([]float32)
	isMin := p.op == kernels.ReduceMin
	parallelFor(len(o), len(x), func(lo, hi int) { vecMaxRowsAt(vecLevel, isMin, o[lo:hi], x[lo*n:hi*n], n) })
	return true
}

func execArgMinMax(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(in[0].shape.DType)
	if err != nil || k.argMM == nil {
		return nil, fmt.Errorf("ArgMinMax: dtype %s not supported", in[0].shape.DType)
	}
	out := r.newBuffer(n.shape)
	if err := k.argMM(out, in[0], n.data.(argMinMaxParams)); err != nil {
		return nil, err
	}
	return out, nil
}

func execIota(r *execution, n *node, _ []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil || k.iota == nil {
		return nil, fmt.Errorf("Iota: dtype %s not supported", n.shape.DType)
	}
	out := r.newBuffer(n.shape)
	k.iota(out, n.data.(int))
	return out, nil
}

func execPad(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	k.pad(out, in[0], in[1], n.data.([]kernels.PadAxis))
	return out, nil
}

func execReverse(r *execution, n *node, in []*Buffer, _ []bool) (*Buffer, error) {
	k, err := kernelsFor(n.shape.DType)
	if err != nil {
		return nil, err
	}
	out := r.newBuffer(n.shape)
	k.reverse(out, in[0], n.data.([]int))
	return out, nil
}
