package cpu

import (
	"slices"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Elementwise chains. Float32 elementwise ops whose results are read only by the next op
// (SwiGLU's logistic → product → product, RMSNorm's x·r·w, RoPE's x·cos + rot·sin) would stream
// every intermediate array through memory. Compile turns each such group (a tree: an op may
// take two such operands) into one step that computes it block by block: each block of every
// intermediate stays in cache while the group's ops run on it. Each element still goes through
// the same ops in the same order, with the same kernels: the bits are those of the op-by-op
// program.

// chainMinSize is the smallest output a chain is built for: below it the arrays sit in cache
// anyway.
const chainMinSize = 1 << 14

// chainBlock is the block length: three float32 blocks (the value and two operands) fit in a
// core's L1/L2 with room to spare, and one C call per op per block costs little next to it.
const chainBlock = 4096

// chainOp is one op of a chain: a unary or binary op whose operands are step inputs (src ≥ 0:
// full-size, scalar or broadcast as plan says) or results of earlier ops of the chain (src
// -1-k: op k's), and whose result goes to the chain's output (dst -1) or scratch array dst.
type chainOp struct {
	op   backends.OpType
	plan *bcastPlan // binary ops only
	src  [2]int
	dst  int
}

// chainPlan is the data of a chain's step node.
type chainPlan struct {
	ops []chainOp
	// scratch is the number of full-size scratch arrays the chain's branches need.
	scratch int
	// row is the row length of the chain's broadcasting ops (1 without any): blocks are whole
	// rows.
	row int
	// head lists, per step input, whether the output may be written into it: no op reads it
	// after the first op that writes the output (a later one would read it overwritten, block
	// by block).
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

// countReaders returns, for each node, how many needed nodes read its result, with 2 more for
// a program output (the caller reads it too), so that a result read once, by one step, is one
// a rewrite may fuse into that step.
func countReaders(nodes []*node, needed []bool, outputs []*node) []int {
	readers := make([]int, len(nodes))
	for _, n := range nodes {
		if needed[n.idx] {
			for _, in := range n.inputs {
				readers[in.idx]++
			}
		}
	}
	for _, o := range outputs {
		readers[o.idx] += 2
	}
	return readers
}

// chainElementwise returns the program's nodes with each chain replaced by one node at the
// chain's last op, reading the chain's outside operands; needed marks the nodes the outputs
// depend on.
func chainElementwise(nodes []*node, needed []bool, outputs []*node) []*node {
	readers := countReaders(nodes, needed, outputs)
	// lastReader[i] is the last node (builder index) reading node i's result.
	lastReader := make([]int, len(nodes))
	for _, n := range nodes {
		if needed[n.idx] {
			for _, in := range n.inputs {
				lastReader[in.idx] = max(lastReader[in.idx], n.idx)
			}
		}
	}
	prog, cloned := nodes, false
	absorbed := make([]bool, len(nodes))
	// From the program's end backwards, so that each chain is found from its last op.
	for i := len(nodes) - 1; i >= 0; i-- {
		last := nodes[i]
		if !needed[i] || absorbed[i] || !chainable(last) {
			continue
		}
		// Take in, transitively, every operand that is a chainable op of the same size read
		// only by its one reader (once). The chain runs by blocks of whole rows: its
		// broadcasting ops must share their row length.
		members, row := []*node{last}, rowLen(last)
		dying := dyingOperands(nodes, needed, readers, lastReader, last, last.shape.Size())
		for k := 0; k < len(members); k++ {
			for _, in := range members[k].inputs {
				// The program's version of the node: inputs point at the builder's nodes,
				// which broadcast fusion may have rewritten.
				in = nodes[in.idx]
				if readers[in.idx] != 1 || absorbed[in.idx] || !chainable(in) || in.shape.Size() != last.shape.Size() {
					continue
				}
				// The operands that die in the ops taken in live until the chain runs; the
				// unfused program holds one array of the chain's partial results instead.
				d := dyingOperands(nodes, needed, readers, lastReader, in, last.shape.Size())
				if d > 0 && dying+d > last.shape.Size() &&
					allocatesBetween(nodes, needed, in.idx, last.idx, d) {
					continue
				}
				if r := rowLen(in); r != 0 && row != 0 && r != row {
					continue
				}
				dying += d
				row = max(row, rowLen(in))
				absorbed[in.idx] = true
				members = append(members, in)
			}
		}
		if len(members) < 2 {
			continue
		}
		if !cloned {
			prog, cloned = slices.Clone(nodes), true
		}
		// Builder order is topological: the ops run in it.
		slices.SortFunc(members, func(a, b *node) int { return a.idx - b.idx })
		prog[i] = buildChain(members)
	}
	return prog
}

// dyingOperands returns the elements of n's operands that n reads last and that would stay
// outside a chain of size elements taking n in (not chainable ops of its size read by n alone),
// parameters and constants aside, which live through the program anyway.
//
// A chain runs at its last op, so such operands live until then. The unfused program holds one
// array of the chain's partial results at a time instead; the chain then holds more only where
// more than one array's worth of operands dies in it, and costs memory only where the steps in
// between allocate (allocatesBetween). Fused, the sum of a chunked head's weight gradients,
// built as acc + g₁ + g₂ + … between the chunks, kept every chunk's gradient until the last
// (eight of 544 MiB at Qwen2.5-0.5B's vocabulary), where unfused each is added and freed at
// once. Ops that follow one another, as SwiGLU's and RMSNorm's do, are still chained.
func dyingOperands(nodes []*node, needed []bool, readers, lastReader []int, n *node, size int) int {
	d := 0
	for _, x := range n.inputs {
		x = nodes[x.idx]
		if lastReader[x.idx] != n.idx || x.op == backends.OpTypeParameter || x.op == backends.OpTypeConstant ||
			x.shape.Size() < chainMinSize {
			continue
		}
		if readers[x.idx] == 1 && chainable(x) && x.shape.Size() == size {
			continue // taken into the chain itself
		}
		d += x.shape.Size()
	}
	return d
}

// allocatesBetween reports whether the program's steps strictly between nodes from and to
// (builder indices) produce at least size elements.
func allocatesBetween(nodes []*node, needed []bool, from, to, size int) bool {
	total := 0
	for j := from + 1; j < to; j++ {
		n := nodes[j]
		if !needed[j] || n.op == backends.OpTypeParameter || n.op == backends.OpTypeConstant ||
			n.op == backends.OpTypeReshape || n.op == backends.OpTypeIdentity {
			continue
		}
		if total += n.shape.Size(); total >= size {
			return true
		}
	}
	return false
}

// buildChain makes the step node of a chain from its ops in program order (the last one is
// the chain's result).
func buildChain(ops []*node) *node {
	last := ops[len(ops)-1]
	c := *last
	c.inputs = nil
	plan := &chainPlan{row: 1}
	pos := make(map[int]int, len(ops)) // node idx -> op position
	for k, n := range ops {
		pos[n.idx] = k
		plan.row = max(plan.row, rowLen(n))
	}
	// reader[k] is the position of the op that reads op k's result.
	reader := make([]int, len(ops))
	slot := map[int]int{}     // node idx -> step input
	lastRead := map[int]int{} // step input -> last op reading it
	for k, n := range ops {
		op := chainOp{op: n.op, src: [2]int{-1, -1}}
		if p, ok := n.data.(*bcastPlan); ok {
			op.plan = p
		}
		for j, in := range n.inputs {
			if m, ok := pos[in.idx]; ok {
				op.src[j] = -1 - m
				reader[m] = k
				continue
			}
			s, ok := slot[in.idx]
			if !ok {
				s = len(c.inputs)
				slot[in.idx] = s
				c.inputs = append(c.inputs, in)
			}
			op.src[j] = s
			lastRead[s] = k
		}
		plan.ops = append(plan.ops, op)
	}
	// Destinations, from the result backwards: an op read by the next one writes where that
	// one writes (the next op then runs in place), any other one into scratch of its own.
	plan.ops[len(ops)-1].dst = -1
	for k := len(ops) - 2; k >= 0; k-- {
		if reader[k] == k+1 {
			plan.ops[k].dst = plan.ops[k+1].dst
		} else {
			plan.ops[k].dst = plan.scratch
			plan.scratch++
		}
	}
	firstOut := len(ops) - 1
	for k := range plan.ops {
		if plan.ops[k].dst == -1 {
			firstOut = k
			break
		}
	}
	plan.head = make([]bool, len(c.inputs))
	for s := range plan.head {
		plan.head[s] = lastRead[s] <= firstOut
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
		out = r.newBuffer(n.shape)
	}
	o := out.flat.([]float32)
	scratch := make([][]float32, plan.scratch)
	for i := range scratch {
		scratch[i] = r.pool.get(n.shape.DType, size).([]float32)
	}
	dst := func(k int) []float32 {
		if d := plan.ops[k].dst; d >= 0 {
			return scratch[d]
		}
		return o
	}
	operand := func(src int) []float32 {
		if src >= 0 {
			return flats[src]
		}
		return dst(-1 - src)
	}
	row := plan.row
	blockRows := max(1, chainBlock/row)
	parallelFor(size/row, size, func(lo, hi int) {
		for r := lo; r < hi; r += blockRows {
			re := min(r+blockRows, hi)
			for k := range plan.ops {
				c := &plan.ops[k]
				var a, b []float32
				a = operand(c.src[0])
				if c.plan != nil {
					b = operand(c.src[1])
				}
				runChainOp(c, dst(k), a, b, r, re, row)
			}
		}
	})
	for _, s := range scratch {
		r.pool.put(n.shape.DType, s)
	}
	return out, nil
}

// sharedWithLaterOps reports whether input i's storage is also an input that may not hold the
// output (the same array under another node, e.g. a Reshape).
func sharedWithLaterOps(plan *chainPlan, flats [][]float32, i int) bool {
	for j, f := range flats {
		if j != i && !plan.head[j] && len(f) > 0 && unsafe.SliceData(f) == unsafe.SliceData(flats[i]) {
			return true
		}
	}
	return false
}

// runChainOp computes one op of a chain over rows [rlo, rhi) (of row elements) into d; a and
// b are its operands' whole arrays (b nil for a unary op).
func runChainOp(c *chainOp, d, a, b []float32, rlo, rhi, row int) {
	if c.plan != nil && c.plan.kind == bcastGeneral {
		// Whole arrays, indexed by the plan: the chain's broadcasting ops share its row length.
		binaryFloat32Rows(c.op, c.plan, d, a, b, rlo, rhi)
		return
	}
	lo, hi := rlo*row, rhi*row
	v := d[lo:hi]
	if c.plan == nil {
		x := a[lo:hi]
		if !vecUnary(c.op, v, x) && !unaryFloat32Fast(c.op, v, x) {
			unaryFloat(c.op, v, x)
		}
		return
	}
	switch c.plan.kind {
	case bcastSame:
		x, y := a[lo:hi], b[lo:hi]
		if !vecBinVV(c.op, v, x, y) {
			binVV(c.op, v, x, y)
		}
	case bcastRhsScalar:
		x, s := a[lo:hi], b[0]
		if !vecBinVS(c.op, v, x, s) {
			binVS(c.op, v, x, s)
		}
	case bcastLhsScalar:
		s, y := a[0], b[lo:hi]
		if !vecBinSV(c.op, v, s, y) {
			binSV(c.op, v, s, y)
		}
	}
}
