package runtime

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/cpu"
)

// Data-parallel training.
//
// A trainer placed on N > 1 devices compiles its step graphs with GoMLX's SPMD strategy over a
// one-axis mesh ("data"): the weights and optimizer state are replicated, each device gets
// 1/N of every micro-batch's rows, and the gradients, the loss and the metrics are all-reduced
// across the devices before the update, so every replica applies the same update and the
// replicas stay identical. On GPU the collectives are XLA's (NCCL); on the cpu backend with
// virtual devices ("cpu:devices=N") they are the backend's own, so the same path is tested
// without accelerators.
//
// A device's share of a micro-batch is treated like a micro-batch of its own: losses and
// metrics are computed per share already scaled by the whole mini-batch (the trainer's
// contract, see LossFn), so their sums over shares are the mini-batch's values, and extremes
// ("_max", "_min") take the max or min, as CombineMetric does across micro-batches. Rows that
// do not divide evenly among the devices run in one more execution (see deviceParts).

// DataAxis is the name of the mesh axis data-parallel training splits the batch along.
const DataAxis = "data"

// dataParallel is a trainer's placement on several devices.
type dataParallel struct {
	devices []backends.DeviceNum
	mesh    *distributed.DeviceMesh
	fsdp    *fsdpState // nil: weights and optimizer state replicated (see fsdp.go)
}

// CheckDevices reports an error unless devices is a non-empty list of distinct device numbers
// below available.
func CheckDevices(devices []int, available int) error {
	if len(devices) == 0 {
		return fmt.Errorf("no devices")
	}
	seen := map[int]bool{}
	for _, d := range devices {
		if d < 0 || d >= available {
			return fmt.Errorf("device %d does not exist: the backend has %d device(s) (0–%d)", d, available, available-1)
		}
		if seen[d] {
			return fmt.Errorf("device %d is listed twice", d)
		}
		seen[d] = true
	}
	return nil
}

// SetDevices places the trainer on devices of backend: on one device, the step runs there; on
// several, it runs data-parallel (see above). It must be called before the first step.
func (t *Trainer) SetDevices(backend backends.Backend, devices []int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys != nil || t.step > 0 {
		return fmt.Errorf("trainer: devices must be set before the first step")
	}
	if err := CheckDevices(devices, backend.NumDevices()); err != nil {
		return fmt.Errorf("trainer placement %v: %w", devices, err)
	}
	nums := make([]backends.DeviceNum, len(devices))
	for i, d := range devices {
		nums[i] = backends.DeviceNum(d)
	}
	if len(devices) == 1 {
		if devices[0] != 0 {
			for _, e := range t.execs() {
				placeOnDevice(e, nums[0])
			}
		}
		return nil
	}
	mesh, err := distributed.NewDeviceMesh([]int{len(devices)}, []string{DataAxis})
	if err != nil {
		return fmt.Errorf("trainer placement %v: %w", devices, err)
	}
	for _, e := range t.execs() {
		e.SPMD(mesh).WithDeviceAssignment(nums)
	}
	t.dp = &dataParallel{devices: nums, mesh: mesh}
	return nil
}

// execs are the trainer's step executors, which a placement configures.
func (t *Trainer) execs() []*context.Exec {
	return []*context.Exec{t.accumulate, t.applyFresh, t.applyAccumulated}
}

// Devices returns the number of devices the trainer's step runs on.
func (t *Trainer) Devices() int {
	if t.dp == nil {
		return 1
	}
	return len(t.dp.devices)
}

// reduce returns the loss, the metrics and the gradients of the trainable parameters; in an
// SPMD graph, each device's weighted by its share's weight (extra, a scalar: 1, or 0 for a
// padding share) and all-reduced across the devices: sums, and max or min for extremes.
func (dp *dataParallel) reduce(names []string, loss *Node, metrics, params, extra []*Node) (*Node, []*Node, []*Node) {
	g := loss.Graph()
	if dp == nil || g.DistributedStrategy() != distributed.SPMD {
		return loss, metrics, Gradient(loss, params...)
	}
	w := extra[0]
	loss = Mul(loss, ConvertDType(w, loss.DType()))
	grads := Gradient(loss, params...)
	if dp.fsdp != nil {
		grads = dp.fsdp.flatten(grads) // reduce-scatter, first half: all-reduce the padded gradients
	}
	sums := append([]*Node{loss}, grads...)
	var sumIdx, maxIdx, minIdx []int
	var maxes, mins []*Node
	for i, m := range metrics {
		switch {
		case strings.HasSuffix(names[i], "_max"):
			// A padding share repeats a real row, so it cannot move an extreme.
			maxIdx, maxes = append(maxIdx, i), append(maxes, m)
		case strings.HasSuffix(names[i], "_min"):
			minIdx, mins = append(minIdx, i), append(mins, m)
		default:
			sumIdx, sums = append(sumIdx, i), append(sums, Mul(m, ConvertDType(w, m.DType())))
		}
	}
	sums = g.Distributed().AllReduce(sums, backends.ReduceOpSum)
	out := slices.Clone(metrics)
	for k, i := range sumIdx {
		out[i] = sums[1+len(grads)+k]
	}
	if len(maxes) > 0 {
		for k, r := range g.Distributed().AllReduce(maxes, backends.ReduceOpMax) {
			out[maxIdx[k]] = r
		}
	}
	if len(mins) > 0 {
		for k, r := range g.Distributed().AllReduce(mins, backends.ReduceOpMin) {
			out[minIdx[k]] = r
		}
	}
	grads = sums[1 : 1+len(grads)]
	if dp.fsdp != nil {
		grads = dp.fsdp.ownShards(grads)
	}
	return sums[0], out, grads
}

// deviceParts turns each micro-batch's arguments into the executions that compute it: itself
// on one device; on N devices, device-major argument lists ([device 0's..., device 1's...])
// each ending with the share's weight. A micro-batch of R rows runs as one execution of
// ⌊R/N⌋ consecutive rows per device and, when N does not divide R, one more in which the
// first R mod N devices get one leftover row each and the others repeat a real row with
// weight 0 (SPMD devices must all have the same shapes): the sums are exactly the micro-batch's.
func (t *Trainer) deviceParts(microBatches [][]any) ([][]any, error) {
	if t.dp == nil {
		return microBatches, nil
	}
	n := len(t.dp.devices)
	var parts [][]any
	for _, batch := range microBatches {
		rows, err := batchRows(t.keys, batch)
		if err != nil {
			return nil, err
		}
		if rows <= 0 {
			return nil, fmt.Errorf("data-parallel split: the micro-batch has no rows to split")
		}
		type share struct {
			lo, hi int
			weight float32
		}
		var execs [][]share
		if s := rows / n; s > 0 {
			e := make([]share, n)
			for d := range n {
				e[d] = share{d * s, (d + 1) * s, 1}
			}
			execs = append(execs, e)
		}
		if r := rows % n; r > 0 {
			e := make([]share, n)
			for d := range n {
				if d < r {
					e[d] = share{rows - r + d, rows - r + d + 1, 1}
				} else {
					e[d] = share{0, 1, 0}
				}
			}
			execs = append(execs, e)
		}
		for _, e := range execs {
			var args []any
			for _, sh := range e {
				for _, a := range batch {
					x, err := rowRange(a.(*tensors.Tensor), sh.lo, sh.hi)
					if err != nil {
						return nil, fmt.Errorf("data-parallel split: %w", err)
					}
					args = append(args, x)
				}
				args = append(args, sh.weight)
			}
			parts = append(parts, args)
		}
	}
	return parts, nil
}

// withPrefix puts prefix (scalars every device gets) before each device's arguments of part.
func (t *Trainer) withPrefix(prefix, part []any) []any {
	if t.dp == nil {
		return append(slices.Clone(prefix), part...)
	}
	n := len(t.dp.devices)
	k := len(part) / n
	out := make([]any, 0, len(part)+n*len(prefix))
	for d := range n {
		out = append(out, prefix...)
		out = append(out, part[d*k:(d+1)*k]...)
	}
	return out
}

// batchRows is the first-axis size the micro-batch's tensors of rank ≥ 1 share (-1 if all are
// scalars); tensors disagreeing on it cannot be split.
func batchRows(keys []string, batch []any) (int, error) {
	rows, rowsKey := -1, ""
	for i, a := range batch {
		t := a.(*tensors.Tensor)
		if t.Rank() == 0 {
			continue
		}
		if rows < 0 {
			rows, rowsKey = t.Shape().Dimensions[0], keys[i]
		} else if d := t.Shape().Dimensions[0]; d != rows {
			return 0, fmt.Errorf("data-parallel split: %q has %d rows, %q has %d: every batch tensor must share its first axis",
				keys[i], d, rowsKey, rows)
		}
	}
	return rows, nil
}

// rowRange returns a copy of rows [lo, hi) of t, or of t itself if it is a scalar: every
// device gets a tensor of its own, so no tensor is moved between devices mid-call.
func rowRange(t *tensors.Tensor, lo, hi int) (*tensors.Tensor, error) {
	if t.Rank() == 0 {
		return t.LocalClone()
	}
	dims := slices.Clone(t.Shape().Dimensions)
	rows := dims[0]
	dims[0] = hi - lo
	share := tensors.FromShape(shapes.Make(t.DType(), dims...))
	var inner error
	err := t.ConstBytes(func(src []byte) {
		row := len(src) / rows
		inner = share.MutableBytes(func(dst []byte) { copy(dst, src[lo*row:hi*row]) })
	})
	if err == nil {
		err = inner
	}
	return share, err
}

// SetDevices places a forward-only executor on devices of backend; it must be called before
// the first Run. On several devices each Run splits the batch's rows among them (SPMD, the
// weights replicated), a device short of rows repeating its last real row, and gathers the
// outputs' rows back in order; every output must have the batch's rows as its first axis.
func (e *NamedExec) SetDevices(backend backends.Backend, devices []int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.keys != nil {
		return fmt.Errorf("%s: devices must be set before the first run", e.label)
	}
	if err := CheckDevices(devices, backend.NumDevices()); err != nil {
		return fmt.Errorf("%s placement %v: %w", e.label, devices, err)
	}
	nums := make([]backends.DeviceNum, len(devices))
	for i, d := range devices {
		nums[i] = backends.DeviceNum(d)
	}
	switch {
	case len(devices) > 1:
		mesh, err := distributed.NewDeviceMesh([]int{len(devices)}, []string{DataAxis})
		if err != nil {
			return fmt.Errorf("%s placement %v: %w", e.label, devices, err)
		}
		e.exec.SPMD(mesh).WithDeviceAssignment(nums)
		e.devices = len(devices)
	case devices[0] != 0:
		placeOnDevice(e.exec, nums[0])
	}
	return nil
}

// placeOnDevice runs e's graphs on device d alone, as a one-device program (not a distributed
// one: see cpu.PlacedName), so that other programs on other devices can read the same
// variables.
func placeOnDevice(e *context.Exec, d backends.DeviceNum) {
	e.WithName(cpu.PlacedName(e.Name(), d))
}

// execute runs the executor on args (in e.keys order), split among its devices if it has
// several.
func (e *NamedExec) execute(args []any) ([]*tensors.Tensor, error) {
	n := e.devices
	if n <= 1 {
		return e.exec.Exec(args...)
	}
	rows, err := batchRows(e.keys, args)
	if err != nil {
		return nil, err
	}
	if rows <= 0 {
		return nil, fmt.Errorf("data-parallel split: the batch has no rows to split")
	}
	per := (rows + n - 1) / n
	var all []any
	for d := range n {
		idx := make([]int, per)
		for i := range idx {
			idx[i] = min(d*per+i, rows-1)
		}
		for _, a := range args {
			x, err := gatherRows(a.(*tensors.Tensor), idx)
			if err != nil {
				return nil, fmt.Errorf("data-parallel split: %w", err)
			}
			all = append(all, x)
		}
	}
	outs, err := e.exec.Exec(all...)
	if err != nil {
		return nil, err
	}
	k := len(outs) / n
	res := make([]*tensors.Tensor, k)
	for j := range k {
		parts := make([]*tensors.Tensor, n)
		for d := range n {
			parts[d] = outs[d*k+j]
		}
		if res[j], err = concatRows(parts, rows); err != nil {
			return nil, fmt.Errorf("data-parallel output #%d: %w", j, err)
		}
	}
	return res, nil
}

// gatherRows returns a copy of t's rows idx (or of t itself if it is a scalar).
func gatherRows(t *tensors.Tensor, idx []int) (*tensors.Tensor, error) {
	if t.Rank() == 0 {
		return t.LocalClone()
	}
	dims := slices.Clone(t.Shape().Dimensions)
	rows := dims[0]
	dims[0] = len(idx)
	out := tensors.FromShape(shapes.Make(t.DType(), dims...))
	var inner error
	err := t.ConstBytes(func(src []byte) {
		row := len(src) / rows
		inner = out.MutableBytes(func(dst []byte) {
			for i, r := range idx {
				copy(dst[i*row:(i+1)*row], src[r*row:(r+1)*row])
			}
		})
	})
	return out, firstErr(err, inner)
}

// concatRows stacks the devices' outputs along the first axis and keeps the first rows.
func concatRows(parts []*tensors.Tensor, rows int) (*tensors.Tensor, error) {
	p := parts[0]
	if p.Rank() == 0 {
		return nil, fmt.Errorf("a scalar output (shape %s) has no rows to gather", p.Shape())
	}
	dims := slices.Clone(p.Shape().Dimensions)
	per := dims[0]
	dims[0] = rows
	out := tensors.FromShape(shapes.Make(p.DType(), dims...))
	var errs []error
	err := out.MutableBytes(func(dst []byte) {
		row := len(dst) / rows
		for d, part := range parts {
			lo := d * per
			if lo >= rows {
				break
			}
			n := min(per, rows-lo)
			errs = append(errs, part.ConstBytes(func(src []byte) { copy(dst[lo*row:(lo+n)*row], src[:n*row]) }))
		}
	})
	return out, firstErr(append(errs, err)...)
}
