package specializations

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations/loss"
)

// TestReferenceProducesLogProbs: a frozen role prepares from tokens and loss_mask only and
// produces log_probs aligned with the tokens: their masked mean is minus the SFT loss of
// the same model (an independent path through the trainer's graph), and the in-role
// reference (a frozen copy) produces the same numbers under the name ref_log_probs.
func TestReferenceProducesLogProbs(t *testing.T) {
	m := tinyModel(t, false)
	frozen := RoleConfig{Role: schema.Role{Name: "ref", Specialization: "dpo"}, Knobs: defaultKnobs()}
	s, err := New(frozen)
	if err != nil {
		t.Fatal(err)
	}
	data := rolloutWith(t, []string{rollout.KeyTokens, rollout.KeyLossMask}, 4)
	p, err := NewProducer(testBackend(t), s.(LM), m)
	if err != nil {
		t.Fatal(err)
	}
	opts := BatchOptions{MicroBatchSize: 3, Pad: 256}
	if err := p.Produce(data, opts, nil); err != nil {
		t.Fatal(err)
	}
	lp := data.Tok[rollout.KeyLogProbs]
	var sum, n float64
	for b, row := range lp {
		if row[0] != 0 {
			t.Errorf("row %d: token 0 has log-prob %v, want 0 (nothing predicts it)", b, row[0])
		}
		for i, v := range row {
			if data.Mask[b][i] != 0 {
				sum += float64(v)
				n++
			}
		}
	}
	s2, err := New(RoleConfig{Role: schema.Role{Name: "p", Specialization: "sft", Trainable: true}, Knobs: defaultKnobs()})
	if err != nil {
		t.Fatal(err)
	}
	sft := s2.(LM)
	mbs, err := sft.PrepareBatch(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := runtime.NewTrainer(testBackend(t), m, sft.Loss(), runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(),
		Schedule: runtime.Schedule{Kind: "constant", BaseLR: 0}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Step(mbs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := -sum/n, res.Loss; math.Abs(got-want) > 1e-5*math.Abs(want) {
		t.Errorf("masked mean of produced log-probs %v, SFT loss %v", -got, want)
	}
	ref, err := NewReference(m)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := NewProducer(testBackend(t), s.(LM), ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.Produce(data, opts, map[string]string{rollout.KeyLogProbs: rollout.KeyRefLogProbs}); err != nil {
		t.Fatal(err)
	}
	for b := range lp {
		for i := range lp[b] {
			if data.Tok[rollout.KeyRefLogProbs][b][i] != lp[b][i] {
				t.Fatalf("ref_log_probs[%d][%d] = %v, log_probs %v", b, i, data.Tok[rollout.KeyRefLogProbs][b][i], lp[b][i])
			}
		}
	}
	for _, v := range ref.Variables() {
		if v.Trainable {
			t.Fatalf("reference variable %s is trainable", v.Name())
		}
	}
}

// TestProducedKeys: each specialization's forward-only outputs land in the rollout under
// the keys its contract says it produces.
func TestProducedKeys(t *testing.T) {
	for _, name := range []string{"critic", "reward_model", "gkd", "dagger", "actor"} {
		cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: name}, Knobs: defaultKnobs()}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := tinyModel(t, name == "critic" || name == "reward_model")
		p, err := NewProducer(testBackend(t), s.(LM), m)
		if err != nil {
			t.Fatal(err)
		}
		data := rolloutWith(t, []string{rollout.KeyTokens, rollout.KeyLossMask}, 5)
		if err := p.Produce(data, BatchOptions{MicroBatchSize: 4, Pad: 256}, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, k := range s.Contract().Produces(cfg) {
			if !has(data, k) && wideDim(data.Tok, k) == 0 { // logits are a wide column
				t.Errorf("%s: produced rollout lacks %q", name, k)
			}
		}
	}
}

// TestMicroBatchesAddUp: for every aggregation mode, cutting a mini-batch into
// micro-batches gives the same loss and gradient norm as one micro-batch (the aggregation
// denominators are those of the whole mini-batch).
func TestMicroBatchesAddUp(t *testing.T) {
	specs, modes := []string{"actor", "sft"}, loss.AggModes()
	if onXLA() {
		// The denominators are batch inputs computed on the host, the same on every backend;
		// on xla (two trainers a case, 6 s) the actor's per-token and per-sequence modes
		// show the micro-batched step computes the same there.
		specs, modes = []string{"actor"}, []loss.AggMode{loss.AggTokenMean, loss.AggSeqMeanTokenSumNorm}
	}
	for _, spec := range specs {
		for _, mode := range modes {
			k := defaultKnobs()
			k.LossAggMode = string(mode)
			s, err := New(RoleConfig{Role: schema.Role{Name: "r", Specialization: spec, Trainable: true}, Knobs: k})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := Get(spec)
			data := rolloutWith(t, c.Requires(RoleConfig{Role: schema.Role{Name: "r", Trainable: true}, Knobs: k}), 6)
			var got [2]runtime.StepResult
			for i, size := range []int{0, 3} {
				mbs, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: size, Pad: 256})
				if err != nil {
					t.Fatal(err)
				}
				tr, err := runtime.NewTrainer(testBackend(t), tinyModel(t, false), s.(LM).Loss(),
					runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 1e-3}})
				if err != nil {
					t.Fatal(err)
				}
				if got[i], err = tr.Step(mbs); err != nil {
					t.Fatal(err)
				}
			}
			if d := math.Abs(got[0].Loss - got[1].Loss); d > 1e-5*(1+math.Abs(got[0].Loss)) {
				t.Errorf("%s %s: loss one batch %v, micro-batches %v", spec, mode, got[0].Loss, got[1].Loss)
			}
			if d := math.Abs(got[0].GradNorm - got[1].GradNorm); d > 1e-4*got[0].GradNorm {
				t.Errorf("%s %s: grad norm one batch %v, micro-batches %v", spec, mode, got[0].GradNorm, got[1].GradNorm)
			}
		}
	}
}

// TestHotKnobsAreBatchInputs: a changed entropy coefficient reaches the loss through the
// batch, with the same trainer (no recompilation needed for new keys).
func TestHotKnobsAreBatchInputs(t *testing.T) {
	k := defaultKnobs()
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: "actor", Trainable: true}, Knobs: k}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := Get("actor")
	data := rolloutWith(t, c.Requires(cfg), 7)
	mbs, err := s.PrepareBatch(data, BatchOptions{Pad: 256})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := runtime.NewTrainer(testBackend(t), tinyModel(t, false), s.(LM).Loss(),
		runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 0}})
	if err != nil {
		t.Fatal(err)
	}
	r0, err := tr.Step(mbs)
	if err != nil {
		t.Fatal(err)
	}
	mbs[0][bEntropyCoef] = tensors.FromScalar(float32(0.5))
	r1, err := tr.Step(mbs)
	if err != nil {
		t.Fatal(err)
	}
	want := r0.Loss - 0.5*r0.Metrics["entropy"]
	if math.Abs(r1.Loss-want) > 1e-4 {
		t.Errorf("loss with entropy_coef 0.5 = %v, want %v (entropy %v)", r1.Loss, want, r0.Metrics["entropy"])
	}
}

// TestNewUnknownAndContractOnly: New names the role and the unknown specialization.
func TestNewUnknownAndContractOnly(t *testing.T) {
	if _, err := New(RoleConfig{Role: schema.Role{Name: "x", Specialization: "nope"}}); err == nil {
		t.Error("New(unknown) succeeded")
	}
	for _, n := range Names() {
		c, _ := Get(n)
		if c.New == nil {
			t.Errorf("built-in %s has no implementation", n)
		}
	}
	if _, err := New(RoleConfig{Role: schema.Role{Name: "a", Specialization: "actor"}, Knobs: schema.Knobs{PolicyLoss: "bogus"}}); err == nil {
		t.Error("an unknown policy_loss was accepted")
	}
}

// TestDPOMatchesHostReference: the dpo role's loss equals −mean log σ(β·h) computed in
// float64 from the log-probs its model produces, with pairs given in either order.
func TestDPOMatchesHostReference(t *testing.T) {
	for _, c := range []struct {
		terms   schema.Terms
		weights []float64
	}{
		{terms: schema.Terms{"sigmoid"}},
		{terms: schema.Terms{"sigmoid", "sft"}},                               // RPO, α = 1
		{terms: schema.Terms{"sigmoid", "sft"}, weights: []float64{0.8, 0.2}}, // a DPO+SFT mix
	} {
		k := defaultKnobs()
		k.DPOLossType, k.DPOLossWeights = c.terms, c.weights
		if got, want := dpoStepLoss(t, k), dpoHostLoss(t, k); math.Abs(got-want) > 1e-5*math.Abs(want) {
			t.Errorf("dpo %v %v: loss %v, host reference %v", c.terms, c.weights, got, want)
		}
	}
}

// dpoRollout is the preference rollout of the dpo reference test with its produced
// log-probs (policy and in-role reference equal the tiny model's).
func dpoRollout(t *testing.T, k schema.Knobs) (*rollout.Rollout, Specialization, *runtime.Model) {
	cfg := RoleConfig{Role: schema.Role{Name: "p", Specialization: "dpo", Trainable: true}, Knobs: k}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := rolloutWith(t, s.Contract().Requires(cfg), 9)
	ch := data.Row[rollout.KeyChosen]
	ch[2], ch[3] = 0, 1 // the second pair lists its rejected answer first
	m := tinyModel(t, false)
	p, err := NewProducer(testBackend(t), s.(LM), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(data, BatchOptions{Pad: 256}, nil); err != nil {
		t.Fatal(err)
	}
	return data, s, m
}

// dpoStepLoss is the loss of one trainer step over micro-batches of 3 pairs (so the pair and
// chosen-token counts of the mini-batch are batch inputs).
func dpoStepLoss(t *testing.T, k schema.Knobs) float64 {
	data, s, m := dpoRollout(t, k)
	mbs, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 3, Pad: 256})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := runtime.NewTrainer(testBackend(t), m, s.(LM).Loss(),
		runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 0}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Step(mbs)
	if err != nil {
		t.Fatal(err)
	}
	return res.Loss
}

// dpoHostLoss is Σ_k w_k L_k in float64 from the produced log-probs: sigmoid = mean over
// pairs of −log σ(βh), sft = −Σ chosen log-probs / chosen target tokens.
func dpoHostLoss(t *testing.T, k schema.Knobs) float64 {
	data, _, _ := dpoRollout(t, k)
	ch := data.Row[rollout.KeyChosen]
	seq := func(col [][]float32, b int) float64 {
		var sum float64
		for i, v := range col[b] {
			sum += float64(v) * float64(data.Mask[b][i])
		}
		return sum
	}
	var sigmoid, nll, tokens float64
	for i := 0; i < data.Len(); i += 2 {
		c, r := i, i+1
		if ch[i] == 0 {
			c, r = r, c
		}
		h := (seq(data.Tok[rollout.KeyLogProbs], c) - seq(data.Tok[rollout.KeyRefLogProbs], c)) -
			(seq(data.Tok[rollout.KeyLogProbs], r) - seq(data.Tok[rollout.KeyRefLogProbs], r))
		sigmoid += math.Log1p(math.Exp(-k.Beta * h)) // −log σ(βh)
		nll -= seq(data.Tok[rollout.KeyLogProbs], c)
		for _, m := range data.Mask[c][1:] { // target positions: token 0 is never predicted
			tokens += float64(m)
		}
	}
	terms := map[string]float64{"sigmoid": sigmoid / float64(data.Len()/2), "sft": nll / tokens}
	want := 0.0
	for i, term := range k.DPOLossType {
		w := 1.0
		if len(k.DPOLossWeights) > 0 {
			w = k.DPOLossWeights[i]
		}
		want += w * terms[term]
	}
	return want
}

// TestPPOMatchesHostReference: the actor's PPO loss (token-mean) equals the float64
// clipped surrogate computed from the produced log-probs, the sampler's log-probs and the
// GRPO advantages the estimators registry gives the same rollout.
func TestPPOMatchesHostReference(t *testing.T) {
	k := defaultKnobs()
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: "actor", Trainable: true}, Knobs: k}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := rolloutWith(t, s.Contract().Requires(cfg), 11)
	m := tinyModel(t, false)
	p, err := NewProducer(testBackend(t), s.(LM), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(data, BatchOptions{Pad: 256}, nil); err != nil {
		t.Fatal(err)
	}
	withAdv := shallowCopy(data)
	if _, err := s.(AdvantageComputer).ComputeAdvantages(withAdv); err != nil {
		t.Fatal(err)
	}
	adv := withAdv.Tok["advantages"]
	var sum, n float64
	for b := range data.Tokens {
		for i, mk := range data.Mask[b] {
			if mk == 0 || i == 0 {
				continue
			}
			a := float64(adv[b][i])
			rho := math.Exp(float64(data.Tok[rollout.KeyLogProbs][b][i]) - float64(data.Tok[rollout.KeySamplerLogProbs][b][i]))
			sum += math.Max(-a*rho, -a*math.Min(math.Max(rho, 0.8), 1.2))
			n++
		}
	}
	mbs, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 3, Pad: 256})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := runtime.NewTrainer(testBackend(t), m, s.(LM).Loss(),
		runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 0}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Step(mbs)
	if err != nil {
		t.Fatal(err)
	}
	if want := sum / n; math.Abs(res.Loss-want) > 1e-5*(1+math.Abs(want)) {
		t.Errorf("actor loss %v, host reference %v", res.Loss, want)
	}
}

// TestFlowProducedKeys: frozen flow roles produce velocity vectors and step log-probs per row.
func TestFlowProducedKeys(t *testing.T) {
	m, err := runtime.NewVelocityModel(runtime.VelocityConfig{Dim: flowDim, Hidden: 8}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"flow", "flow_actor"} {
		cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: name}, Knobs: defaultKnobs()}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		data := rolloutWith(t, s.Contract().Requires(cfg), 2)
		p, err := NewFlowProducer(testBackend(t), s.(Flow), m)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Produce(data, BatchOptions{MicroBatchSize: 3}, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, k := range s.Contract().Produces(cfg) {
			if len(data.Row[k]) != data.Len() && wideDim(data.Row, k) == 0 {
				t.Errorf("%s: produced rollout lacks %q", name, k)
			}
		}
	}
	if got := wideDim(map[string]int{WideName("v", 0): 0, WideName("v", 1): 0}, "v"); got != 2 {
		t.Errorf("wideDim = %d, want 2", got)
	}
}
