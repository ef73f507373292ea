package cpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Collectives between the replicas of an SPMD program (see devices.go).
//
// Every replica runs the same program in the same order, so the k-th collective node is
// reached by all of them; each deposits its operand at that node's rendezvous and waits. The
// last to arrive computes every replica group's reduction — members summed in group order,
// not arrival order, so every member gets the same bits and runs are deterministic — and
// releases the others. A replica that fails aborts the run, releasing those waiting.

func init() {
	implementedOps = append(implementedOps, backends.OpTypeAllReduce)
	capabilities.Operations[backends.OpTypeAllReduce] = true
	executors[backends.OpTypeAllReduce] = execAllReduce
}

// replica is a program's place in an SPMD execution; the zero value is a lone program.
type replica struct {
	index, count int
	run          *collectiveRun
}

// collectiveRun holds the rendezvous of one SPMD execution.
type collectiveRun struct {
	n       int
	mu      sync.Mutex
	points  map[int]*rendezvous // by node index
	aborted chan struct{}
	once    sync.Once
	cause   error
}

// rendezvous is one collective node's meeting point.
type rendezvous struct {
	inputs  []*Buffer
	arrived int
	outputs []*Buffer
	err     error
	done    chan struct{}
}

var errAborted = errors.New("another replica failed")

func newCollectiveRun(n int) *collectiveRun {
	return &collectiveRun{n: n, points: map[int]*rendezvous{}, aborted: make(chan struct{})}
}

// abort records the first failure and releases every waiting replica.
func (c *collectiveRun) abort(err error) {
	c.once.Do(func() {
		c.cause = err
		close(c.aborted)
	})
}

// failure is the error that aborted the run, if any.
func (c *collectiveRun) failure() error {
	select {
	case <-c.aborted:
		return c.cause
	default:
		return nil
	}
}

// allReduceParams are an AllReduce node's parameters.
type allReduceParams struct {
	op     backends.ReduceOpType
	groups [][]int
}

// AllReduce reduces each operand across the replicas of each group; every member gets the
// group's result. Groups list replica indices (positions in the device assignment); a replica
// in no group keeps its own operand.
func (b *Builder) AllReduce(operands []backends.Op, reductionType backends.ReduceOpType, replicaGroups [][]int) ([]backends.Op, error) {
	nodes, err := b.checkOps("AllReduce", operands...)
	if err != nil {
		return nil, err
	}
	switch reductionType {
	case backends.ReduceOpSum, backends.ReduceOpProduct, backends.ReduceOpMax, backends.ReduceOpMin:
	default:
		return nil, fmt.Errorf("AllReduce: reduction %s is not supported by the cpu backend", reductionType)
	}
	n := b.dist.count()
	seen := make([]bool, n)
	groups := make([][]int, len(replicaGroups))
	for gi, g := range replicaGroups {
		if len(g) == 0 {
			return nil, fmt.Errorf("AllReduce: replica group #%d is empty", gi)
		}
		for _, r := range g {
			if r < 0 || r >= n {
				return nil, fmt.Errorf("AllReduce: replica group %v names replica %d; the computation has %d", g, r, n)
			}
			if seen[r] {
				return nil, fmt.Errorf("AllReduce: replica %d is in more than one group (%v)", r, replicaGroups)
			}
			seen[r] = true
		}
		groups[gi] = append([]int(nil), g...)
	}
	params := &allReduceParams{op: reductionType, groups: groups}
	outs := make([]backends.Op, len(nodes))
	for i, x := range nodes {
		if x.shape.DType == dtypes.Bool {
			return nil, fmt.Errorf("AllReduce: operand #%d: dtype bool cannot be reduced", i)
		}
		outs[i] = b.newNode(backends.OpTypeAllReduce, x.shape, params, x)
	}
	return outs, nil
}

func execAllReduce(r *execution, n *node, in []*Buffer, owned []bool) (*Buffer, error) {
	rep := r.replica
	if rep.run == nil || rep.count == 1 {
		if owned[0] {
			return in[0], nil
		}
		out := r.newBuffer(n.shape)
		copyFlat(out.flat, in[0].flat)
		return out, nil
	}
	c := rep.run
	c.mu.Lock()
	rv := c.points[n.idx]
	if rv == nil {
		rv = &rendezvous{inputs: make([]*Buffer, c.n), done: make(chan struct{})}
		c.points[n.idx] = rv
	}
	rv.inputs[rep.index] = in[0]
	rv.arrived++
	last := rv.arrived == c.n
	c.mu.Unlock()
	if last {
		rv.outputs, rv.err = reduceGroups(r, n, rv.inputs)
		close(rv.done)
	} else {
		select {
		case <-rv.done:
		case <-c.aborted:
			return nil, fmt.Errorf("AllReduce: %w", errAborted)
		}
	}
	if rv.err != nil {
		return nil, rv.err
	}
	return rv.outputs[rep.index], nil
}

// reduceGroups computes every replica's output of an AllReduce from all replicas' inputs.
// r is the execution of the replica that arrived last: the replicas run the same program, so
// its step's outputs escape (execution.newBuffer) exactly when the others' do.
func reduceGroups(r *execution, n *node, inputs []*Buffer) ([]*Buffer, error) {
	p := n.data.(*allReduceParams)
	outs := make([]*Buffer, len(inputs))
	for _, g := range p.groups {
		res := r.newBuffer(n.shape)
		copyFlat(res.flat, inputs[g[0]].flat)
		for _, m := range g[1:] {
			if err := reduceInto(p.op, res.flat, inputs[m].flat); err != nil {
				return nil, err
			}
		}
		outs[g[0]] = res
		for _, m := range g[1:] {
			c := r.newBuffer(n.shape)
			copyFlat(c.flat, res.flat)
			outs[m] = c
		}
	}
	for i, o := range outs {
		if o == nil { // in no group: its own operand
			c := r.newBuffer(n.shape)
			copyFlat(c.flat, inputs[i].flat)
			outs[i] = c
		}
	}
	return outs, nil
}

// reduceInto folds src into dst (same element type and length).
func reduceInto(op backends.ReduceOpType, dst, src any) error {
	switch d := dst.(type) {
	case []float32:
		reduceSlice(op, d, src.([]float32))
	case []float64:
		reduceSlice(op, d, src.([]float64))
	case []int32:
		reduceSlice(op, d, src.([]int32))
	case []int64:
		reduceSlice(op, d, src.([]int64))
	case []uint8:
		reduceSlice(op, d, src.([]uint8))
	default:
		return fmt.Errorf("AllReduce: %T cannot be reduced", dst)
	}
	return nil
}

func reduceSlice[T float32 | float64 | int32 | int64 | uint8](op backends.ReduceOpType, dst, src []T) {
	switch op {
	case backends.ReduceOpSum:
		for i, v := range src {
			dst[i] += v
		}
	case backends.ReduceOpProduct:
		for i, v := range src {
			dst[i] *= v
		}
	case backends.ReduceOpMax:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case backends.ReduceOpMin:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	}
}
