package runtime

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Sharded data-parallel training (FSDP / ZeRO-3 style).
//
// With SetFSDP a trainer on N devices keeps every trainable parameter, its AdamW moments and
// its gradient accumulator as flat vectors padded to a multiple of N and split in N equal
// shards along the mesh axis (GoMLX sharded variables: each device holds one shard). A step
// gathers the full parameters for the forward and backward passes, reduces the gradients and
// keeps each device's shard of them, and updates only that shard.
//
// GoMLX v0.26 gives SPMD programs one collective, AllReduce (its AllGather and ReduceScatter
// are commented out of the backend interface; AutoSharding needs Shardy, which neither stx's
// cpu backend nor its xla path runs). So:
//   - all-gather is an AllReduce (sum) of an N×shard buffer that is zero except for the row of
//     the device's own shard;
//   - reduce-scatter is an AllReduce (sum) of the padded flat gradient, of which each device
//     keeps its row.
//
// Both are exact (x + 0 + … + 0 = x). A ring all-reduce moves about twice the bytes of the
// all-gather or reduce-scatter it stands for, and the full gradient exists transiently on
// every device. A device knows its row from a sharded constant: the N×N identity split along
// its rows, so device d holds the one-hot row d (no device-index op or per-device input).
//
// The model's own variables stay the full weights that everything else reads (the role's
// forward passes, the sampler, update_weights, checkpoints): after each step the shards are
// gathered on the host into them, and a model variable set from outside (a checkpoint
// loaded, a weight sync) is re-sharded at the next step.

// fsdpState is a trainer's sharded state: one entry per trainable variable.
type fsdpState struct {
	n      int
	spec   *distributed.ShardingSpec // a flat vector split along DataAxis
	onehot *context.Variable         // N×N identity, sharded: device d holds row d
	shard  []int                     // elements per device of each parameter (padded)
	param  []*context.Variable       // flat padded copies of the trainable variables, sharded
	synced []*tensors.Tensor         // the model variable's value the shards hold
}

// SetFSDP places the trainer on devices (at least two) of backend with sharded parameters and
// optimizer state (see above). It must be called before the first step.
func (t *Trainer) SetFSDP(backend backends.Backend, devices []int) error {
	if len(devices) < 2 {
		return fmt.Errorf("trainer placement %v: fsdp shards along at least 2 devices", devices)
	}
	if err := t.SetDevices(backend, devices); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(devices)
	spec, err := distributed.BuildSpec(t.dp.mesh).S(DataAxis).Done()
	if err != nil {
		return fmt.Errorf("trainer fsdp: %w", err)
	}
	st := &fsdpState{n: n, spec: spec}
	eye := make([]float32, n*n)
	for d := range n {
		eye[d*n+d] = 1
	}
	ctx := t.m.Context().InAbsPath(optimizerScope + "/fsdp").Checked(false)
	st.onehot = ctx.VariableWithValue("device_onehot", tensors.FromFlatDataAndDimensions(eye, n, n))
	st.onehot.SetTrainable(false)
	// A spec must name every axis of the tensor: rows split, columns whole.
	rows, err := distributed.BuildSpec(t.dp.mesh).S(DataAxis).R().Done()
	if err == nil {
		err = st.onehot.SetShardingSpec(rows)
	}
	if err != nil {
		return fmt.Errorf("trainer fsdp: %w", err)
	}
	for i, v := range t.trainVar {
		k := (v.Shape().Size() + n - 1) / n
		st.shard = append(st.shard, k)
		p := t.m.Context().InAbsPath(optimizerScope+"/fsdp/param"+v.Scope()).Checked(false).
			VariableWithValue(v.Name(), tensors.FromShape(shapes.Make(v.DType(), n*k)))
		p.SetTrainable(false)
		st.param = append(st.param, p)
		st.synced = append(st.synced, nil)
		for _, s := range []*context.Variable{t.mVar[i], t.vVar[i]} {
			if err := st.shardInPlace(s, k); err != nil {
				return fmt.Errorf("trainer fsdp: %w", err)
			}
		}
		if err := p.SetShardingSpec(spec); err != nil {
			return fmt.Errorf("trainer fsdp: %w", err)
		}
	}
	t.dp.fsdp = st
	return t.loadShards()
}

// Sharding returns "fsdp" for a sharded trainer, else "replicate".
func (t *Trainer) Sharding() string {
	if t.dp != nil && t.dp.fsdp != nil {
		return "fsdp"
	}
	return "replicate"
}

// shardInPlace turns a full-shaped state variable into its padded flat form of n·k elements,
// split along the mesh.
func (st *fsdpState) shardInPlace(v *context.Variable, k int) error {
	val, err := v.Value()
	if err != nil {
		return fmt.Errorf("%s: %w", v.ScopeAndName(), err)
	}
	flat, err := padFlat(val, st.n*k)
	if err != nil {
		return fmt.Errorf("%s: %w", v.ScopeAndName(), err)
	}
	if err := v.SetValue(flat); err != nil {
		return fmt.Errorf("%s: %w", v.ScopeAndName(), err)
	}
	return v.SetShardingSpec(st.spec)
}

// padFlat returns t's elements in a new flat tensor of size elements, zero beyond t's.
func padFlat(t *tensors.Tensor, size int) (*tensors.Tensor, error) {
	out := tensors.FromShape(shapes.Make(t.DType(), size))
	var inner error
	err := t.ConstBytes(func(src []byte) {
		inner = out.MutableBytes(func(dst []byte) { copy(dst, src) })
	})
	return out, firstErr(err, inner)
}

// loadShards re-shards every model variable whose value changed since the shards last matched
// it (the first time, a loaded checkpoint, a weight sync).
func (t *Trainer) loadShards() error {
	st := t.dp.fsdpOrNil()
	if st == nil {
		return nil
	}
	for i, v := range t.trainVar {
		cur, err := v.Value()
		if err != nil {
			return fmt.Errorf("fsdp: %s: %w", t.paramName(i), err)
		}
		if cur == st.synced[i] {
			continue
		}
		flat, err := padFlat(cur, st.n*st.shard[i])
		if err == nil {
			err = st.param[i].SetValue(flat)
		}
		if err != nil {
			return fmt.Errorf("fsdp: sharding %s: %w", t.paramName(i), err)
		}
		st.synced[i] = cur
	}
	return nil
}

// storeShards gathers the shards on the host into the model's variables after a step.
func (t *Trainer) storeShards() error {
	st := t.dp.fsdpOrNil()
	if st == nil {
		return nil
	}
	for i, v := range t.trainVar {
		full := tensors.FromShape(v.Shape())
		if err := st.gatherHost(st.param[i], full); err != nil {
			return fmt.Errorf("fsdp: gathering %s: %w", t.paramName(i), err)
		}
		if err := v.SetValue(full); err != nil {
			return fmt.Errorf("fsdp: %s: %w", t.paramName(i), err)
		}
		st.synced[i] = full
	}
	return nil
}

// gatherHost copies the shards of v, in device order, into dst (dropping the padding).
func (st *fsdpState) gatherHost(v *context.Variable, dst *tensors.Tensor) error {
	dv, err := v.DistributedValue()
	if err != nil {
		return err
	}
	var errs []error
	err = dst.MutableBytes(func(out []byte) {
		at := 0
		for _, s := range dv.Shards() {
			errs = append(errs, s.ConstBytes(func(src []byte) { at += copy(out[at:], src) }))
			if at >= len(out) {
				break
			}
		}
	})
	return firstErr(append(errs, err)...)
}

func (dp *dataParallel) fsdpOrNil() *fsdpState {
	if dp == nil {
		return nil
	}
	return dp.fsdp
}

// weightVar is the variable the step updates for trainable variable i: its shard store under
// FSDP, else the variable itself.
func (t *Trainer) weightVar(i int) *context.Variable {
	if st := t.dp.fsdpOrNil(); st != nil {
		return st.param[i]
	}
	return t.trainVar[i]
}

// gatheredWeights maps a graph being built to the full weights gathered in it, which the
// models' weight lookups return instead of their variables' (sharded) values.
var gatheredWeights sync.Map // GraphId → map[*context.Variable]*Node

// graphValue is v's value in g: the gathered full weight under FSDP, else v's own.
func graphValue(v *context.Variable, g *Graph) *Node {
	if m, ok := gatheredWeights.Load(g.GraphId()); ok {
		if n := m.(map[*context.Variable]*Node)[v]; n != nil {
			return n
		}
	}
	return v.ValueGraph(g)
}

// gather builds, under FSDP, the full value of every trainable variable in g from the
// devices' shards (one AllReduce) and has the model read them; release, deferred by the
// caller, undoes that once the graph is built. Without FSDP it returns nil and a no-op.
func (t *Trainer) gather(g *Graph) (full []*Node, release func()) {
	st := t.dp.fsdpOrNil()
	if st == nil || g.DistributedStrategy() != distributed.SPMD {
		return nil, func() {}
	}
	e := Reshape(st.onehot.ValueGraph(g), st.n, 1)
	bufs := make([]*Node, len(t.trainVar))
	for i := range t.trainVar {
		k := st.shard[i]
		p := st.param[i].ValueGraph(g) // [k]: this device's shard
		rows := Mul(BroadcastToDims(ConvertDType(e, p.DType()), st.n, k), BroadcastToDims(Reshape(p, 1, k), st.n, k))
		bufs[i] = Reshape(rows, st.n*k)
	}
	bufs = g.Distributed().AllReduce(bufs, backends.ReduceOpSum)
	m := make(map[*context.Variable]*Node, len(bufs))
	full = make([]*Node, len(bufs))
	for i, v := range t.trainVar {
		x := StopGradient(bufs[i])
		if size := v.Shape().Size(); size != st.n*st.shard[i] {
			x = Slice(x, AxisRange(0, size))
		}
		full[i] = Reshape(x, v.Shape().Dimensions...)
		m[v] = full[i]
	}
	gatheredWeights.Store(g.GraphId(), m)
	return full, func() {
		gatheredWeights.Delete(g.GraphId())
		if r := recover(); r != nil {
			panic(r) // the build failed already: keep its error (release runs deferred)
		}
		// A trainable variable read around graphValue would be fed whole to every device and
		// miss its gradient: fail the build instead of training wrongly.
		for i, v := range t.trainVar {
			if v.InUseByGraph(g) {
				panic(fmt.Errorf("fsdp: the loss read %s without the models' weight lookup (graphValue)", t.paramName(i)))
			}
		}
	}
}

// flatten pads each full gradient to its n·k flat form, ready to be all-reduced.
func (st *fsdpState) flatten(grads []*Node) []*Node {
	out := make([]*Node, len(grads))
	for i, gr := range grads {
		x := Reshape(gr, gr.Shape().Size())
		if pad := st.n*st.shard[i] - gr.Shape().Size(); pad > 0 {
			x = Concatenate([]*Node{x, Zeros(gr.Graph(), shapes.Make(gr.DType(), pad))}, 0)
		}
		out[i] = x
	}
	return out
}

// ownShards keeps this device's row of each all-reduced flat gradient (the second half of the
// reduce-scatter): the one-hot row picks it exactly.
func (st *fsdpState) ownShards(sums []*Node) []*Node {
	if len(sums) == 0 {
		return nil
	}
	g := sums[0].Graph()
	e := Reshape(st.onehot.ValueGraph(g), st.n, 1)
	out := make([]*Node, len(sums))
	for i, s := range sums {
		k := st.shard[i]
		rows := Mul(Reshape(s, st.n, k), BroadcastToDims(ConvertDType(e, s.DType()), st.n, k))
		out[i] = ReduceSum(rows, 0)
	}
	return out
}

// globalNorm is the global gradient norm: under FSDP each device sums the squares of its
// shards and the partial sums are all-reduced.
func (dp *dataParallel) globalNorm(grads []*Node) *Node {
	if dp.fsdpOrNil() == nil || len(grads) == 0 || grads[0].Graph().DistributedStrategy() != distributed.SPMD {
		return globalNorm(grads)
	}
	return Sqrt(grads[0].Graph().Distributed().AllReduceOne(sumOfSquares(grads), backends.ReduceOpSum))
}

// stateValues returns the values of the optimizer-state variable v of trainable variable i in
// the variable's own shape (under FSDP: gathered from the shards, without the padding).
func (t *Trainer) stateValues(i int, v *context.Variable) ([]float32, error) {
	st := t.dp.fsdpOrNil()
	if st == nil {
		val, err := v.Value()
		if err != nil {
			return nil, err
		}
		return tensors.CopyFlatData[float32](val)
	}
	full := tensors.FromShape(t.trainVar[i].Shape())
	if err := st.gatherHost(v, full); err != nil {
		return nil, err
	}
	return tensors.CopyFlatData[float32](full)
}

// setStateValues sets the optimizer-state variable v of trainable variable i from values in
// the variable's own shape (under FSDP: padded, to be sharded at the next step).
func (t *Trainer) setStateValues(i int, v *context.Variable, data []float32) error {
	val := tensors.FromFlatDataAndDimensions(data, t.trainVar[i].Shape().Dimensions...)
	st := t.dp.fsdpOrNil()
	if st == nil {
		return v.SetValue(val)
	}
	flat, err := padFlat(val, st.n*st.shard[i])
	if err != nil {
		return err
	}
	return v.SetValue(flat)
}

// newAccumulator is a zero gradient accumulator for trainable variable i (sharded under FSDP).
func (t *Trainer) newAccumulator(i int) *context.Variable {
	acc := t.zeros("grad_accum", t.trainVar[i])
	if st := t.dp.fsdpOrNil(); st != nil {
		// Zeros padded and split along the mesh; a zero tensor cannot fail to copy.
		if err := st.shardInPlace(acc, st.shard[i]); err != nil {
			panic(fmt.Errorf("fsdp accumulator: %w", err))
		}
	}
	return acc
}

// DeviceStateBytes measures, per device, the bytes of the device buffers that hold what the
// train step keeps between steps: the weights it reads (the shards under FSDP) and the
// optimizer state (AdamW moments, gradient accumulators); under FSDP also the model's full
// weights where the role's own forward passes have put them on a device. Values only on the
// host are not counted. Call it after a step: before one, a variable may not be on its
// devices yet.
func (t *Trainer) DeviceStateBytes() (map[int]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	vars := []*context.Variable{}
	for i := range t.trainVar {
		vars = append(vars, t.weightVar(i))
	}
	vars = append(append(append(vars, t.mVar...), t.vVar...), t.accVar...)
	fsdp := t.dp.fsdpOrNil() != nil
	if fsdp {
		vars = append(vars, t.trainVar...) // full tensors, on the host after each step
	}
	out := map[int]int64{}
	for i, v := range vars {
		var vals []*tensors.Tensor
		if t.dp == nil || fsdp && i >= len(vars)-len(t.trainVar) {
			val, err := v.Value()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
			}
			vals = []*tensors.Tensor{val}
		} else {
			dv, err := v.DistributedValue()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
			}
			vals = dv.Shards()
		}
		for _, x := range vals {
			if !x.IsOnAnyDevice() {
				continue
			}
			d, err := x.Device()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
			}
			out[int(d)] += int64(x.Shape().Memory())
		}
	}
	return out, nil
}
