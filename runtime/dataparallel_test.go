package runtime

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// tokenSumLoss is a token-mean NLL normalised by the whole mini-batch's token count ("den"), as
// the specializations' losses are: it adds up over micro-batches and over devices' shares.
func tokenSumLoss(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
	logits := m.Logits(ctx, m.Forward(ctx, batch["tokens"]))
	nll := Neg(Mul(LogProbs(logits, batch["targets"]), batch["mask"]))
	ent := Mul(StopGradient(Entropy(logits)), batch["mask"])
	return Div(ReduceAllSum(nll), batch["den"]), map[string]*Node{
		"entropy":     Div(ReduceAllSum(ent), batch["den"]),
		"entropy_max": ReduceAllMax(ent),
	}
}

// TestDataParallelMatchesOneDevice trains the same model on the same global batches on 1, 2 and
// 4 virtual devices of the cpu backend: losses, metrics, gradient norms and the weights after
// three AdamW steps (two micro-batches each, clipping on) agree within float32 tolerance.
func TestDataParallelMatchesOneDevice(t *testing.T) {
	b := devicesBackend(t, 4)
	cfg := smallGQA()
	rng := rand.New(rand.NewPCG(5, 5))
	var steps [][]map[string]*tensors.Tensor
	for range 3 {
		// 4 and 3 rows: on 2 devices 2+2, then 1+1 and a leftover row; on 4 devices 1 each,
		// then 3 leftover rows and a padding share.
		mbs := []map[string]*tensors.Tensor{sftBatch(rng, cfg, 4, 12), sftBatch(rng, cfg, 3, 12)}
		setStepTokens(mbs)
		steps = append(steps, mbs)
	}
	train := func(devices []int) ([]StepResult, *Model) {
		m, err := NewModel(cfg, 9)
		if err != nil {
			t.Fatal(err)
		}
		// AdamW divides by √v + ε: with PyTorch's ε = 1e-8 a gradient at float32 rounding
		// level (one summed in another order) becomes a step of up to lr, so the weights could
		// only be compared to within lr. ε = 1e-3 keeps such steps at rounding level too.
		adam := DefaultAdamW()
		adam.Eps = 1e-3
		tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: adam, MaxGradNorm: 0.5,
			Schedule: Schedule{BaseLR: 1e-2}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.SetDevices(b, devices); err != nil {
			t.Fatal(err)
		}
		if tr.Devices() != len(devices) {
			t.Errorf("Devices() = %d, want %d", tr.Devices(), len(devices))
		}
		var res []StepResult
		for _, mbs := range steps {
			r, err := tr.Step(mbs)
			if err != nil {
				t.Fatalf("devices %v: %v", devices, err)
			}
			res = append(res, r)
		}
		return res, m
	}
	close := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }
	want, ref := train([]int{0})
	for _, devices := range [][]int{{0, 1}, {3, 2, 1, 0}} {
		got, m := train(devices)
		for i := range want {
			g, w := got[i], want[i]
			if !close(g.Loss, w.Loss, 1e-5) || !close(g.GradNorm, w.GradNorm, 1e-4) ||
				!close(g.Metrics["entropy"], w.Metrics["entropy"], 1e-5) ||
				!close(g.Metrics["entropy_max"], w.Metrics["entropy_max"], 1e-6) {
				t.Errorf("devices %v step %d: loss %v grad norm %v metrics %v; one device: %v %v %v",
					devices, i, g.Loss, g.GradNorm, g.Metrics, w.Loss, w.GradNorm, w.Metrics)
			}
		}
		worst := worstWeightDiff(t, ref, m)
		t.Logf("devices %v: loss %.6f (one device %.6f), largest weight difference %.2g", devices, got[2].Loss, want[2].Loss, worst)
		if worst > 2e-6 {
			t.Errorf("devices %v: weights differ from one device's by up to %g", devices, worst)
		}
	}
}

func TestDataParallelErrors(t *testing.T) {
	b := devicesBackend(t, 2)
	m, err := NewModel(smallGQA(), 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		devices []int
		want    string
	}{
		{[]int{0, 2}, "device 2 does not exist: the backend has 2 device(s)"},
		{[]int{1, 1}, "device 1 is listed twice"},
		{nil, "no devices"},
	} {
		if err := tr.SetDevices(b, tc.devices); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetDevices(%v) = %v, want %q", tc.devices, err, tc.want)
		}
	}
	if err := tr.SetDevices(b, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	mb := sftBatch(rand.New(rand.NewPCG(1, 1)), smallGQA(), 4, 8)
	mb["den"] = tensors.FromScalar(float32(10))
	if _, err := tr.Step(batch1(mb)); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetDevices(b, []int{0}); err == nil {
		t.Error("SetDevices after a step succeeded")
	}
	mb["den"] = tensors.FromValue([]float32{1, 2})
	if _, err := tr.Step(batch1(mb)); err == nil || !strings.Contains(err.Error(), "every batch tensor must share its first axis") {
		t.Errorf("a batch tensor of 2 rows among 4: %v", err)
	}
}

// TestEvaluatorOnDevices: a forward pass split among 3 devices (5 rows: 2, 2 and 1 real row
// plus a repeated one) returns every row's outputs in order, as on one device.
func TestEvaluatorOnDevices(t *testing.T) {
	b := devicesBackend(t, 3)
	m, err := NewModel(smallGQA(), 2)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(ctx *context.Context, m *Model, batch map[string]*Node) map[string]*Node {
		lp := m.TokenLogProbs(ctx, batch["tokens"], batch["targets"])
		return map[string]*Node{"log_probs": lp, "seq_logp": ReduceSum(Mul(lp, batch["mask"]), -1)}
	}
	one, err := NewEvaluator(b, m, fn)
	if err != nil {
		t.Fatal(err)
	}
	three, err := NewEvaluator(b, m, fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := three.SetDevices(b, []int{2, 0, 1}); err != nil {
		t.Fatal(err)
	}
	mb := sftBatch(rand.New(rand.NewPCG(7, 7)), m.Config, 5, 12)
	want, err := one.Run(mb)
	if err != nil {
		t.Fatal(err)
	}
	got, err := three.Run(mb)
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		g := got[k]
		if !g.Shape().Equal(w.Shape()) {
			t.Fatalf("%s: shape %s, want %s", k, g.Shape(), w.Shape())
		}
		a, c := tensors.MustCopyFlatData[float32](w), tensors.MustCopyFlatData[float32](g)
		for i := range a {
			if math.Abs(float64(a[i]-c[i])) > 1e-5 {
				t.Fatalf("%s[%d]: %v on 3 devices, %v on one", k, i, c[i], a[i])
			}
		}
	}
	if err := three.SetDevices(b, []int{0}); err == nil {
		t.Error("SetDevices after a run succeeded")
	}
}

// setStepTokens sets every micro-batch's "den" to the step's token count (the masks' sum over
// all its micro-batches), as the engine normalises a step's losses.
func setStepTokens(mbs []map[string]*tensors.Tensor) {
	var tokens float32
	for _, mb := range mbs {
		for _, v := range mb["mask"].Value().([][]float32) {
			for _, x := range v {
				tokens += x
			}
		}
	}
	for _, mb := range mbs {
		mb["den"] = tensors.FromScalar(tokens)
	}
}
