package specializations

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations/loss"
)

// opdConfig is a trainable opd role with the catalog's loss (sum) and the given
// use_precomputed_advantage and policy_loss.
func opdConfig(precomputed bool, policy string) RoleConfig {
	k := defaultKnobs()
	k.UsePrecomputedAdvantage, k.PolicyLoss, k.LossAggMode = precomputed, policy, "sum"
	return RoleConfig{Role: schema.Role{Name: "student", Specialization: "opd", Trainable: true}, Knobs: k}
}

// opdRollout is a rollout with every key opd may read: rewards that differ inside each group
// of two, the sampler's and the teacher's log-probs.
func opdRollout(t *testing.T, seed uint64) *rollout.Rollout {
	return rolloutWith(t, []string{rollout.KeyTokens, rollout.KeyLossMask, rollout.KeyRewards,
		rollout.KeySamplerLogProbs, rollout.KeyTeacherLogProbs}, seed)
}

// hostGaps are OPD's advantages computed as today's opd did, in PrepareBatch: float32 of
// loss.OPDAdvantages with κ = kl_penalty_coef and γ = kl_discount_factor.
func hostGaps(t *testing.T, data *rollout.Rollout, k schema.Knobs) [][]float32 {
	adv, err := loss.OPDAdvantages(tokToFloat64(data.Tok[rollout.KeyTeacherLogProbs]), tokToFloat64(data.Tok[rollout.KeySamplerLogProbs]),
		tokToFloat64(data.Mask), nil, loss.OPDConfig{KLCoef: k.KLPenaltyCoef, Discount: k.KLDiscountFactor})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(adv))
	for b, row := range adv {
		out[b] = make([]float32, len(row))
		for i, v := range row {
			out[b][i] = float32(v)
		}
	}
	return out
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestOPDUsePrecomputedAdvantage: with use_precomputed_advantage the role's advantages are the
// teacher−student gaps, bit for bit those opd always trained on, whether the engine computes
// them over the rollout first (Contract.Estimator) or PrepareBatch does; without it they are
// the configured estimator's (GRPO) on the trajectory rewards, and the first call (only) warns
// that the gaps were overwritten. The estimator "precomputed" takes the gaps as supplied.
func TestOPDUsePrecomputedAdvantage(t *testing.T) {
	data := opdRollout(t, 5)
	adv := func(cfg RoleConfig) ([][]float32, []string, []string) {
		t.Helper()
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := shallowCopy(data)
		warns, err := s.(AdvantageComputer).ComputeAdvantages(d)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.(AdvantageComputer).ComputeAdvantages(shallowCopy(data))
		if err != nil {
			t.Fatal(err)
		}
		return d.Tok[rollout.KeyAdvantages], warns, again
	}
	on := opdConfig(true, "importance_sampling")
	gaps := hostGaps(t, data, on.Knobs)
	got, warns, again := adv(on)
	if !sameBits(got, gaps) || len(warns)+len(again) != 0 {
		t.Errorf("use_precomputed_advantage: advantages %v (warnings %q, %q), want the gaps %v and no warning", got, warns, again, gaps)
	}

	off := opdConfig(false, "importance_sampling")
	grpo := shallowCopy(data)
	if _, err := estimators.RolloutAdvantages(grpo, estimators.Config{Name: "grpo", NormByStd: true, Epsilon: off.Knobs.AdvEpsilon}); err != nil {
		t.Fatal(err)
	}
	got, warns, again = adv(off)
	if !sameBits(got, grpo.Tok[rollout.KeyAdvantages]) || sameBits(got, gaps) {
		t.Errorf("without use_precomputed_advantage: advantages %v, want GRPO's %v", got, grpo.Tok[rollout.KeyAdvantages])
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "overwritten by estimator grpo") || len(again) != 0 {
		t.Errorf("warnings %q, then %q: want one saying the gaps were overwritten by grpo, then none", warns, again)
	}

	supplied := opdConfig(false, "importance_sampling")
	supplied.Knobs.Estimator = estimators.Precomputed
	got, warns, _ = adv(supplied)
	if !sameBits(got, gaps) || len(warns) != 0 {
		t.Errorf("estimator precomputed: advantages %v (warnings %q), want the gaps", got, warns)
	}

	// The engine computes advantages over the rollout before PrepareBatch; alone, PrepareBatch
	// computes the same ones.
	for _, cfg := range []RoleConfig{on, off} {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 3, Pad: 256})
		if err != nil {
			t.Fatal(err)
		}
		d := shallowCopy(data)
		if _, err := s.(AdvantageComputer).ComputeAdvantages(d); err != nil {
			t.Fatal(err)
		}
		first, err := s.PrepareBatch(d, BatchOptions{MicroBatchSize: 3, Pad: 256})
		if err != nil {
			t.Fatal(err)
		}
		for i := range alone {
			a, b := alone[i][rollout.KeyAdvantages].Value().([][]float32), first[i][rollout.KeyAdvantages].Value().([][]float32)
			if !sameBits(a, b) {
				t.Errorf("use_precomputed_advantage %t: micro-batch %d: advantages %v from PrepareBatch alone, %v after ComputeAdvantages",
					cfg.Knobs.UsePrecomputedAdvantage, i, a, b)
			}
		}
	}
}

// TestOPDRequiresRewardsOnlyForTheEstimator: the gaps need the teacher's and the sampler's
// log-probs; the estimator the rewards too.
func TestOPDRequiresRewardsOnlyForTheEstimator(t *testing.T) {
	c, err := Get("opd")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Estimator {
		t.Error("opd's contract does not say it computes advantages through the estimators registry")
	}
	if req := c.Requires(opdConfig(true, "ppo")); slices.Contains(req, rollout.KeyRewards) {
		t.Errorf("with use_precomputed_advantage opd requires %v: rewards are not read", req)
	}
	if req := c.Requires(opdConfig(false, "ppo")); !slices.Contains(req, rollout.KeyRewards) || !slices.Contains(req, rollout.KeyTeacherLogProbs) {
		t.Errorf("without use_precomputed_advantage opd requires %v: want rewards and teacher_log_probs", req)
	}
	gae := opdConfig(false, "ppo")
	gae.Knobs.Estimator = "gae"
	if req := c.Requires(gae); !slices.Contains(req, rollout.KeyValues) {
		t.Errorf("with gae opd requires %v: want values", req)
	}
}

// TestPrecomputedAdvantageSource: only a trainable opd role supplies precomputed advantages.
func TestPrecomputedAdvantageSource(t *testing.T) {
	for _, c := range []struct {
		role schema.Role
		want bool
	}{
		{schema.Role{Name: "student", Specialization: "opd", Trainable: true}, true},
		{schema.Role{Name: "teacher", Specialization: "opd"}, false},
		{schema.Role{Name: "actor", Specialization: "actor", Trainable: true}, false},
		{schema.Role{Name: "student", Specialization: "mixed_loss_dagger_opd", Trainable: true}, false},
	} {
		if got := PrecomputedAdvantageSource(c.role); got != c.want {
			t.Errorf("%s (%s, trainable %t): %t, want %t", c.role.Name, c.role.Specialization, c.role.Trainable, got, c.want)
		}
		k := defaultKnobs()
		for _, use := range []bool{false, true} {
			k.UsePrecomputedAdvantage = use
			if got := UsesPrecomputedAdvantages(RoleConfig{Role: c.role, Knobs: k}); got != (c.want && use) {
				t.Errorf("%s (%s) with use_precomputed_advantage %t: uses them %t", c.role.Name, c.role.Specialization, use, got)
			}
		}
	}
}

// TestOPDLoss checks opd's loss on the tiny model against float64 host references: with
// use_precomputed_advantage true and false (different advantages, different losses); the
// clipped ratio at ρ = 1 (sampler log-probs = the model's own) giving importance_sampling's
// loss and gradient exactly; and off the rollout policy the clipped surrogate with
// clip_ratio_low/high from the batch.
//
// On xla (where each of its dozen trainers compiles for seconds) it is skipped: the graphs
// are the cpu backend's, and the loss package checks C.1 = C.4 at ρ = 1 bit for bit.
func TestOPDLoss(t *testing.T) {
	if onXLA() {
		t.Skip("a dozen trainers, each compiled by XLA; checked on the cpu backend")
	}
	m := tinyModel(t, false)
	data := opdRollout(t, 13)
	// The model's own log-probs, and the sampler's: the model's on even rows (ρ = 1), shifted
	// by ±0.3 on odd ones.
	s0, err := New(opdConfig(true, "importance_sampling"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(testBackend(t), s0.(LM), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(data, BatchOptions{Pad: 256}, nil); err != nil {
		t.Fatal(err)
	}
	own := data.Tok[rollout.KeyLogProbs]
	delete(data.Tok, rollout.KeyLogProbs)
	onPolicy := shallowCopy(data)
	onPolicy.Tok[rollout.KeySamplerLogProbs] = own
	offPolicy := shallowCopy(data)
	shifted := make([][]float32, len(own))
	for b, row := range own {
		shifted[b] = slices.Clone(row)
		for i := range row {
			if b%2 == 1 && data.Mask[b][i] != 0 {
				shifted[b][i] += float32(0.3 * float64(1-2*(i%2)))
			}
		}
	}
	offPolicy.Tok[rollout.KeySamplerLogProbs] = shifted

	// step takes steps optimizer steps of cfg's opd on d from the tiny model's initial weights
	// (or on m when given), and returns their results and the model.
	step := func(cfg RoleConfig, d *rollout.Rollout, lr float64, steps int, m *runtime.Model) ([]runtime.StepResult, *runtime.Model) {
		t.Helper()
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d = shallowCopy(d)
		if _, err := s.(AdvantageComputer).ComputeAdvantages(d); err != nil {
			t.Fatal(err)
		}
		mbs, err := s.PrepareBatch(d, BatchOptions{MicroBatchSize: 3, Pad: 256})
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			m = tinyModel(t, false)
		}
		tr, err := runtime.NewTrainer(testBackend(t), m, s.(LM).Loss(),
			runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: lr}})
		if err != nil {
			t.Fatal(err)
		}
		var out []runtime.StepResult
		for range steps {
			res, err := tr.Step(mbs)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res)
		}
		return out, m
	}
	loss1 := func(cfg RoleConfig, d *rollout.Rollout) runtime.StepResult {
		t.Helper()
		res, _ := step(cfg, d, 0, 1, nil)
		return res[0]
	}
	// host is the float64 loss Σ_mask ℓ(ρ, A) of the sampler log-probs in d, with the model's
	// own log-probs and the advantages cfg's opd computes.
	host := func(cfg RoleConfig, d *rollout.Rollout, token func(rho, a float64) float64) float64 {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d = shallowCopy(d)
		if _, err := s.(AdvantageComputer).ComputeAdvantages(d); err != nil {
			t.Fatal(err)
		}
		var sum float64
		for b := range d.Tokens {
			for i, mk := range d.Mask[b] {
				if mk == 0 || i == 0 {
					continue
				}
				rho := math.Exp(float64(own[b][i]) - float64(d.Tok[rollout.KeySamplerLogProbs][b][i]))
				sum += token(rho, float64(d.Tok[rollout.KeyAdvantages][b][i]))
			}
		}
		return sum
	}
	is := func(rho, a float64) float64 { return -rho * a }
	clip := func(eps float64) func(rho, a float64) float64 {
		return func(rho, a float64) float64 { return math.Max(-a*rho, -a*math.Min(math.Max(rho, 1-eps), 1+eps)) }
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-4*(1+math.Abs(want)) }

	withGaps := loss1(opdConfig(true, "importance_sampling"), data).Loss
	withGRPO := loss1(opdConfig(false, "importance_sampling"), data).Loss
	if want := host(opdConfig(true, "importance_sampling"), data, is); !near(withGaps, want) {
		t.Errorf("use_precomputed_advantage: loss %v, host reference %v", withGaps, want)
	}
	if want := host(opdConfig(false, "importance_sampling"), data, is); !near(withGRPO, want) {
		t.Errorf("without use_precomputed_advantage: loss %v, host reference %v", withGRPO, want)
	}
	if withGaps == withGRPO {
		t.Errorf("use_precomputed_advantage true and false give the same loss %v", withGaps)
	}

	// ρ = 1 (a rollout's first pass): the clipped loss is importance_sampling, in value and
	// gradient; one AdamW step from the same weights gives the same model.
	a, ma := step(opdConfig(true, "importance_sampling"), onPolicy, 1e-3, 1, nil)
	b, mb := step(opdConfig(true, "ppo"), onPolicy, 1e-3, 1, nil)
	if a[0].Loss != b[0].Loss || a[0].GradNorm != b[0].GradNorm {
		t.Errorf("at ρ = 1: importance_sampling loss %v (gradient norm %v), clipped %v (%v): want the same",
			a[0].Loss, a[0].GradNorm, b[0].Loss, b[0].GradNorm)
	}
	after := func(m *runtime.Model) float64 {
		res, _ := step(opdConfig(true, "importance_sampling"), onPolicy, 0, 1, m)
		return res[0].Loss
	}
	if la, lb := after(ma), after(mb); la != lb || la == a[0].Loss {
		t.Errorf("after one step at ρ = 1: loss %v (importance_sampling's step), %v (clipped step), from %v: want the same, changed", la, lb, a[0].Loss)
	}

	// Off the rollout policy: the clipped surrogate with the batch's clip bounds.
	for _, eps := range []float64{0.2, 0.1} {
		cfg := opdConfig(true, "ppo")
		cfg.Knobs.ClipRatioLow, cfg.Knobs.ClipRatioHigh = eps, eps
		got := loss1(cfg, offPolicy)
		if want := host(cfg, offPolicy, clip(eps)); !near(got.Loss, want) {
			t.Errorf("ε %g off-policy: loss %v, host reference %v", eps, got.Loss, want)
		}
		if got.Metrics["clipfrac"] == 0 {
			t.Errorf("ε %g off-policy: no token clipped", eps)
		}
	}
	if got, want := loss1(opdConfig(true, "importance_sampling"), offPolicy).Loss, host(opdConfig(true, "importance_sampling"), offPolicy, is); !near(got, want) {
		t.Errorf("importance_sampling off-policy: loss %v, host reference %v", got, want)
	}

	// Each micro-batch carries the clip bounds as inputs (hot-reloadable), and only those of the loss.
	s, _ := New(opdConfig(true, "ppo"))
	mbs, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 3, Pad: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range mbs {
		if v, ok := mb[bClipRatioLow]; !ok || tensors.ToScalar[float32](v) != 0.2 {
			t.Fatalf("micro-batch without clip_ratio_low 0.2: %v", mb[bClipRatioLow])
		}
	}
	s, _ = New(opdConfig(true, "importance_sampling"))
	if mbs, _ = s.PrepareBatch(data, BatchOptions{MicroBatchSize: 3, Pad: 256}); mbs[0][bClipRatioLow] != nil {
		t.Error("importance_sampling's micro-batches carry clip bounds")
	}
}
