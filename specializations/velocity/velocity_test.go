package velocity

import (
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
)

// TestForwardDeterministicAndTrainable: the same seed gives the same velocities, a
// different seed different ones, and Adam steps on a fixed regression target lower the
// squared error.
func TestForwardDeterministicAndTrainable(t *testing.T) {
	be, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	x := tensors.FromValue([][]float32{{1, 0}, {0, 1}, {0.5, -0.5}})
	sigma := tensors.FromValue([]float32{0.1, 0.5, 0.9})
	target := tensors.FromValue([][]float32{{2, -1}, {2, -1}, {2, -1}})
	run := func(seed uint64) []float32 {
		m, err := NewModel(Config{Dim: 2, Hidden: 16}, seed)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := NewEvaluator(be, m, func(ctx *context.Context, m *Model, b map[string]*Node) map[string]*Node {
			return map[string]*Node{"v": m.Forward(ctx, b["x"], b["sigma"])}
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := ev.Run(map[string]*tensors.Tensor{"x": x, "sigma": sigma})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := tensors.CopyFlatData[float32](out["v"])
		return v
	}
	a, b, c := run(1), run(1), run(2)
	if len(a) != 6 {
		t.Fatalf("velocity has %d values, want 6", len(a))
	}
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different output at %d: %v vs %v", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("different seeds gave identical outputs")
	}
	m, _ := NewModel(Config{Dim: 2, Hidden: 16}, 1)
	tr, err := NewTrainer(be, m, func(ctx *context.Context, m *Model, b map[string]*Node) (*Node, map[string]*Node) {
		d := Sub(m.Forward(ctx, b["x"], b["sigma"]), b["target"])
		return ReduceAllMean(Square(d)), nil
	}, DefaultAdam())
	if err != nil {
		t.Fatal(err)
	}
	batch := map[string]*tensors.Tensor{"x": x, "sigma": sigma, "target": target}
	var first, last float64
	for i := range 20 {
		res, err := tr.Step([]map[string]*tensors.Tensor{batch})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.Loss
		}
		last = res.Loss
	}
	if !(last < 0.8*first) {
		t.Errorf("loss %v → %v: the velocity model does not learn", first, last)
	}
}
