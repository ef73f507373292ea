package cpu

import (
	"slices"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Elementwise chains. A run of float32 elementwise ops where each result is read only by the
// next op (SwiGLU's logistic → product → product, AdamW's update arithmetic) would stream every
// intermediate array through memory. Compile turns such a run into one step that computes it
// block by block: each block of the result stays in cache while every op of the chain runs
// on it. Each element still goes through the same ops in the same order, with the same
// kernels: the bits are those of the op-by-op program.

// chainMinSize is the smallest output a chain is built for: below it the arrays sit in cache
// anyway.
const chainMinSize = 1 << 14

// chainBlock is the block length: three float32 blocks (the value and two operands) fit in a
// core's L1/L2 with room to spare, and one C call per op per block costs little next to it.
const chainBlock = 4096

// chainOp is one op of a chain: a unary op of the chain's value, or a binary op whose operands
// are the chain's value (src -1) or step inputs (src ≥ 0), full-size or scalar as plan says.
type chainOp struct {
	op   backends.OpType
	plan *bcastPlan // binary ops only
	src  [2]int
}

// chainPlan is the data of a chain's step node.
type chainPlan struct {
	ops []chainOp
	// row is the row length of the chain's broadcasting ops (1 without any): blocks are whole
	// rows.
	row int
	// head lists, per step input, whether only the chain's first op reads it: the output may
	// then be written into it (an input a later op reads would be overwritten, block by block,
	// before that op reads it).
	head []bool
}

// chainable reports whether n can be an op of a chain: float32 elementwise with full-size or
// scalar operands.
func chainable(n *node) bool {
	if n.shape.DType != dtypes.Float32 || n.shape.Size() < chainMinSize || len(n.inputs) == 0 {
		return false
	}
	for _, in := range n.inputs {
		if in.shape.DType != n.shape.DType {
			return false
		}
	}
	if slices.Contains(unaryOps, n.op) {
		return true
	}
	if slices.Contains(binaryOps, n.op) {
		_, ok := n.data.(*bcastPlan)
		return ok
	}
	return false
}

// rowLen is the row length a chain op iterates by: a broadcasting (bcastGeneral) op's inner
// run, 0 for the others, which run over any range.
func rowLen(n *node) int {
	if p, ok := n.data.(*bcastPlan); ok && p.kind == bcastGeneral {
		return p.innerLen
	}
	return 0
}

// chainElementwise returns the program's nodes with each chain replaced by one node at the
// chain's last op, reading the chain's outside operands; needed marks the nodes the outputs
// depend on.
func chainElementwise(nodes []*node, needed []bool, outputs []*node) []*node {
	readers := make([]int, len(nodes))
	for _, n := range nodes {
		if needed[n.idx] {
			for _, in := range n.inputs {
				readers[in.idx]++
			}
		}
	}
	for _, o := range outputs {
		readers[o.idx] += 2 // the caller reads an output: never inside a chain
	}
	prog, cloned := nodes, false
	absorbed := make([]bool, len(nodes))
	// From the program's end backwards, so that each chain is found from its last op.
	for i := len(nodes) - 1; i >= 0; i-- {
		last := nodes[i]
		if !needed[i] || absorbed[i] || !chainable(last) {
			continue
		}
		// Walk back while the chain's value comes from a chainable op of the same size that
		// only the current op reads (once); of two such operands, the first.
		// The chain runs by blocks of whole rows: its broadcasting ops must share their row
		// length.
		chain, row := []*node{last}, rowLen(last)
		for cur := last; ; {
			var prev *node
			for _, in := range cur.inputs {
				// The program's version of the node: inputs point at the builder's nodes,
				// which broadcast fusion may have rewritten.
				in = nodes[in.idx]
				if readers[in.idx] == 1 && !absorbed[in.idx] && chainable(in) && in.shape.Size() == cur.shape.Size() {
					if r := rowLen(in); r == 0 || row == 0 || r == row {
						prev = in
						row = max(row, r)
					}
					break
				}
			}
			if prev == nil {
				break
			}
			chain = append(chain, prev)
			absorbed[prev.idx] = true
			cur = prev
		}
		if len(chain) < 2 {
			continue
		}
		if !cloned {
			prog, cloned = slices.Clone(nodes), true
		}
		prog[i] = buildChain(chain)
	}
	return prog
}

// buildChain makes the step node of chain (its ops last first).
func buildChain(chain []*node) *node {
	last := chain[0]
	c := *last
	c.inputs = nil
	plan := &chainPlan{}
	slot := map[*node]int{}
	for i := len(chain) - 1; i >= 0; i-- {
		n := chain[i]
		op := chainOp{op: n.op, src: [2]int{-1, -1}}
		if p, ok := n.data.(*bcastPlan); ok {
			op.plan = p
		}
		for j, in := range n.inputs {
			if i < len(chain)-1 && in.idx == chain[i+1].idx {
				continue // the chain's value
			}
			s, ok := slot[in]
			if !ok {
				s = len(c.inputs)
				slot[in] = s
				c.inputs = append(c.inputs, in)
				plan.head = append(plan.head, i == len(chain)-1)
			} else if i != len(chain)-1 {
				plan.head[s] = false
			}
			op.src[j] = s
		}
		plan.ops = append(plan.ops, op)
	}
	plan.row = 1
	for _, n := range chain {
		plan.row = max(plan.row, rowLen(n))
	}
	c.data = plan
	return &c
}

// execChain runs a chain's ops block by block.
func execChain(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	plan := n.data.(*chainPlan)
	size := n.shape.Size()
	flats := make([][]float32, len(in))
	for i, b := range in {
		flats[i] = b.flat.([]float32)
	}
	var out *Buffer
	for i, b := range in {
		if owned[i] && plan.head[i] && b.shape.Size() == size && !sharedWithLaterOps(plan, flats, i) {
			out = b
			break
		}
	}
	if out == nil {
		out = r.pool.newBuffer(n.shape)
	}
	o := out.flat.([]float32)
	row := plan.row
	blockRows := max(1, chainBlock/row)
	parallelFor(size/row, size, func(lo, hi int) {
		for r := lo; r < hi; r += blockRows {
			re := min(r+blockRows, hi)
			for k := range plan.ops {
				runChainOp(&plan.ops[k], o, flats, r, re, row)
			}
		}
	})
	return out, nil
}

// sharedWithLaterOps reports whether input i's storage is also an input that an op after the
// first reads (the same array under another node, e.g. a Reshape).
func sharedWithLaterOps(plan *chainPlan, flats [][]float32, i int) bool {
	for j, f := range flats {
		if j != i && !plan.head[j] && len(f) > 0 && unsafe.SliceData(f) == unsafe.SliceData(flats[i]) {
			return true
		}
	}
	return false
}

// runChainOp computes one op of a chain over rows [rlo, rhi) (of row elements) into o, the
// chain's output, which holds the chain's value.
func runChainOp(c *chainOp, o []float32, flats [][]float32, rlo, rhi, row int) {
	if c.plan != nil && c.plan.kind == bcastGeneral {
		// Whole arrays, indexed by the plan; the chain's value is o itself.
		a, b := o, o
		if c.src[0] >= 0 {
			a = flats[c.src[0]]
		}
		if c.src[1] >= 0 {
			b = flats[c.src[1]]
		}
		binaryFloat32Rows(c.op, c.plan, o, a, b, rlo, rhi)
		return
	}
	lo, hi := rlo*row, rhi*row
	v := o[lo:hi]
	operand := func(j int) []float32 {
		if c.src[j] < 0 {
			return v
		}
		return flats[c.src[j]][lo:hi]
	}
	if c.plan == nil {
		x := operand(0)
		if !vecUnary(c.op, v, x) && !unaryFloat32Fast(c.op, v, x) {
			unaryFloat(c.op, v, x)
		}
		return
	}
	switch c.plan.kind {
	case bcastSame:
		a, b := operand(0), operand(1)
		if !vecBinVV(c.op, v, a, b) {
			binVV(c.op, v, a, b)
		}
	case bcastRhsScalar:
		a, s := operand(0), flats[c.src[1]][0]
		if !vecBinVS(c.op, v, a, s) {
			binVS(c.op, v, a, s)
		}
	case bcastLhsScalar:
		s, b := flats[c.src[0]][0], operand(1)
		if !vecBinSV(c.op, v, s, b) {
			binSV(c.op, v, s, b)
		}
	}
}
