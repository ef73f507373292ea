package velocity

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/safetensors"
)

// regression is the test's loss: mean squared error to a fixed target.
func regression(ctx *context.Context, m *Model, b map[string]*Node) (*Node, map[string]*Node) {
	d := Sub(m.Forward(ctx, b["x"], b["sigma"]), b["target"])
	return ReduceAllMean(Square(d)), nil
}

func regressionBatch() map[string]*tensors.Tensor {
	return map[string]*tensors.Tensor{
		"x":      tensors.FromValue([][]float32{{1, 0}, {0, 1}, {0.5, -0.5}}),
		"sigma":  tensors.FromValue([]float32{0.1, 0.5, 0.9}),
		"target": tensors.FromValue([][]float32{{2, -1}, {2, -1}, {2, -1}}),
	}
}

func weights(t *testing.T, m *Model) []float32 {
	t.Helper()
	var out []float32
	for _, v := range m.Variables() {
		val, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		d, err := tensors.CopyFlatData[float32](val)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d...)
	}
	return out
}

// TestCheckpointResumesBitExactly: 3 steps, save, 3 more steps equals a new
// model and trainer loaded from the save taking the same 3 steps, bit for bit
// (weights, Adam moments, step counter and learning rate all travel).
func TestCheckpointResumesBitExactly(t *testing.T) {
	be, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	batch := []map[string]*tensors.Tensor{regressionBatch()}
	newPair := func(seed uint64) (*Model, *Trainer) {
		m, err := NewModel(Config{Dim: 2, Hidden: 8}, seed)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(be, m, regression, Adam{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, MaxGradNorm: 1})
		if err != nil {
			t.Fatal(err)
		}
		return m, tr
	}
	steps := func(tr *Trainer, n int) []float64 {
		var losses []float64
		for range n {
			res, err := tr.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, res.Loss)
		}
		return losses
	}
	m, tr := newPair(1)
	steps(tr, 3)
	if err := tr.SetLR(3e-3); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := tr.SaveState(dir); err != nil {
		t.Fatal(err)
	}
	want := steps(tr, 3)

	m2, tr2 := newPair(2) // other weights: Load must replace them all
	if err := m2.Load(dir); err != nil {
		t.Fatal(err)
	}
	if err := tr2.LoadState(dir); err != nil {
		t.Fatal(err)
	}
	if tr2.Steps() != 3 {
		t.Errorf("restored step counter %d, want 3", tr2.Steps())
	}
	got := steps(tr2, 3)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d after resume: loss %v, uninterrupted %v", i+4, got[i], want[i])
		}
	}
	a, b := weights(t, m), weights(t, m2)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("weight %d: %v resumed, %v uninterrupted", i, b[i], a[i])
		}
	}
	// A missing state file and a language-model state.json are errors.
	if err := tr2.LoadState(t.TempDir()); err == nil {
		t.Error("LoadState of an empty directory succeeded")
	}
}

// TestGradientClipAndLR checks the reported norm against central finite
// differences of the loss, that clipping scales the gradient Adam sees by
// max/(G+1e-6) (the first moment is (1−β1)·c·g), and that SetLR sets the step
// size (Adam's first update moves each weight by lr·sign(g)).
func TestGradientClipAndLR(t *testing.T) {
	be, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	batch := []map[string]*tensors.Tensor{regressionBatch()}
	step := func(lr, maxNorm float64) (StepResult, []float32, []float32, []float32) {
		m, _ := NewModel(Config{Dim: 2, Hidden: 8}, 5)
		before := weights(t, m)
		tr, err := NewTrainer(be, m, regression, Adam{LR: 1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, MaxGradNorm: maxNorm})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.SetLR(lr); err != nil {
			t.Fatal(err)
		}
		res, err := tr.Step(batch)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := tr.SaveState(dir); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.ReadFile(filepath.Join(dir, OptimizerFile))
		if err != nil {
			t.Fatal(err)
		}
		var mom []float32
		for _, v := range m.Variables() {
			d, _ := f.Tensors["exp_avg."+v.Name()].Float32s()
			mom = append(mom, d...)
		}
		return res, before, weights(t, m), mom
	}
	free, before, after, mFree := step(1e-3, 0)
	limit := free.GradNorm / 10
	clipped, _, _, mClip := step(1e-3, limit)

	// The norm from central differences of the loss in float64 arithmetic
	// around the initial weights (h = 1e-2: the loss is a smooth MLP).
	m, _ := NewModel(Config{Dim: 2, Hidden: 8}, 5)
	ev, err := NewEvaluator(be, m, func(ctx *context.Context, m *Model, b map[string]*Node) map[string]*Node {
		l, _ := regression(ctx, m, b)
		return map[string]*Node{"loss": ConvertDType(l, dtypes.Float64)}
	})
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		out, err := ev.Run(regressionBatch())
		if err != nil {
			t.Fatal(err)
		}
		return tensors.ToScalar[float64](out["loss"])
	}
	const h = 1e-2
	sq := 0.0
	for _, v := range m.Variables() {
		val, _ := v.Value()
		w, _ := tensors.CopyFlatData[float32](val)
		dims := v.Shape().Dimensions
		for i := range w {
			orig := w[i]
			w[i] = orig + h
			_ = v.SetValue(tensors.FromFlatDataAndDimensions(append([]float32{}, w...), dims...))
			up := loss()
			w[i] = orig - h
			_ = v.SetValue(tensors.FromFlatDataAndDimensions(append([]float32{}, w...), dims...))
			down := loss()
			w[i] = orig
			_ = v.SetValue(tensors.FromFlatDataAndDimensions(append([]float32{}, w...), dims...))
			g := (up - down) / (2 * h)
			sq += g * g
		}
	}
	if fd := math.Sqrt(sq); math.Abs(fd-free.GradNorm) > 0.01*fd {
		t.Errorf("grad norm %v, finite differences %v", free.GradNorm, fd)
	}
	if math.Abs(clipped.GradNorm-free.GradNorm) > 1e-6*free.GradNorm {
		t.Errorf("grad norm %v unclipped, %v with clipping: want the pre-clip norm both times", free.GradNorm, clipped.GradNorm)
	}
	c := limit / (free.GradNorm + 1e-6)
	for i := range mFree {
		if want := float64(mFree[i]) * c; math.Abs(float64(mClip[i])-want) > 1e-6+1e-4*math.Abs(want) {
			t.Fatalf("first moment %d: %v clipped, want %v (= %v × %v)", i, mClip[i], want, mFree[i], c)
		}
	}
	if free.LR != 1e-3 {
		t.Errorf("step LR %v, want the SetLR value 1e-3", free.LR)
	}
	moved := 0
	for i := range before {
		d := math.Abs(float64(after[i] - before[i]))
		if d > 1e-3*1.001 {
			t.Fatalf("weight %d moved %v > lr", i, d)
		}
		if d > 0.9e-3 {
			moved++
		}
	}
	if moved < len(before)/2 {
		t.Errorf("only %d of %d weights moved by ≈ lr", moved, len(before))
	}
	if err := (&Trainer{}).SetLR(math.NaN()); err == nil {
		t.Error("SetLR(NaN) accepted")
	}
	if _, err := NewTrainer(be, m, regression, Adam{LR: 1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, MaxGradNorm: -1}); err == nil {
		t.Error("negative MaxGradNorm accepted")
	}
}
