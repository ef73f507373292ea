package runtime

import (
	"fmt"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Weight sync and offload: moving a model's weights between devices and host memory.

// Transfer reports one movement of weights.
type Transfer struct {
	Bytes    int64
	Tensors  int
	Duration time.Duration
}

// RolloutCopy is a copy of a trained model's weights on the device a rollout sampler generates
// on, when that is not where the model trains: the trainer keeps its weights (and optimizer
// state) on its devices, the sampler reads the copy, and Push — the loop's update_weights —
// copies the trained weights over.
type RolloutCopy struct {
	backend backends.Backend
	src     *Model
	dst     *Model
	device  backends.DeviceNum
}

// NewRolloutCopy creates the copy of src on device of backend, with src's current weights.
func NewRolloutCopy(backend backends.Backend, src *Model, device int) (*RolloutCopy, error) {
	if err := CheckDevices([]int{device}, backend.NumDevices()); err != nil {
		return nil, fmt.Errorf("rollout copy: %w", err)
	}
	dst := newEmptyModel(context.New(), "/rollout", src.Config)
	dst.params = append([]Param(nil), src.params...)
	dst.lora = src.lora // the same adapters (their configuration is never changed)
	c := &RolloutCopy{backend: backend, src: src, dst: dst, device: backends.DeviceNum(device)}
	if _, err := c.Push(); err != nil {
		return nil, err
	}
	dst.SetTrainable(false)
	return c, nil
}

// Model is the copy, for the sampler.
func (c *RolloutCopy) Model() *Model { return c.dst }

// Push copies every weight of the trained model to the copy's device (from wherever the
// trainer left it: one device, or the replicas of a data-parallel trainer, which are equal).
// Of a LoRA model, once the copy has the frozen base, it copies the adapters (and the
// trainable value head) alone.
func (c *RolloutCopy) Push() (Transfer, error) {
	start := time.Now()
	var tr Transfer
	for _, p := range trainableParams(c.src) {
		sv := c.src.Variable(p.Name)
		if sv == nil {
			return tr, fmt.Errorf("update_weights: the trained model has no tensor %q", p.Name)
		}
		if c.src.lora != nil && !sv.Trainable && c.dst.Variable(p.Name) != nil {
			continue // a frozen base weight the copy already holds
		}
		t, err := sv.Value()
		if err != nil {
			return tr, fmt.Errorf("update_weights: reading %q: %w", p.Name, err)
		}
		on, err := t.OnDeviceClone(c.backend, c.device)
		if err != nil {
			return tr, fmt.Errorf("update_weights: copying %q to device %d: %w", p.Name, c.device, err)
		}
		if dv := c.dst.Variable(p.Name); dv != nil {
			if err := dv.SetValue(on); err != nil {
				return tr, fmt.Errorf("update_weights: %q: %w", p.Name, err)
			}
		} else {
			scope, name := c.dst.variableScope(p.Name)
			c.dst.ctx.InAbsPath(scope).Checked(false).VariableWithValue(name, on)
		}
		tr.Bytes += int64(t.Memory())
		tr.Tensors++
	}
	tr.Duration = time.Since(start)
	return tr, nil
}

// Offload moves the model's variables (weights, and the optimizer state kept in its context)
// to host memory and frees their device buffers, for a role that sits idle between uses. The
// next computation that reads them puts them back on its device; Wake does it ahead of time.
// Of a LoRA model it moves the adapters and their optimizer state: the frozen base stays where
// it is, since the role's reference (and a frozen role on the same base) computes with it.
func (m *Model) Offload() (Transfer, error) {
	start := time.Now()
	var tr Transfer
	base := m.frozenBase()
	for v := range m.ctx.IterVariables() {
		if !v.HasValue() || !m.owns(v) || base[v] {
			continue
		}
		t, err := v.Value()
		if err != nil {
			return tr, fmt.Errorf("offload %s: %w", v.ScopeAndName(), err)
		}
		size := int64(t.Memory()) // SetValue below finalizes t
		host := tensors.FromShape(t.Shape())
		var inner error
		if err := t.ConstBytes(func(src []byte) {
			inner = host.MutableBytes(func(dst []byte) { copy(dst, src) })
		}); err != nil || inner != nil {
			return tr, fmt.Errorf("offload %s: %w", v.ScopeAndName(), firstErr(err, inner))
		}
		// SetValue frees the previous value's buffers on every device.
		if err := v.SetValue(host); err != nil {
			return tr, fmt.Errorf("offload %s: %w", v.ScopeAndName(), err)
		}
		tr.Bytes += size
		tr.Tensors++
	}
	tr.Duration = time.Since(start)
	return tr, nil
}

// Wake puts the model's variables back on device of backend after Offload. (A data-parallel
// trainer re-distributes them to its devices at its next step by itself.)
func (m *Model) Wake(backend backends.Backend, device int) (Transfer, error) {
	if err := CheckDevices([]int{device}, backend.NumDevices()); err != nil {
		return Transfer{}, fmt.Errorf("wake: %w", err)
	}
	start := time.Now()
	var tr Transfer
	base := m.frozenBase()
	for v := range m.ctx.IterVariables() {
		if !v.HasValue() || !m.owns(v) || base[v] {
			continue
		}
		t, err := v.Value()
		if err != nil {
			return tr, fmt.Errorf("wake %s: %w", v.ScopeAndName(), err)
		}
		if err := t.MaterializeOnDevice(backend, false, backends.DeviceNum(device)); err != nil {
			return tr, fmt.Errorf("wake %s: %w", v.ScopeAndName(), err)
		}
		tr.Bytes += int64(t.Memory())
		tr.Tensors++
	}
	tr.Duration = time.Since(start)
	return tr, nil
}

// SetDevice places the sampler's generation graphs on device d of backend (before the first
// Generate).
func (s *Sampler) SetDevice(backend backends.Backend, d int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := CheckDevices([]int{d}, backend.NumDevices()); err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if d != 0 {
		placeOnDevice(s.exec, backends.DeviceNum(d))
	}
	return nil
}

// frozenBase is the set of a LoRA model's frozen base weights (nil without adapters), which
// Offload and Wake leave in place.
func (m *Model) frozenBase() map[*context.Variable]bool {
	if m.lora == nil {
		return nil
	}
	base := map[*context.Variable]bool{}
	for _, p := range m.params {
		if v := m.Variable(p.Name); v != nil && !v.Trainable {
			base[v] = true
		}
	}
	return base
}

// owns says whether v is one of the model's variables or its optimizer's (under its scope).
func (m *Model) owns(v *context.Variable) bool {
	return m.scope == "" || v.Scope() == m.scope || strings.HasPrefix(v.Scope(), m.scope+"/")
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
