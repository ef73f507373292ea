package runtime

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// flatAdopter is a backend that can take a host slice as a buffer's storage without copying it
// (stx's cpu backend, runtime/cpu AdoptFlat).
type flatAdopter interface {
	AdoptFlat(device backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error)
}

// adopterOf returns the backend under b's wrappers that adopts host storage, or nil.
func adopterOf(b backends.Backend) flatAdopter {
	for {
		if a, ok := b.(flatAdopter); ok {
			return a
		}
		rb, ok := b.(*Backend)
		if !ok || rb.Backend == nil {
			return nil
		}
		b = rb.Backend
	}
}

// moveToBackend hands the values of ctx's variables that live only in host memory (weights just
// loaded or initialised, an optimizer's zeroed state) to backend's device 0, without a copy,
// where the backend can adopt host storage; elsewhere it does nothing and GoMLX uploads them at
// their first use as before.
//
// GoMLX's own upload copies: a variable a program reads gets a shared buffer and its host slice
// becomes garbage; one a program donates (the weights and moments a train step updates in place)
// gets a copy and keeps its host slice until the variable takes the step's result. Either way
// the host copy waits for the next garbage collection, which, the heap's target being twice its
// live size, came after the first train step had mapped its activations: a 0.5B-parameter GRPO
// step held the reference's and the policy's weights and both AdamW moments twice at its peak.
// Called where a model's programs are built (NewTrainer, NewScorer, NewNamedExec), before any
// of them runs, with the backend they run on.
func moveToBackend(backend backends.Backend, ctx *context.Context) error {
	a := adopterOf(backend)
	if a == nil || backend.NumDevices() > 1 {
		// Several devices: data parallelism and FSDP place (and shard) the variables themselves.
		return nil
	}
	for v := range ctx.IterVariables() {
		if !v.HasValue() {
			continue
		}
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("moving %s to the backend: %w", v.ScopeAndName(), err)
		}
		if t.IsShared() || t.IsOnAnyDevice() || !t.IsLocal() {
			continue
		}
		var flat any
		if err := t.ConstFlatData(func(f any) { flat = f }); err != nil {
			return fmt.Errorf("moving %s to the backend: %w", v.ScopeAndName(), err)
		}
		buf, err := a.AdoptFlat(0, flat, t.Shape())
		if err != nil {
			return fmt.Errorf("moving %s to the backend: %w", v.ScopeAndName(), err)
		}
		moved, err := tensors.FromBuffer(backend, buf)
		if err != nil {
			return fmt.Errorf("moving %s to the backend: %w", v.ScopeAndName(), err)
		}
		// The host tensor's storage now belongs to the buffer: finalizing it drops its
		// reference (any later use of it is an error rather than a read of a moved slice).
		if err := v.SetValuePreservingOld(moved); err != nil {
			return fmt.Errorf("moving %s to the backend: %w", v.ScopeAndName(), err)
		}
		t.FinalizeLocal()
	}
	return nil
}
