package runtime

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// velocityRegression is the tests' loss: mean squared error of v_θ(x, σ) to a fixed target.
func velocityRegression(ctx *context.Context, m *VelocityModel, b map[string]*Node) (*Node, map[string]*Node) {
	d := Sub(m.Forward(ctx, b["x"], b["sigma"]), b["target"])
	return ReduceAllMean(Square(d)), nil
}

func velocityBatch() map[string]*tensors.Tensor {
	return map[string]*tensors.Tensor{
		"x":      tensors.FromValue([][]float32{{1, 0}, {0, 1}, {0.5, -0.5}}),
		"sigma":  tensors.FromValue([]float32{0.1, 0.5, 0.9}),
		"target": tensors.FromValue([][]float32{{2, -1}, {2, -1}, {2, -1}}),
	}
}

func allValues(t *testing.T, m Weights) []float32 {
	t.Helper()
	var out []float32
	for _, p := range m.Params() {
		d, err := m.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d...)
	}
	return out
}

// TestVelocityModelForwardAndTraining: the same seed gives the same velocities, a different
// seed different ones, and the Trainer's steps on a fixed regression target lower the
// squared error.
func TestVelocityModelForwardAndTraining(t *testing.T) {
	be := testBackend(t)
	run := func(seed uint64) []float32 {
		m, err := NewVelocityModel(VelocityConfig{Dim: 2, Hidden: 16}, seed)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := NewEvaluator(be, m, func(ctx *context.Context, m *VelocityModel, b map[string]*Node) map[string]*Node {
			return map[string]*Node{"v": m.Forward(ctx, b["x"], b["sigma"])}
		})
		if err != nil {
			t.Fatal(err)
		}
		in := velocityBatch()
		delete(in, "target")
		out, err := ev.Run(in)
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
	if _, err := NewVelocityModel(VelocityConfig{Dim: 0, Hidden: 4}, 1); err == nil {
		t.Error("dim 0 accepted")
	}
	m, _ := NewVelocityModel(VelocityConfig{Dim: 2, Hidden: 16}, 1)
	tr, err := NewTrainer(be, m, velocityRegression, TrainerConfig{AdamW: AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		Schedule: Schedule{Kind: "constant", BaseLR: 1e-3, TotalSteps: 20}})
	if err != nil {
		t.Fatal(err)
	}
	var first, last float64
	for i := range 20 {
		res, err := tr.Step([]map[string]*tensors.Tensor{velocityBatch()})
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

// TestVelocityCheckpoint: a velocity model goes through the language models' checkpoint
// format (config.json, model.safetensors, optimizer.safetensors, state.json) and resumes bit
// for bit; the gradient norm the trainer reports matches central finite differences of the
// loss; a directory of another config or an earlier stx's velocity state is refused.
func TestVelocityCheckpoint(t *testing.T) {
	be := testBackend(t)
	cfg := VelocityConfig{Dim: 2, Hidden: 8}
	tc := TrainerConfig{AdamW: AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		Schedule: Schedule{Kind: "cosine", BaseLR: 1e-2, TotalSteps: 6, WarmupSteps: 2}, MaxGradNorm: 1}
	newPair := func(seed uint64) (*VelocityModel, *Trainer) {
		m, err := NewVelocityModel(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(be, m, velocityRegression, tc)
		if err != nil {
			t.Fatal(err)
		}
		return m, tr
	}
	steps := func(tr *Trainer, n int) []StepResult {
		var out []StepResult
		for range n {
			res, err := tr.Step([]map[string]*tensors.Tensor{velocityBatch()})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res)
		}
		return out
	}
	m, tr := newPair(1)

	// The first step's norm against central differences in float64 (h = 1e-2: a smooth MLP).
	ev, err := NewEvaluator(be, m, func(ctx *context.Context, m *VelocityModel, b map[string]*Node) map[string]*Node {
		l, _ := velocityRegression(ctx, m, b)
		return map[string]*Node{"loss": ConvertDType(l, dtypes.Float64)}
	})
	if err != nil {
		t.Fatal(err)
	}
	const h = 1e-2
	sq := 0.0
	for _, p := range m.Params() {
		w, _ := m.ParamValues(p.Name)
		for i := range w {
			loss := func(x float32) float64 {
				w2 := append([]float32{}, w...)
				w2[i] = x
				if err := m.SetParam(p.Name, w2); err != nil {
					t.Fatal(err)
				}
				out, err := ev.Run(velocityBatch())
				if err != nil {
					t.Fatal(err)
				}
				return tensors.ToScalar[float64](out["loss"])
			}
			g := (loss(w[i]+h) - loss(w[i]-h)) / (2 * h)
			sq += g * g
		}
		if err := m.SetParam(p.Name, w); err != nil {
			t.Fatal(err)
		}
	}
	first := steps(tr, 3)
	if fd := math.Sqrt(sq); math.Abs(fd-first[0].GradNorm) > 0.01*fd {
		t.Errorf("grad norm %v, finite differences %v", first[0].GradNorm, fd)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tr.SaveCheckpoint(dir, []byte("rng")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", optimizerFile, stateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("checkpoint lacks %s: %v", f, err)
		}
	}
	want := steps(tr, 3)

	m2, tr2 := newPair(2) // other weights: the load must replace them all
	rng, err := tr2.LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(rng) != "rng" || tr2.StepCount() != 3 {
		t.Errorf("restored rng %q, step %d; want \"rng\", 3", rng, tr2.StepCount())
	}
	got := steps(tr2, 3)
	for i := range want {
		if got[i].Loss != want[i].Loss || got[i].LR != want[i].LR {
			t.Errorf("step %d after resume: loss %v lr %v, uninterrupted %v lr %v", i+4, got[i].Loss, got[i].LR, want[i].Loss, want[i].LR)
		}
	}
	a, b := allValues(t, m), allValues(t, m2)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("weight %d: %v resumed, %v uninterrupted", i, b[i], a[i])
		}
	}

	wider, _ := NewVelocityModel(VelocityConfig{Dim: 2, Hidden: 9}, 1)
	if err := wider.LoadWeights(dir); err == nil || !strings.Contains(err.Error(), "hidden 8") {
		t.Errorf("a hidden-9 model loaded hidden-8 weights: %v", err)
	}
	old := `{"format":"stx-velocity-v1","steps":3,"lr":0.01}`
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.LoadCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "stx-velocity-v1") {
		t.Errorf("an earlier stx's velocity state: %v", err)
	}
}
