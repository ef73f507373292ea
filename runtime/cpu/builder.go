package cpu

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/notimplemented"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// errNotImplemented is what every op the backend leaves out returns when a graph uses it.
func errNotImplemented(op backends.OpType) error {
	return fmt.Errorf("not implemented by the cpu backend: %s", op)
}

// Builder builds a computation graph for the cpu backend. Ops it does not implement come from
// the embedded notimplemented.Builder, whose ErrFn names the op.
type Builder struct {
	notimplemented.Builder

	backend  *Backend
	name     string
	nodes    []*node
	params   []*node
	compiled bool
	dist     distribution // SPMD replicas and device assignment, see devices.go
}

var _ backends.Builder = (*Builder)(nil)

func newBuilder(b *Backend, name string) *Builder {
	builder := &Builder{
		Builder: notimplemented.Builder{ErrFn: errNotImplemented},
		backend: b,
		name:    name,
	}
	if d, ok := PlacedDevice(name); ok && b.checkDevice(d) == nil {
		// A one-device program placed on d (PlacedName).
		builder.dist.assignment = []backends.DeviceNum{d}
	}
	return builder
}

// node is one operation of the graph; its output is a single buffer.
type node struct {
	idx     int // position in Builder.nodes, which is a topological order
	op      backends.OpType
	shape   shapes.Shape
	inputs  []*node
	data    any // op parameters, see the ops' builder methods
	builder *Builder
}

func (b *Builder) newNode(op backends.OpType, shape shapes.Shape, data any, inputs ...*node) *node {
	n := &node{idx: len(b.nodes), op: op, shape: shape, inputs: inputs, data: data, builder: b}
	b.nodes = append(b.nodes, n)
	return n
}

// checkOps converts ops to this builder's nodes and checks that their dtypes are supported.
func (b *Builder) checkOps(opName string, ops ...backends.Op) ([]*node, error) {
	if b.compiled {
		return nil, fmt.Errorf("%s: builder %q was already compiled", opName, b.name)
	}
	nodes := make([]*node, len(ops))
	for i, op := range ops {
		n, ok := op.(*node)
		if !ok || n == nil {
			return nil, fmt.Errorf("%s: operand #%d (%T) was not created by a cpu backend builder", opName, i, op)
		}
		if n.builder != b {
			return nil, fmt.Errorf("%s: operand #%d comes from another builder (%q)", opName, i, n.builder.name)
		}
		nodes[i] = n
	}
	return nodes, nil
}

func checkDType(opName string, dt dtypes.DType) error {
	if !dtypeSupported(dt) {
		return fmt.Errorf("%s: dtype %s is not supported by the cpu backend", opName, dt)
	}
	return nil
}

// Name returns the computation's name.
func (b *Builder) Name() string { return b.name }

// OpShape returns the shape of an op's output.
func (b *Builder) OpShape(op backends.Op) (shapes.Shape, error) {
	nodes, err := b.checkOps("OpShape", op)
	if err != nil {
		return shapes.Invalid(), err
	}
	return nodes[0].shape, nil
}

// DistributedSPMD makes the computation run as numDevices replicas (devices.go).
func (b *Builder) DistributedSPMD(numDevices int) error { return b.setSPMD(numDevices) }

// DeviceAssignment fixes the virtual devices the computation runs on (devices.go).
func (b *Builder) DeviceAssignment(devices ...backends.DeviceNum) error {
	return b.setDeviceAssignment(devices)
}

// Parameter declares the next input of the computation.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("Parameter: builder %q was already compiled", b.name)
	}
	if sharding != nil && b.dist.replicas <= 1 {
		// Under SPMD each replica gets its own shard as this parameter: the spec only says how
		// the caller split the value, which the program need not know.
		return nil, fmt.Errorf("Parameter %q: sharding is not supported by the cpu backend", name)
	}
	if err := checkDType("Parameter", shape.DType); err != nil {
		return nil, err
	}
	n := b.newNode(backends.OpTypeParameter, shape, name)
	b.params = append(b.params, n)
	return n, nil
}

// Constant embeds a copy of flat (a []T) with the given dimensions.
func (b *Builder) Constant(flat any, dims ...int) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("Constant: builder %q was already compiled", b.name)
	}
	dt := flatDType(flat)
	if dt == dtypes.InvalidDType {
		if v := reflect.ValueOf(flat); v.Kind() == reflect.Slice {
			return nil, fmt.Errorf("Constant: dtype %s is not supported by the cpu backend", dtypes.FromGoType(v.Type().Elem()))
		}
		return nil, fmt.Errorf("Constant: flat must be a slice, got %T", flat)
	}
	shape := shapes.Make(dt, dims...)
	if n := flatLen(flat); n != shape.Size() {
		return nil, fmt.Errorf("Constant: %d values for shape %s (%d elements)", n, shape, shape.Size())
	}
	c := makeFlat(dt, shape.Size())
	copyFlat(c, flat)
	return b.newNode(backends.OpTypeConstant, shape, c), nil
}

// Identity returns its operand (no copy at run time).
func (b *Builder) Identity(x backends.Op) (backends.Op, error) {
	nodes, err := b.checkOps("Identity", x)
	if err != nil {
		return nil, err
	}
	return b.newNode(backends.OpTypeIdentity, nodes[0].shape, nil, nodes[0]), nil
}

// implementedOps lists every op the backend executes; Capabilities reports exactly these.
var implementedOps = []backends.OpType{
	backends.OpTypeParameter, backends.OpTypeConstant, backends.OpTypeIdentity,
	// Unary.
	backends.OpTypeAbs, backends.OpTypeNeg, backends.OpTypeSign, backends.OpTypeExp, backends.OpTypeExpm1,
	backends.OpTypeLog, backends.OpTypeLog1p, backends.OpTypeLogistic, backends.OpTypeCeil, backends.OpTypeFloor,
	backends.OpTypeRound, backends.OpTypeRsqrt, backends.OpTypeSqrt, backends.OpTypeCos, backends.OpTypeSin,
	backends.OpTypeTanh, backends.OpTypeErf, backends.OpTypeLogicalNot, backends.OpTypeIsFinite, backends.OpTypeIsNaN,
	// Binary.
	backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul, backends.OpTypeDiv, backends.OpTypeRem,
	backends.OpTypePow, backends.OpTypeMax, backends.OpTypeMin,
	backends.OpTypeLogicalAnd, backends.OpTypeLogicalOr, backends.OpTypeLogicalXor,
	// Comparisons.
	backends.OpTypeEqual, backends.OpTypeNotEqual, backends.OpTypeGreaterOrEqual, backends.OpTypeGreaterThan,
	backends.OpTypeLessOrEqual, backends.OpTypeLessThan,
	// Others.
	backends.OpTypeWhere, backends.OpTypeClamp, backends.OpTypeConvertDType, backends.OpTypeReshape,
	backends.OpTypeTranspose, backends.OpTypeBroadcastInDim, backends.OpTypeSlice, backends.OpTypeConcatenate,
	backends.OpTypeGather, backends.OpTypeScatterSum, backends.OpTypeScatterMax, backends.OpTypeScatterMin,
	backends.OpTypeReduceSum, backends.OpTypeReduceProduct, backends.OpTypeReduceMax, backends.OpTypeReduceMin,
	backends.OpTypeArgMinMax, backends.OpTypeIota, backends.OpTypePad, backends.OpTypeReverse,
	backends.OpTypeDot, backends.OpTypeDotGeneral,
}

var capabilities = func() backends.Capabilities {
	c := backends.Capabilities{Operations: map[backends.OpType]bool{}, DTypes: map[dtypes.DType]bool{}}
	for _, op := range implementedOps {
		c.Operations[op] = true
	}
	for _, dt := range supportedDTypes {
		c.DTypes[dt] = true
	}
	return c
}()

// normalizeAxis turns a possibly negative axis into [0, rank).
func normalizeAxis(opName string, axis, rank int) (int, error) {
	if axis < 0 {
		axis += rank
	}
	if axis < 0 || axis >= rank {
		return 0, fmt.Errorf("%s: axis %d out of range for rank %d", opName, axis, rank)
	}
	return axis, nil
}

func normalizeAxes(opName string, axes []int, rank int) ([]int, error) {
	out := slices.Clone(axes)
	for i, a := range out {
		var err error
		if out[i], err = normalizeAxis(opName, a, rank); err != nil {
			return nil, err
		}
	}
	return out, nil
}
