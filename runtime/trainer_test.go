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

// TestGradientAccumulation: two micro-batches accumulated give the same update as one
// micro-batch whose loss is their sum.
func TestGradientAccumulation(t *testing.T) {
	b := testBackend(t)
	g1 := []float64{0.3, -1.2, 0.5}
	g2 := []float64{-0.1, 0.4, 2.0}
	sum := []float64{g1[0] + g2[0], g1[1] + g2[1], g1[2] + g2[2]}
	run := func(mbs []map[string]*tensors.Tensor) ([]float32, StepResult) {
		m := vectorModel(t)
		tr, err := NewTrainer(b, m, linearLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{BaseLR: 0.05}})
		if err != nil {
			t.Fatal(err)
		}
		var res StepResult
		for range 2 { // two optimizer steps: accumulators must be reset between them
			if res, err = tr.Step(mbs); err != nil {
				t.Fatal(err)
			}
		}
		p, _ := m.ParamValues(biasA)
		return p, res
	}
	acc, resAcc := run([]map[string]*tensors.Tensor{{biasA: padded(g1, 32)}, {biasA: padded(g2, 32)}})
	one, resOne := run([]map[string]*tensors.Tensor{{biasA: padded(sum, 32)}})
	if math.Abs(resAcc.GradNorm-resOne.GradNorm) > 1e-6 || math.Abs(resAcc.GradNorm-math.Sqrt(0.2*0.2+0.8*0.8+2.5*2.5)) > 1e-5 {
		t.Errorf("grad norm accumulated %v, single %v", resAcc.GradNorm, resOne.GradNorm)
	}
	for i := range acc {
		if math.Abs(float64(acc[i]-one[i])) > 1e-6 {
			t.Fatalf("param %d: accumulated %v, single %v", i, acc[i], one[i])
		}
	}
	if resAcc.Metrics["loss_copy"] == 0 {
		t.Error("metrics were not reported")
	}
}

// TestTrainingReducesLoss trains the tiny model on a few fixed sequences: the NLL must fall
// far below its initial value (log 259 ≈ 5.56).
func TestTrainingReducesLoss(t *testing.T) {
	b := testBackend(t)
	cfg, _ := BuiltinConfig("tiny")
	m, err := NewModel(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1,
		Schedule: Schedule{Kind: "constant", BaseLR: 3e-3}})
	if err != nil {
		t.Fatal(err)
	}
	batch := sftBatch(rand.New(rand.NewPCG(3, 3)), cfg, 4, 32)
	var first, last StepResult
	for i := range 40 {
		res, err := tr.Step(batch1(batch))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
		}
		last = res
	}
	t.Logf("loss %.3f → %.3f, entropy %.3f → %.3f", first.Loss, last.Loss, first.Metrics["entropy"], last.Metrics["entropy"])
	if first.Loss < 5 || last.Loss > first.Loss/2 {
		t.Errorf("loss %v → %v: training does not learn", first.Loss, last.Loss)
	}
	// Changing the learning rate does not rebuild anything and takes effect: lr 0 freezes.
	if err := tr.SetSchedule(Schedule{BaseLR: 0}); err != nil {
		t.Fatal(err)
	}
	before, _ := m.ParamValues("model.norm.weight")
	if _, err := tr.Step(batch1(batch)); err != nil {
		t.Fatal(err)
	}
	after, _ := m.ParamValues("model.norm.weight")
	if !sameBits(before, after) {
		t.Error("a step with lr 0 changed the weights")
	}
}

func TestEvaluator(t *testing.T) {
	b := testBackend(t)
	m, err := NewModel(smallGQA(), 2)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := NewEvaluator(b, m, func(ctx *context.Context, m *Model, batch map[string]*Node) map[string]*Node {
		lp := m.TokenLogProbs(ctx, batch["tokens"], batch["targets"])
		return map[string]*Node{"log_probs": lp, "seq_logp": ReduceSum(Mul(lp, batch["mask"]), -1)}
	})
	if err != nil {
		t.Fatal(err)
	}
	mb := sftBatch(rand.New(rand.NewPCG(5, 5)), m.Config, 2, 16)
	out, err := ev.Run(mb)
	if err != nil {
		t.Fatal(err)
	}
	lp := tensors.MustCopyFlatData[float32](out["log_probs"])
	mask := tensors.MustCopyFlatData[float32](mb["mask"])
	seq := tensors.MustCopyFlatData[float32](out["seq_logp"])
	for r := range 2 {
		s := float32(0)
		for j := range 16 {
			s += lp[r*16+j] * mask[r*16+j]
		}
		if math.Abs(float64(s-seq[r])) > 1e-4 {
			t.Errorf("row %d: %v vs %v", r, s, seq[r])
		}
	}
	delete(mb, "mask")
	if _, err := ev.Run(mb); err == nil {
		t.Error("a batch with other keys was accepted")
	}
}

// TestPolicyAndFrozenReferenceInOneGraph: two models share a context under different scopes;
// the loss uses the reference's forward inside the policy's graph; only the policy changes.
func TestPolicyAndFrozenReferenceInOneGraph(t *testing.T) {
	b := testBackend(t)
	ctx := context.New()
	cfg := smallGQA()
	policy, err := NewModelIn(ctx, "/policy", cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	reference, err := NewModelIn(ctx, "/reference", cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	reference.SetTrainable(false)
	loss := func(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
		lp := m.TokenLogProbs(ctx, batch["tokens"], batch["targets"])
		ref := StopGradient(reference.TokenLogProbs(ctx, batch["tokens"], batch["targets"]))
		d := Sub(ref, lp)
		k3 := Sub(Sub(Exp(d), d), OnesLike(d))
		return MaskedMean(k3, batch["mask"]), nil
	}
	tr, err := NewTrainer(b, policy, loss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	refBefore, _ := reference.ParamValues("model.norm.weight")
	polBefore, _ := policy.ParamValues("model.norm.weight")
	batch := sftBatch(rand.New(rand.NewPCG(6, 6)), cfg, 2, 16)
	var first, last StepResult
	for i := range 5 {
		res, err := tr.Step(batch1(batch))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
		}
		last = res
	}
	refAfter, _ := reference.ParamValues("model.norm.weight")
	polAfter, _ := policy.ParamValues("model.norm.weight")
	if !sameBits(refBefore, refAfter) {
		t.Error("the frozen reference changed")
	}
	if sameBits(polBefore, polAfter) {
		t.Error("the policy did not change")
	}
	if !(last.Loss < first.Loss) || first.Loss <= 0 {
		t.Errorf("KL to the reference %v → %v: should fall", first.Loss, last.Loss)
	}
}

// TestTrainingIsDeterministic: two identical runs on shapes large enough for SimpleGo's
// parallel blocked matmul give bit-identical weights.
func TestTrainingIsDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of training")
	}
	b := testBackend(t)
	cfg, _ := BuiltinConfig("tiny")
	batch := sftBatch(rand.New(rand.NewPCG(8, 8)), cfg, 8, 128)
	run := func() *Model {
		m, err := NewModel(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{BaseLR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := tr.Step(batch1(batch)); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	m1, m2 := run(), run()
	for _, p := range m1.Params() {
		a, _ := m1.ParamValues(p.Name)
		c, _ := m2.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs between two identical runs", p.Name)
		}
	}
}

func TestTrainerRejectsBadLosses(t *testing.T) {
	b := testBackend(t)
	cases := map[string]LossFn{
		"non-scalar loss": func(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
			return m.weight(ctx, batch[biasA].Graph(), biasA), nil
		},
		"non-scalar metric": func(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
			p := m.weight(ctx, batch[biasA].Graph(), biasA)
			return ReduceAllSum(p), map[string]*Node{"per_value": p}
		},
	}
	for name, fn := range cases {
		tr, err := NewTrainer(b, vectorModel(t), fn, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-3}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step([]map[string]*tensors.Tensor{{biasA: padded([]float64{1}, 32)}}); err == nil || !strings.Contains(err.Error(), "scalar") {
			t.Errorf("%s: error %v, want one about a scalar", name, err)
		}
	}
	tr, err := NewTrainer(b, vectorModel(t), linearLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(nil); err == nil {
		t.Error("a step without micro-batches was accepted")
	}
	if _, err := tr.Step([]map[string]*tensors.Tensor{{biasA: padded([]float64{1}, 32)}, {biasB: padded([]float64{1}, 16)}}); err == nil {
		t.Error("micro-batches with different keys were accepted")
	}
	if _, err := NewTrainer(b, vectorModel(t), linearLoss, TrainerConfig{AdamW: AdamW{Beta1: 1.5}, Schedule: Schedule{BaseLR: 1e-3}}); err == nil {
		t.Error("beta1 1.5 accepted")
	}
	if _, err := NewTrainer(b, vectorModel(t), linearLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: "exp"}}); err == nil {
		t.Error("unknown schedule accepted")
	}
}

// TestGraphMisuseIsAnError: misuse detected while building a graph comes back as an error
// (GoMLX re-panics non-error panics, which would crash the process).
func TestGraphMisuseIsAnError(t *testing.T) {
	b := testBackend(t)
	m, err := NewModel(smallGQA(), 1) // no value head
	if err != nil {
		t.Fatal(err)
	}
	ev, err := NewEvaluator(b, m, func(ctx *context.Context, m *Model, batch map[string]*Node) map[string]*Node {
		return map[string]*Node{"values": m.ValueHead(ctx, m.Forward(ctx, batch["tokens"]))}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ev.Run(map[string]*tensors.Tensor{"tokens": tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 4}, 1, 4)})
	if err == nil || !strings.Contains(err.Error(), "no value head") {
		t.Errorf("error %v, want one about the missing value head", err)
	}
}
