package runtime

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

type vectorCase struct {
	Name, Fn, Section, Note string
	Inputs, Params, Outputs map[string]json.RawMessage
}

type vectorFile struct {
	Tolerance struct{ Rel, Abs float64 }
	Cases     []vectorCase
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	data, err := os.ReadFile("../testdata/algorithms.json")
	if err != nil {
		t.Fatalf("reading test vectors: %v", err)
	}
	var f vectorFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("parsing test vectors: %v", err)
	}
	return f
}

func decode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return v
}

// closeTo applies the vectors' tolerance |got − want| ≤ abs + rel·|want|.
func closeTo(f vectorFile, got, want float64) bool {
	return math.Abs(got-want) <= f.Tolerance.Abs+f.Tolerance.Rel*math.Abs(want)
}

// vectorModel is a small model whose bias vectors serve as the parameters of the optimizer
// vectors: the loss Σ p·G has gradient G exactly.
func vectorModel(t *testing.T) *Model {
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const (
	biasA = "model.layers.0.self_attn.q_proj.bias" // 32 values
	biasB = "model.layers.0.self_attn.k_proj.bias" // 16 values
)

// linearLoss is Σ_name p_name·G_name over the batch keys (each key is a parameter name).
func linearLoss(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
	var loss *Node
	for name, gvec := range batch {
		p := m.weight(ctx, gvec.Graph(), name)
		term := ReduceAllSum(Mul(p, gvec))
		if loss == nil {
			loss = term
		} else {
			loss = Add(loss, term)
		}
	}
	return loss, map[string]*Node{"loss_copy": loss}
}

func padded(vals []float64, n int) *tensors.Tensor {
	out := make([]float32, n)
	for i, v := range vals {
		out[i] = float32(v)
	}
	return tensors.FromFlatDataAndDimensions(out, n)
}

func TestSectionIVectors(t *testing.T) {
	f := loadVectors(t)
	b := testBackend(t)
	consumed := map[string]bool{}
	for _, c := range f.Cases {
		if c.Section != "I" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			switch c.Fn {
			case "schedule.lr":
				steps := decode[[]int](t, c.Inputs["steps"])
				wantMult := decode[[]float64](t, c.Outputs["multiplier"])
				wantLR := decode[[]float64](t, c.Outputs["lr"])
				base := Schedule{Kind: decode[string](t, c.Params["schedule"]), BaseLR: decode[float64](t, c.Params["base_lr"]),
					TotalSteps: decode[int](t, c.Params["total_steps"]), WarmupRatio: decode[float64](t, c.Params["warmup_ratio"]),
					MinLRRatio: decode[float64](t, c.Params["min_lr_ratio"])}
				byRatio, bySteps := base, base
				byRatio.WarmupSteps = -1
				bySteps.WarmupSteps = decode[int](t, c.Params["warmup_steps"])
				for _, s := range []Schedule{byRatio, bySteps} {
					for i, step := range steps {
						if got := s.Multiplier(step); !closeTo(f, got, wantMult[i]) {
							t.Errorf("step %d: multiplier %v, want %v", step, got, wantMult[i])
						}
						if got := s.LR(step); !closeTo(f, got, wantLR[i]) {
							t.Errorf("step %d: lr %v, want %v", step, got, wantLR[i])
						}
					}
				}
			case "optim.adamw":
				testAdamWVector(t, f, b, c)
			case "optim.clip_grad_norm":
				testClipVector(t, f, b, c)
			default:
				t.Fatalf("section-I case with unknown fn %q", c.Fn)
			}
			consumed[c.Name] = true
		})
	}
	for _, c := range f.Cases {
		if c.Section == "I" && !consumed[c.Name] {
			t.Errorf("section-I case %s was not consumed", c.Name)
		}
	}
	if len(consumed) == 0 {
		t.Fatal("no section-I cases found")
	}
}

func testAdamWVector(t *testing.T, f vectorFile, b *Backend, c vectorCase) {
	params0 := decode[[]float64](t, c.Inputs["params0"])
	grads := decode[[][]float64](t, c.Inputs["grads"])
	want := decode[[][]float64](t, c.Outputs["params_after_each_step"])
	wantM := decode[[]float64](t, c.Outputs["m_final"])
	wantV := decode[[]float64](t, c.Outputs["v_final"])
	m := vectorModel(t)
	m.SetTrainable(false)
	m.Variable(biasA).SetTrainable(true)
	init := make([]float32, 32)
	for i, v := range params0 {
		init[i] = float32(v)
	}
	if err := m.SetParam(biasA, init); err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, linearLoss, TrainerConfig{
		AdamW: AdamW{Beta1: decode[float64](t, c.Params["beta1"]), Beta2: decode[float64](t, c.Params["beta2"]),
			Eps: decode[float64](t, c.Params["eps"]), WeightDecay: decode[float64](t, c.Params["weight_decay"])},
		Schedule: Schedule{Kind: "constant", BaseLR: decode[float64](t, c.Params["lr"])},
	})
	if err != nil {
		t.Fatal(err)
	}
	for s, g := range grads {
		res, err := tr.Step([]map[string]*tensors.Tensor{{biasA: padded(g, 32)}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Skipped {
			t.Fatalf("step %d skipped", s)
		}
		got, _ := m.ParamValues(biasA)
		for i := range want[s] {
			if !closeTo(f, float64(got[i]), want[s][i]) {
				t.Errorf("step %d param %d: %v, want %v", s, i, got[i], want[s][i])
			}
		}
	}
	mv, _ := tensors.CopyFlatData[float32](tr.mVar[0].MustValue())
	vv, _ := tensors.CopyFlatData[float32](tr.vVar[0].MustValue())
	for i := range wantM {
		if !closeTo(f, float64(mv[i]), wantM[i]) || !closeTo(f, float64(vv[i]), wantV[i]) {
			t.Errorf("moment %d: m %v v %v, want %v %v", i, mv[i], vv[i], wantM[i], wantV[i])
		}
	}
}

// testClipVector reads the clipped gradient back through AdamW's first moment: with β1 = 0,
// m = clipped gradient after one step.
func testClipVector(t *testing.T, f vectorFile, b *Backend, c vectorCase) {
	grads := decode[[][]float64](t, c.Inputs["grads"])
	maxNorm := decode[float64](t, c.Params["max_norm"])
	wantNorm := decode[float64](t, c.Outputs["total_norm"])
	wantCoef := decode[float64](t, c.Outputs["clip_coef"])
	wantClipped := decode[[][]float64](t, c.Outputs["clipped_grads"])
	if len(grads) != 2 {
		t.Fatalf("want 2 gradient tensors, got %d", len(grads))
	}
	m := vectorModel(t)
	m.SetTrainable(false)
	names := []string{biasA, biasB}
	sizes := []int{32, 16}
	for _, n := range names {
		m.Variable(n).SetTrainable(true)
	}
	tr, err := NewTrainer(b, m, linearLoss, TrainerConfig{
		AdamW:       AdamW{Beta1: 0, Beta2: 0.999, Eps: 1e-8},
		Schedule:    Schedule{Kind: "constant", BaseLR: 1e-3},
		MaxGradNorm: maxNorm,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Step([]map[string]*tensors.Tensor{{names[0]: padded(grads[0], sizes[0]), names[1]: padded(grads[1], sizes[1])}})
	if err != nil {
		t.Fatal(err)
	}
	if !closeTo(f, res.GradNorm, wantNorm) {
		t.Errorf("total norm %v, want %v", res.GradNorm, wantNorm)
	}
	for k := range names {
		mv, _ := tensors.CopyFlatData[float32](tr.mVar[k].MustValue())
		for i, w := range wantClipped[k] {
			if !closeTo(f, float64(mv[i]), w) {
				t.Errorf("tensor %d value %d: clipped %v, want %v", k, i, mv[i], w)
			}
			if coef := float64(mv[i]) / grads[k][i]; !closeTo(f, coef, wantCoef) {
				t.Errorf("tensor %d value %d: coefficient %v, want %v", k, i, coef, wantCoef)
			}
		}
	}
}

func TestNonFiniteGradientSkipsUpdate(t *testing.T) {
	b := testBackend(t)
	m := vectorModel(t)
	before, _ := m.ParamValues(biasA)
	tr, err := NewTrainer(b, m, linearLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 0.1}, MaxGradNorm: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Step([]map[string]*tensors.Tensor{{biasA: padded([]float64{1, math.NaN()}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped {
		t.Fatalf("step with a NaN gradient was not skipped (norm %v)", res.GradNorm)
	}
	after, _ := m.ParamValues(biasA)
	for i := range before {
		if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
			t.Fatalf("param %d changed from %v to %v on a skipped step", i, before[i], after[i])
		}
	}
	// The next finite step is AdamW's first: t = 1 (a moment of exactly (1−β1)·g).
	res, err = tr.Step([]map[string]*tensors.Tensor{{biasA: padded([]float64{0.5}, 32)}})
	if err != nil || res.Skipped {
		t.Fatalf("finite step: %v skipped=%v", err, res.Skipped)
	}
	mv, _ := tensors.CopyFlatData[float32](tr.mVar[indexOf(tr, biasA)].MustValue())
	if math.Abs(float64(mv[0])-0.05) > 1e-7 {
		t.Errorf("first moment after skip + step = %v, want 0.05", mv[0])
	}
}

func indexOf(tr *Trainer, name string) int {
	for i, v := range tr.trainVar {
		if strings.HasSuffix(v.Scope()+"/"+v.Name(), "/"+strings.ReplaceAll(name, ".", "/")) {
			return i
		}
	}
	return -1
}
