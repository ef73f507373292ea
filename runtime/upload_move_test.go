package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// plainBackend hides the backend's AdoptFlat: GoMLX's own (copying) upload.
type plainBackend struct{ backends.Backend }

// flatAddr is the address of a float32 tensor's storage as the host reads it.
func flatAddr(t *testing.T, x *tensors.Tensor) uintptr {
	t.Helper()
	var p uintptr
	if err := tensors.ConstFlatData(x, func(f []float32) { p = uintptr(unsafe.Pointer(unsafe.SliceData(f))) }); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMoveToBackend: building a trainer hands the model's host weights and the optimizer's
// zeroed state to a backend that adopts host storage without copying them (the buffer's slice
// is the host slice), and training from there gives bit for bit what GoMLX's copying upload
// gives.
func TestMoveToBackend(t *testing.T) {
	b := testBackend(t)
	if adopterOf(b) == nil {
		t.Skipf("backend %s does not adopt host storage", b.Spec)
	}
	cfg, _ := BuiltinConfig("tiny")
	moved, err := NewModel(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := NewModel(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]uintptr{}
	for _, p := range moved.Params() {
		v, _ := moved.Variable(p.Name).Value()
		before[p.Name] = flatAddr(t, v)
	}
	tc := TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{Kind: "constant", BaseLR: 1e-3}}
	trMoved, err := NewTrainer(b, moved, sftLoss, tc)
	if err != nil {
		t.Fatal(err)
	}
	for v := range moved.Context().IterVariables() {
		x, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		if !x.IsOnAnyDevice() || x.IsShared() {
			t.Errorf("%s: on a device %v, shared %v; want a (donatable) device buffer", v.ScopeAndName(), x.IsOnAnyDevice(), x.IsShared())
		}
	}
	for _, p := range moved.Params() {
		v, _ := moved.Variable(p.Name).Value()
		if got := flatAddr(t, v); got != before[p.Name] {
			t.Errorf("%s: the backend's buffer is a copy of the host slice, want the slice itself", p.Name)
		}
	}
	trCopied, err := NewTrainer(&Backend{Backend: plainBackend{b.Backend}, Spec: "plain"}, copied, sftLoss, tc)
	if err != nil {
		t.Fatal(err)
	}
	// The same batches for both, as tensors of their own: a tensor belongs to one backend.
	rngMoved, rngCopied := rand.New(rand.NewPCG(3, 3)), rand.New(rand.NewPCG(3, 3))
	for step := range 2 {
		rm, err := trMoved.Step(batch1(sftBatch(rngMoved, cfg, 3, 16)))
		if err != nil {
			t.Fatal(err)
		}
		rc, err := trCopied.Step(batch1(sftBatch(rngCopied, cfg, 3, 16)))
		if err != nil {
			t.Fatal(err)
		}
		if math.Float64bits(rm.Loss) != math.Float64bits(rc.Loss) || math.Float64bits(rm.GradNorm) != math.Float64bits(rc.GradNorm) {
			t.Errorf("step %d: loss %v, grad norm %v; with the copying upload %v, %v", step, rm.Loss, rm.GradNorm, rc.Loss, rc.GradNorm)
		}
	}
	for _, p := range moved.Params() {
		a, err := moved.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := copied.ParamValues(p.Name)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(c[i]) {
				t.Fatalf("%s[%d] after 2 steps: %v, with the copying upload %v", p.Name, i, a[i], c[i])
			}
		}
	}
}
