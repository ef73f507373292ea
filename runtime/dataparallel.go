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
// ("_max", "_min") take the max or min, as CombineMetric does across micro-batches.

// DataAxis is the name of the mesh axis data-parallel training splits the batch along.
const DataAxis = "data"

// dataParallel is a trainer's placement on several devices.
type dataParallel struct {
	devices []backends.DeviceNum
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
				e.WithDeviceAssignment(nums)
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
	t.dp = &dataParallel{devices: nums}
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

// allReduce sums the loss, the metrics and the gradients over the devices of an SPMD graph
// (extremes by max and min); on a single-device graph it returns them unchanged.
func (dp *dataParallel) allReduce(names []string, loss *Node, metrics, grads []*Node) (*Node, []*Node, []*Node) {
	g := loss.Graph()
	if dp == nil || g.DistributedStrategy() != distributed.SPMD {
		return loss, metrics, grads
	}
	sums := append([]*Node{loss}, grads...)
	var sumIdx, maxIdx, minIdx []int
	var maxes, mins []*Node
	for i, m := range metrics {
		switch {
		case strings.HasSuffix(names[i], "_max"):
			maxIdx, maxes = append(maxIdx, i), append(maxes, m)
		case strings.HasSuffix(names[i], "_min"):
			minIdx, mins = append(minIdx, i), append(mins, m)
		default:
			sumIdx, sums = append(sumIdx, i), append(sums, m)
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
	return sums[0], out, sums[1 : 1+len(grads)]
}

// deviceArgs returns an executor's arguments for prefix (scalars every device gets) and one
// micro-batch: as they are on one device, or device-major with each device's share of the
// micro-batch's rows on several.
func (t *Trainer) deviceArgs(prefix, batch []any) ([]any, error) {
	if t.dp == nil {
		return append(slices.Clone(prefix), batch...), nil
	}
	n := len(t.dp.devices)
	shares, err := splitRows(t.keys, batch, n)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, n*(len(prefix)+len(batch)))
	for d := range n {
		out = append(out, prefix...)
		out = append(out, shares[d]...)
	}
	return out, nil
}

// splitRows splits a micro-batch's tensors (named keys) into n shares of consecutive rows: a
// tensor of rank ≥ 1 is cut along its first axis, which must be the same for all of them and
// a multiple of n; a scalar (a normaliser of the whole mini-batch) goes to every share.
func splitRows(keys []string, batch []any, n int) ([][]any, error) {
	rows, rowsKey := -1, ""
	for i, a := range batch {
		t := a.(*tensors.Tensor)
		if t.Rank() == 0 {
			continue
		}
		if rows < 0 {
			rows, rowsKey = t.Shape().Dimensions[0], keys[i]
		} else if d := t.Shape().Dimensions[0]; d != rows {
			return nil, fmt.Errorf("data-parallel split: %q has %d rows, %q has %d: every batch tensor must share its first axis",
				keys[i], d, rowsKey, rows)
		}
	}
	if rows >= 0 && rows%n != 0 {
		return nil, fmt.Errorf("data-parallel split: a micro-batch of %d rows does not divide among %d devices; make the micro-batch size a multiple of %d",
			rows, n, n)
	}
	shares := make([][]any, n)
	for d := range shares {
		shares[d] = make([]any, len(batch))
	}
	for i, a := range batch {
		t := a.(*tensors.Tensor)
		for d := range n {
			var err error
			if shares[d][i], err = rowShare(t, d, n); err != nil {
				return nil, fmt.Errorf("data-parallel split of %q: %w", keys[i], err)
			}
		}
	}
	return shares, nil
}

// rowShare returns share d of n of t's rows (a copy of t if it is a scalar): every device gets
// a tensor of its own, so no tensor is moved between devices mid-call.
func rowShare(t *tensors.Tensor, d, n int) (*tensors.Tensor, error) {
	if t.Rank() == 0 {
		return t.LocalClone()
	}
	dims := slices.Clone(t.Shape().Dimensions)
	dims[0] /= n
	share := tensors.FromShape(shapes.Make(t.DType(), dims...))
	var inner error
	err := t.ConstBytes(func(src []byte) {
		size := len(src) / n
		inner = share.MutableBytes(func(dst []byte) { copy(dst, src[d*size:(d+1)*size]) })
	})
	if err == nil {
		err = inner
	}
	return share, err
}

// SetDevice places a forward-only executor on device d of backend; it must be called before
// the first Run.
func (e *NamedExec) SetDevice(backend backends.Backend, d int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.keys != nil {
		return fmt.Errorf("%s: the device must be set before the first run", e.label)
	}
	if err := CheckDevices([]int{d}, backend.NumDevices()); err != nil {
		return fmt.Errorf("%s: %w", e.label, err)
	}
	if d != 0 {
		e.exec.WithDeviceAssignment([]backends.DeviceNum{backends.DeviceNum(d)})
	}
	return nil
}
