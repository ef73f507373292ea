package cpu

import (
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// execFn computes a node's output from its inputs. owned[i] says that in[i]'s storage dies at
// this node and belongs to the execution: the function may write its output into it and
// return in[i] itself (with the output's shape), which hands the storage over.
type execFn func(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error)

// step is one node of the compiled program.
type step struct {
	n      *node
	fn     execFn
	inputs []int // node indices
	// release lists the storage roots whose last use is this step.
	release []int
	// paired: this step and the next run at the same time (pair.go).
	paired bool
	// escapes: the step's output storage is returned to the caller (an output's root), so it
	// must be a Go slice (execution.newBuffer).
	escapes bool
}

// Executable is a compiled graph: a topologically ordered program with, for every
// intermediate buffer, the step after which it is dead. It is safe for concurrent use.
type Executable struct {
	backend *Backend
	name    string
	numIdx  int
	params  []*node
	outputs []*node
	steps   []step
	// root[i] is the node whose storage node i's output uses: itself, or for Reshape and
	// Identity (which never copy) the root of their operand.
	root []int
	// lastUse[root] is the step index of the storage's last reader (-1: none).
	lastUse []int
	// pinned roots are never recycled nor written in place: constants and storage that an
	// output returns. Parameters are pinned unless donated (decided per execution).
	pinned  []bool
	isParam []int // root -> parameter position, or -1
	// consts are the constants the program reads, with their (read-only, shared) buffers.
	consts    []*node
	isConst   []bool
	constBufs []*Buffer
	dist      distribution // replicas and devices (devices.go)
}

var _ backends.Executable = (*Executable)(nil)

// Compile turns the graph built so far into an Executable computing outputs.
func (b *Builder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	if len(shardings) != 0 && b.dist.replicas <= 1 {
		return nil, fmt.Errorf("cpu backend Compile: sharding is not supported")
	}
	outNodes, err := b.checkOps("Compile", outputs...)
	if err != nil {
		return nil, err
	}
	b.compiled = true
	e := &Executable{backend: b.backend, name: b.name, numIdx: len(b.nodes), params: b.params, outputs: outNodes, dist: b.dist}

	// The program's nodes, in the builder's order (already topological): the builder's own,
	// with binary ops rewritten to read broadcasts' operands directly (fuse.go).
	nodes := b.nodes
	needed := markNeeded(nodes, outNodes)
	if !b.backend.noFuse {
		// Fusion changes which nodes read which: broadcasts all of whose readers were fused
		// are needed no more.
		nodes = fuseBroadcasts(nodes, needed)
		needed = markNeeded(nodes, outNodes)
		// Likewise the conversions around bfloat16 products (bf16.go).
		nodes = fuseBF16Dots(nodes, needed, outNodes)
		needed = markNeeded(nodes, outNodes)
		// Likewise the products summed into an accumulator in place (dotacc.go).
		nodes = fuseDotAccumulate(nodes, needed, outNodes)
		needed = markNeeded(nodes, outNodes)
		// Likewise, the ops inside elementwise chains (chain.go) are read by no step.
		nodes = chainElementwise(nodes, needed, outNodes)
		needed = markNeeded(nodes, outNodes)
	}
	e.root = make([]int, len(b.nodes))
	e.lastUse = make([]int, len(b.nodes))
	e.pinned = make([]bool, len(b.nodes))
	e.isParam = make([]int, len(b.nodes))
	e.isConst = make([]bool, len(b.nodes))
	for i := range e.isParam {
		e.isParam[i] = -1
		e.lastUse[i] = -1
	}
	for i, p := range b.params {
		e.isParam[p.idx] = i
	}
	for _, n := range nodes {
		if !needed[n.idx] {
			continue
		}
		e.root[n.idx] = n.idx
		switch n.op {
		case backends.OpTypeParameter, backends.OpTypeConstant:
			if n.op == backends.OpTypeConstant {
				e.pinned[n.idx] = true
				e.isConst[n.idx] = true
				e.consts = append(e.consts, n)
				e.constBufs = append(e.constBufs, &Buffer{shape: n.shape, flat: n.data, valid: true})
			}
			continue // no step: their buffers are set before the program runs
		case backends.OpTypeReshape, backends.OpTypeIdentity:
			e.root[n.idx] = e.root[n.inputs[0].idx]
		}
		fn, ok := executors[n.op]
		switch n.data.(type) {
		case *chainPlan:
			fn = execChain
		case *dotAcc:
			fn = execDotAcc
		}
		if !ok {
			return nil, fmt.Errorf("cpu backend Compile: %w", errNotImplemented(n.op))
		}
		if needsUpcast(n) {
			fn = upcastBF16(fn)
		}
		s := step{n: n, fn: fn, inputs: make([]int, len(n.inputs))}
		for i, in := range n.inputs {
			s.inputs[i] = in.idx
		}
		e.steps = append(e.steps, s)
	}
	// Pairing reorders the steps: after the fusion passes, which decide what the steps are, and
	// before the last uses, which follow from their order.
	if b.backend.pairing.enabled() {
		pairProducts(e.steps, pooledFLOPs)
	}
	for si, s := range e.steps {
		for _, in := range s.inputs {
			e.lastUse[e.root[in]] = si
		}
	}
	for _, o := range outNodes {
		e.pinned[e.root[o.idx]] = true
	}
	for si := range e.steps {
		e.steps[si].escapes = e.pinned[e.steps[si].n.idx]
	}
	for r, last := range e.lastUse {
		if last >= 0 && !e.pinned[r] {
			e.steps[last].release = append(e.steps[last].release, r)
		}
	}
	return e, nil
}

// markNeeded marks the nodes the outputs depend on; nodes[i].idx == i.
func markNeeded(nodes, outputs []*node) []bool {
	needed := make([]bool, len(nodes))
	var mark func(i int)
	mark = func(i int) {
		if needed[i] {
			return
		}
		needed[i] = true
		for _, in := range nodes[i].inputs {
			mark(in.idx)
		}
	}
	for _, o := range outputs {
		mark(o.idx)
	}
	return needed
}

// Finalize releases nothing: the program holds no buffers between executions.
func (e *Executable) Finalize() {}

// Inputs returns the parameters' names and shapes.
func (e *Executable) Inputs() (names []string, inputShapes []shapes.Shape) {
	for _, p := range e.params {
		names = append(names, p.data.(string))
		inputShapes = append(inputShapes, p.shape)
	}
	return
}

// Outputs returns the outputs' shapes.
func (e *Executable) Outputs() []shapes.Shape {
	out := make([]shapes.Shape, len(e.outputs))
	for i, o := range e.outputs {
		out[i] = o.shape
	}
	return out
}

// execution is the state of one Execute call.
type execution struct {
	pool    *bufferPool
	replica replica // this program's place among SPMD replicas (collective.go)
	// oneThread: the step runs beside another (pair.go), so its products keep to one thread.
	oneThread bool
	// escapes: the running step's output is returned to the caller (step.escapes).
	escapes bool
}

// newBuffer returns an uninitialised buffer for the running step's output: a Go slice if the
// caller will receive it, which may keep its slice as long as it likes; otherwise pooled
// storage that the execution releases at its last use, a mapping if it is large (hostmem.go).
func (r *execution) newBuffer(shape shapes.Shape) *Buffer {
	if r.escapes {
		return r.pool.newHeapBuffer(shape)
	}
	return r.pool.newBuffer(shape)
}

// execute runs the program once, as replica rep, on inputs; donated inputs become invalid and
// their storage may be reused. Execute (devices.go) calls it once per device.
func (e *Executable) execute(inputs []backends.Buffer, donate []bool, rep replica) (outs []backends.Buffer, err error) {
	if len(inputs) != len(e.params) {
		return nil, fmt.Errorf("cpu backend Execute %q: %d inputs given, %d expected", e.name, len(inputs), len(e.params))
	}
	vals := make([]*Buffer, e.numIdx)
	donated := make([]bool, len(inputs))
	for i, in := range inputs {
		buf, err := e.backend.checkBuffer(in)
		if err != nil {
			return nil, fmt.Errorf("cpu backend Execute %q: input #%d: %w", e.name, i, err)
		}
		if !buf.shape.Equal(e.params[i].shape) {
			return nil, fmt.Errorf("cpu backend Execute %q: input #%d (%s) has shape %s, expected %s",
				e.name, i, e.params[i].data, buf.shape, e.params[i].shape)
		}
		vals[e.params[i].idx] = buf
		donated[i] = i < len(donate) && donate[i] && !buf.shared.Load()
	}
	for i, c := range e.consts {
		vals[c.idx] = e.constBufs[i]
	}
	r := &execution{pool: &e.backend.pool, replica: rep}
	defer func() {
		// Kernels panic on conditions Go checks (integer division by zero, bad indices):
		// report them as errors of this execution.
		if p := recover(); p != nil {
			outs, err = nil, fmt.Errorf("cpu backend Execute %q: panic: %v\n%s", e.name, p, debug.Stack())
		}
	}()
	// reusable says whether storage root may be recycled or overwritten by this execution.
	reusable := func(root int) bool {
		if e.pinned[root] {
			return false
		}
		if pi := e.isParam[root]; pi >= 0 {
			return donated[pi]
		}
		return true
	}
	var inBufs []*Buffer
	var owned []bool
	taken := make([]bool, e.numIdx)
	release := func(s *step) {
		for _, root := range s.release {
			if !taken[root] && reusable(root) {
				r.pool.putBuffer(vals[root])
				taken[root] = true
			}
		}
	}
	stats := newOpStats(r.pool) // nil unless STX_CPU_OPSTATS is set (opstats.go)
	defer stats.report(os.Stderr, e.name, len(e.steps))
	var t0 time.Time
	for si := 0; si < len(e.steps); si++ {
		s := &e.steps[si]
		n := s.n
		if stats != nil {
			t0 = stats.begin()
		}
		if s.paired {
			pairOuts, errs := e.runPair(r, vals, si)
			stats.add(n, time.Since(t0)) // the pair's time, under its first product
			for k := range 2 {
				pn := e.steps[si+k].n
				if errs[k] != nil {
					return nil, fmt.Errorf("cpu backend Execute %q: %s: %w", e.name, pn.op, errs[k])
				}
				pairOuts[k].shape = pn.shape
				vals[pn.idx] = pairOuts[k]
			}
			// Only now that both are done may what either read last be recycled.
			release(s)
			release(&e.steps[si+1])
			si++
			continue
		}
		inBufs = inBufs[:0]
		owned = owned[:0]
		for _, idx := range s.inputs {
			inBufs = append(inBufs, vals[idx])
			root := e.root[idx]
			own := e.lastUse[root] == si && reusable(root) && !taken[root]
			// Storage the caller receives must be a Go slice: not a mapping written in place.
			own = own && !(s.escapes && vals[idx].mem != nil)
			owned = append(owned, own)
		}
		r.escapes = s.escapes
		switch n.op {
		case backends.OpTypeReshape, backends.OpTypeIdentity:
			// An alias of the operand's storage, with the node's shape.
			vals[n.idx] = &Buffer{shape: n.shape, flat: inBufs[0].flat, mem: inBufs[0].mem, valid: true}
		default:
			out, err := s.fn(r, n, inBufs, owned)
			if stats != nil {
				stats.add(n, time.Since(t0))
			}
			if err != nil {
				return nil, fmt.Errorf("cpu backend Execute %q: %s: %w", e.name, n.op, err)
			}
			for i, b := range inBufs {
				if b == out && owned[i] {
					taken[e.root[s.inputs[i]]] = true
				}
			}
			out.shape = n.shape
			vals[n.idx] = out
		}
		release(s)
	}
	// Hand the outputs over; storage the caller still owns (non-donated parameters, constants)
	// or that an earlier output already returned is copied.
	outs = make([]backends.Buffer, len(e.outputs))
	returned := make(map[int]bool, len(e.outputs))
	for i, o := range e.outputs {
		buf := vals[o.idx]
		root := e.root[o.idx]
		own := !returned[root] && e.isParam[root] < 0 && !e.isConst[root]
		if pi := e.isParam[root]; pi >= 0 && donated[pi] && !returned[root] {
			own = true
		}
		returned[root] = true
		// Steps whose output escapes allocate Go slices (execution.newBuffer); a mapping here
		// would be a kernel's bug, and the caller may keep the slice past the buffer: copy it
		// (the mapping is reclaimed with its last buffer).
		if own && buf.mem == nil {
			outs[i] = &Buffer{shape: o.shape, flat: buf.flat, valid: true}
			continue
		}
		c := r.pool.newHeapBuffer(o.shape)
		copyFlat(c.flat, buf.flat)
		outs[i] = c
	}
	// Donated inputs are invalid from now on. The storage of those the program neither read to
	// the end nor returned goes back to the pool now rather than to the collector.
	for i, in := range inputs {
		if !donated[i] {
			continue
		}
		b := in.(*Buffer)
		if root := e.params[i].idx; b.flat != nil && !taken[root] && !returned[root] && e.lastUse[root] < 0 {
			r.pool.putBuffer(b)
		}
		b.valid, b.flat, b.mem = false, nil, nil
	}
	return outs, nil
}
