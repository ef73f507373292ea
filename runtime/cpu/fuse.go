package cpu

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Broadcast fusion. GoMLX makes both operands of a binary op the same shape before calling the
// backend, so RMSNorm (x·broadcast(rsqrt(mean)), x·broadcast(w)), softmax (x−broadcast(max),
// e/broadcast(sum)) and the gradients of reductions build a full [B,T,D] array with
// BroadcastInDim only for one elementwise op to read it once. The binary ops already iterate
// under implicit broadcasting (bcastPlan), so at compile time a binary op or comparison whose
// operand is such a broadcast reads the broadcast's operand instead, seen with size-1 axes
// where the broadcast adds or repeats them; a broadcast no step reads any more is not computed.
// The elementwise operations are the same, only their indexing changes: results are identical.
//
// A broadcast stays materialised for any reader that is not fused (an output, a parameter of
// another op, an op whose other operand is not full-size).

// fuseMinInner is the shortest innermost run a fused op may iterate over: the plan's loop
// runs once per run, and below this the per-run call costs more than materialising the
// broadcast saves.
const fuseMinInner = 16

// fusedOperandShape returns the shape under which b's operand, read directly, broadcasts
// implicitly to b's output (b's rank, size-1 axes where b adds or repeats values), or false
// when the broadcast also reorders axes.
func fusedOperandShape(b *node) (shapes.Shape, bool) {
	axes := b.data.([]int)
	x := b.inputs[0].shape
	out := b.shape
	dims := make([]int, out.Rank())
	for i := range dims {
		dims[i] = 1
	}
	for i, a := range axes {
		if i > 0 && a <= axes[i-1] {
			return shapes.Shape{}, false
		}
		d := x.Dimensions[i]
		if d != 1 && d != out.Dimensions[a] {
			return shapes.Shape{}, false
		}
		dims[a] = d
	}
	return shapes.Make(x.DType, dims...), true
}

// fusibleBinary lists the ops whose executors take a bcastPlan.
func fusibleBinary(op backends.OpType) bool {
	switch op {
	case backends.OpTypeAdd, backends.OpTypeSub, backends.OpTypeMul, backends.OpTypeDiv, backends.OpTypeRem,
		backends.OpTypePow, backends.OpTypeMax, backends.OpTypeMin,
		backends.OpTypeLogicalAnd, backends.OpTypeLogicalOr, backends.OpTypeLogicalXor,
		backends.OpTypeEqual, backends.OpTypeNotEqual, backends.OpTypeGreaterOrEqual, backends.OpTypeGreaterThan,
		backends.OpTypeLessOrEqual, backends.OpTypeLessThan:
		return true
	}
	return false
}

// fuseBroadcasts returns the program's nodes, indexed as nodes: the node itself, or for a
// binary op reading fusible broadcasts a copy that reads the broadcasts' operands under a new
// plan. needed marks the nodes the outputs depend on before fusion.
func fuseBroadcasts(nodes []*node, needed []bool) []*node {
	prog := slices.Clone(nodes)
	for _, n := range nodes {
		if !needed[n.idx] || !fusibleBinary(n.op) || len(n.inputs) != 2 || n.shape.Size() == 0 {
			continue
		}
		// What each operand can be read as: itself, or a broadcast's operand.
		var src [2]*node
		var view [2]shapes.Shape
		var fusible [2]bool
		for i, in := range n.inputs {
			src[i], view[i] = in, in.shape
			if in.op == backends.OpTypeBroadcastInDim {
				if xs, ok := fusedOperandShape(in); ok {
					src[i], view[i], fusible[i] = in.inputs[0], xs, true
				}
			}
		}
		if !fusible[0] && !fusible[1] {
			continue
		}
		// Try both operands fused, then each alone, the smaller source first (it saves the
		// larger materialisation... and reads the least).
		choices := [][2]bool{{fusible[0], fusible[1]}}
		if fusible[0] && fusible[1] {
			first, second := [2]bool{true, false}, [2]bool{false, true}
			if view[1].Size() < view[0].Size() {
				first, second = second, first
			}
			choices = append(choices, first, second)
		}
		for _, c := range choices {
			ls, rs := n.inputs[0].shape, n.inputs[1].shape
			if c[0] {
				ls = view[0]
			}
			if c[1] {
				rs = view[1]
			}
			p, ok := fusedPlan(ls, rs, n.shape)
			if !ok {
				continue
			}
			f := *n
			f.inputs = slices.Clone(n.inputs)
			for i := range f.inputs {
				if c[i] {
					f.inputs[i] = src[i]
				}
			}
			f.data = p
			prog[n.idx] = &f
			break
		}
	}
	return prog
}

// fusedPlan returns the plan of a binary op reading operands of shapes ls and rs into out,
// or false when it would iterate over runs shorter than fuseMinInner.
func fusedPlan(ls, rs, out shapes.Shape) (*bcastPlan, bool) {
	p := newBcastPlan(ls, rs, out)
	if p.kind == bcastGeneral && p.innerLen < fuseMinInner {
		return nil, false
	}
	return p, true
}
