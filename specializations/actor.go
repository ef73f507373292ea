package specializations

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations/loss"
)

func init() {
	MustRegister(Contract{
		Name: "actor", Data: DataRL, TISCap: true, Estimator: true,
		Doc: "policy-gradient actor: PPO/GSPO/CISPO/IS/DRO/PG losses (Schulman et al., 2017; Zheng et al., 2025; MiniMax, 2025), KL k1/k2/k3 (Schulman, 2020), entropy",
		Requires: func(c RoleConfig) []string {
			extra := []string{rollout.KeyRewards, rollout.KeySamplerLogProbs}
			if c.Knobs.UseKLLoss || c.Knobs.UseKLInReward {
				extra = append(extra, rollout.KeyRefLogProbs)
			}
			if estimators.NeedsOf(c.Knobs.EstimatorFor(c.Role.Name)).Values {
				extra = append(extra, rollout.KeyValues)
			}
			return withTIS(c, trainOnly(c, lmForward, extra...))
		},
		Produces: func(c RoleConfig) []string { return withRef(c, rollout.KeyLogProbs) },
		New:      func(c RoleConfig) (Specialization, error) { return newActor(c) },
	})
}

// Batch keys of hot-reloadable actor coefficients and clip bounds: scalar graph
// inputs, so a hot edit reaches the compiled loss without recompiling it.
const (
	bKLCoef      = "coef_kl"
	bEntropyCoef = "coef_entropy"
	// clip_ratio_low / clip_ratio_high (ppo, gspo), gspo_seq_logratio_max (gspo),
	// cispo_clip_low / cispo_clip_high (cispo).
	bClipRatioLow       = "clip_ratio_low"
	bClipRatioHigh      = "clip_ratio_high"
	bGSPOSeqLogRatioMax = "gspo_seq_logratio_max"
	bCISPOClipLow       = "cispo_clip_low"
	bCISPOClipHigh      = "cispo_clip_high"
)

// actor is the policy-gradient actor (PPO, Schulman et al., 2017, and its variants): L = L_pg + kl_loss_coef·agg(KL)
// − entropy_coef·agg(H), with L_pg one of ppo (clip-higher, optional dual clip), gspo,
// cispo, importance_sampling, dro (both tinker's) or pg; KL to the reference (k1/k2/k3,
// Schulman, 2020) as a loss term or folded into the reward;
// advantages from the estimators registry (A). The behaviour policy of the ratio is the
// sampler (sampler_log_probs): one pass over fresh rollouts. Metrics: clipfrac, ppo_kl
// (approximate KL to the behaviour policy), ratio_mean/max/min (ppo), pg_loss, entropy,
// kl_loss (with use_kl_loss).
type actor struct {
	lmBase
	policy string
	kl     loss.KLConfig
}

// newActor builds the actor specialization from the role's knobs.
func newActor(cfg RoleConfig) (*actor, error) {
	b, err := newLMBase("actor", cfg)
	if err != nil {
		return nil, err
	}
	b.tempered = true
	a := &actor{lmBase: b, kl: loss.KLConfig{Estimator: loss.KLEstimator(cfg.Knobs.KLEstimator), Grad: loss.GradForm(cfg.Knobs.KLGrad)}}
	if a.policy, err = policyLossOf("actor", cfg.Knobs); err != nil {
		return nil, err
	}
	if _, err := loss.KLValue(0, 0, a.kl); err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	if err := validateClipBounds("actor", a.policy, cfg.Knobs); err != nil {
		return nil, err
	}
	return a, nil
}

// policyLossOf is the knobs' policy_loss ("" is ppo), checked: the policy losses of
// section C that the actor and opd train with.
func policyLossOf(who string, k schema.Knobs) (string, error) {
	switch k.PolicyLoss {
	case "":
		return "ppo", nil
	case "ppo", "gspo", "cispo", "importance_sampling", "dro", "pg":
		return k.PolicyLoss, nil
	}
	return "", fmt.Errorf("%s: unknown policy_loss %q", who, k.PolicyLoss)
}

// estimatorConfig maps the recipe's knobs to the estimator of role c (the actor's, and
// opd's with use_precomputed_advantage false).
func estimatorConfig(c RoleConfig) estimators.Config {
	k := c.Knobs
	ec := estimators.Config{Name: k.EstimatorFor(c.Role.Name), NormByStd: k.NormAdvByStd, Epsilon: k.AdvEpsilon,
		StdDDOF: k.StdDDOF, Gamma: k.Gamma, Lambda: k.Lambda, Whiten: k.WhitenAdvantages,
		WhitenEps: estimators.DefaultWhitenEps, UsePrecomputed: k.UsePrecomputedAdvantage}
	if ec.Name == "" {
		ec.Name = "grpo"
	}
	return ec
}

// ComputeAdvantages runs the role's estimator over data. With use_kl_in_reward
// the k1 KL between the sampler and the reference is folded into the reward first:
// per token for token-level estimators (GAE), summed over the row's trainable tokens for
// outcome estimators. It writes data's advantages (and returns) columns and, with the KL
// penalty, replaces data.Reward or the token_rewards column: pass a copy to keep the
// original.
func (a *actor) ComputeAdvantages(data *rollout.Rollout) ([]string, error) {
	cfg := estimatorConfig(a.cfg)
	if a.cfg.Knobs.UseKLInReward {
		est, err := estimators.Get(cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("actor: %w", err)
		}
		lp, ref := data.Tok[rollout.KeySamplerLogProbs], data.Tok[rollout.KeyRefLogProbs]
		if lp == nil || ref == nil {
			return nil, fmt.Errorf("actor: use_kl_in_reward needs %q and %q", rollout.KeySamplerLogProbs, rollout.KeyRefLogProbs)
		}
		zeros := make([][]float64, data.Len())
		for b := range zeros {
			zeros[b] = make([]float64, len(lp[b]))
		}
		pen, err := loss.KLPenaltyRewards(zeros, tokToFloat64(lp), tokToFloat64(ref), a.cfg.Knobs.KLCoef, loss.KLConfig{Estimator: loss.KLK1})
		if err != nil {
			return nil, fmt.Errorf("actor: %w", err)
		}
		if est.Level() == estimators.Token {
			shaping := make([][]float32, len(pen))
			for b, row := range pen {
				shaping[b] = make([]float32, len(row))
				for t, v := range row {
					old := float32(0)
					if tr := data.Tok[rollout.KeyTokenRewards]; tr != nil {
						old = tr[b][t]
					}
					shaping[b][t] = old + float32(v)*data.Mask[b][t]
				}
			}
			data.Tok[rollout.KeyTokenRewards] = shaping
		} else {
			rewards := make([]float64, data.Len())
			for b, row := range pen {
				rewards[b] = data.Reward[b]
				for t, v := range row {
					rewards[b] += v * float64(data.Mask[b][t])
				}
			}
			data.Reward = rewards
		}
	}
	w, err := estimators.RolloutAdvantages(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	return w, nil
}

// PrepareBatch reads tokens, loss_mask, rewards (through the estimator, unless the rollout
// already holds advantages), sampler_log_probs, ref_log_probs (KL) and values (GAE).
func (a *actor) PrepareBatch(data *rollout.Rollout, opts BatchOptions) ([]map[string]*tensors.Tensor, error) {
	if mbs, done, err := a.frozenOrChecked(data, opts); done {
		return mbs, err
	}
	if _, ok := data.Tok[rollout.KeyAdvantages]; !ok {
		data = shallowCopy(data)
		if _, err := a.ComputeAdvantages(data); err != nil {
			return nil, err
		}
	}
	k := a.cfg.Knobs
	mbs, err := a.lmBatches(data, opts, 1, func(mb map[string]*tensors.Tensor, rows []int) error {
		T := mb[bTokens].Shape().Dimensions[1]
		mb[rollout.KeySamplerLogProbs] = shiftedTok(data.Tok[rollout.KeySamplerLogProbs], rows, T)
		mb[rollout.KeyAdvantages] = shiftedTok(data.Tok[rollout.KeyAdvantages], rows, T)
		addOldLogProbs(mb, data, rows, T, k)
		if k.UseKLLoss {
			mb[rollout.KeyRefLogProbs] = shiftedTok(data.Tok[rollout.KeyRefLogProbs], rows, T)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	setScalar(mbs, bEntropyCoef, k.EntropyCoef)
	if k.UseKLLoss {
		setScalar(mbs, bKLCoef, k.KLLossCoef)
	}
	for key, v := range clipBounds(a.policy, k) {
		setScalar(mbs, key, v)
	}
	return mbs, nil
}

// clipBounds are the policy loss's clip bounds as batch inputs, by batch key; the set of
// keys depends only on policy_loss (a cold knob), so a trainer's batch keys never change.
func clipBounds(policy string, k schema.Knobs) map[string]float64 {
	switch policy {
	case "ppo":
		return map[string]float64{bClipRatioLow: k.ClipRatioLow, bClipRatioHigh: k.ClipRatioHigh}
	case "gspo":
		return map[string]float64{bClipRatioLow: k.ClipRatioLow, bClipRatioHigh: k.ClipRatioHigh,
			bGSPOSeqLogRatioMax: k.GSPOSeqLogRatioMax}
	case "cispo":
		return map[string]float64{bCISPOClipLow: k.CISPOClipLow, bCISPOClipHigh: k.CISPOClipHigh}
	}
	return nil
}

// validateClipBounds checks the bounds the graph cannot check: they enter it as inputs.
func validateClipBounds(who, policy string, k schema.Knobs) error {
	switch policy {
	case "ppo", "gspo":
		if k.ClipRatioLow < 0 || k.ClipRatioHigh < 0 {
			return fmt.Errorf("%s: clip_ratio_low %g and clip_ratio_high %g must be >= 0", who, k.ClipRatioLow, k.ClipRatioHigh)
		}
		if policy == "gspo" && k.GSPOSeqLogRatioMax <= 0 {
			return fmt.Errorf("%s: gspo_seq_logratio_max must be > 0, got %g", who, k.GSPOSeqLogRatioMax)
		}
	case "cispo":
		if k.CISPOClipLow < 0 || k.CISPOClipHigh < k.CISPOClipLow {
			return fmt.Errorf("%s: need 0 <= cispo_clip_low <= cispo_clip_high, got %g, %g", who, k.CISPOClipLow, k.CISPOClipHigh)
		}
	}
	return nil
}

// boundNodes are the clip-bound inputs of batch named by keys, all required.
func boundNodes(who string, batch Batch, keys ...string) ([]*Node, error) {
	nodes := make([]*Node, len(keys))
	for i, key := range keys {
		if nodes[i] = batch[key]; nodes[i] == nil {
			return nil, fmt.Errorf("%s: batch has no %q (clip bounds come from PrepareBatch)", who, key)
		}
	}
	return nodes, nil
}

// bOldLogProbs is the batch key of the policy's log-probs under the weights before the
// step (old_logp), which tis_cap's correction needs.
const bOldLogProbs = "old_log_probs"

// withTIS adds to a trainable role's required keys its own log-probs (produced with its
// current weights before it trains: old_logp) when tis_cap is set.
func withTIS(c RoleConfig, ks []string) []string {
	if c.Knobs.TISCap != nil && c.Role.Trainable {
		return keys(append(ks, rollout.KeyLogProbs)...)
	}
	return ks
}

// addOldLogProbs puts old_logp into micro-batch mb (rows of data, T positions) when
// tis_cap is set.
func addOldLogProbs(mb map[string]*tensors.Tensor, data *rollout.Rollout, rows []int, T int, k schema.Knobs) {
	if k.TISCap != nil {
		mb[bOldLogProbs] = shiftedTok(data.Tok[rollout.KeyLogProbs], rows, T)
	}
}

// policyLoss is the policy loss of section C named by policy over pb, its clip bounds read
// from batch (clipBounds' inputs), reduced with r. With tis_cap, the behaviour policy of
// every loss is the trained policy before the step (old_logp, batch's old_log_probs) and
// each token's loss is weighted by the truncated importance-sampling correction from the
// sampler's policy to it (ALGORITHMS.md C.7; loss.TISWeights), whose metrics it adds.
func policyLoss(who, policy string, k schema.Knobs, pb loss.PolicyBatch, batch Batch, r loss.Reducer) (loss.Result, error) {
	if k.TISCap == nil {
		return basePolicyLoss(who, policy, k, pb, batch, r)
	}
	old := batch[bOldLogProbs]
	if old == nil {
		return loss.Result{}, fmt.Errorf("%s: tis_cap needs %q in the batch (the policy's log-probs before the step)", who, bOldLogProbs)
	}
	w, metrics, err := loss.TISWeights(old, pb.SamplerLogProbs, pb.Mask, *k.TISCap, r)
	if err != nil {
		return loss.Result{}, fmt.Errorf("%s: %w", who, err)
	}
	pb.OldLogProbs, pb.SamplerLogProbs, pb.TokenWeights = old, old, w
	res, err := basePolicyLoss(who, policy, k, pb, batch, r)
	if err != nil {
		return res, err
	}
	for name, m := range metrics {
		res.Metrics[name] = m
	}
	return res, nil
}

// basePolicyLoss is policyLoss without the rollout correction.
func basePolicyLoss(who, policy string, k schema.Knobs, pb loss.PolicyBatch, batch Batch, r loss.Reducer) (loss.Result, error) {
	// The clip bounds are batch inputs, never the knobs the specialization was built
	// with: a trainer keeps the loss it compiled, and a hot-reloaded bound must reach it.
	switch policy {
	case "ppo":
		n, err := boundNodes(who, batch, bClipRatioLow, bClipRatioHigh)
		if err != nil {
			return loss.Result{}, err
		}
		// dual_clip_c stays a constant: turning it on or off changes the graph's shape.
		cfg := loss.PPOConfig{EpsLowNode: n[0], EpsHighNode: n[1]}
		if k.DualClipC != nil {
			cfg.DualClipC = *k.DualClipC
		}
		return loss.PPO(pb, cfg, r)
	case "gspo":
		n, err := boundNodes(who, batch, bClipRatioLow, bClipRatioHigh, bGSPOSeqLogRatioMax)
		if err != nil {
			return loss.Result{}, err
		}
		return loss.GSPO(pb, loss.GSPOConfig{EpsLowNode: n[0], EpsHighNode: n[1], SeqLogRatioMaxNode: n[2]}, r)
	case "cispo":
		n, err := boundNodes(who, batch, bCISPOClipLow, bCISPOClipHigh)
		if err != nil {
			return loss.Result{}, err
		}
		return loss.CISPO(pb, loss.CISPOConfig{ClipLowNode: n[0], ClipHighNode: n[1]}, r)
	case "importance_sampling":
		return loss.ImportanceSampling(pb, 0, r)
	case "dro":
		return loss.DRO(pb, k.DROBeta, r)
	case "pg":
		return loss.PolicyGradient(pb, r)
	}
	return loss.Result{}, fmt.Errorf("%s: unknown policy_loss %q", who, policy)
}

// outEntropy is the Output key of the per-token entropy of the policy's next-token
// distribution (temperature-scaled, as its log-probs).
const outEntropy = "entropy"

// ExtractModelOutput is the policy's log-probs of the target tokens and the entropy of each
// next-token distribution, from one chunked pass over the vocabulary.
func (a *actor) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	if err := a.checkInputs(batch); err != nil {
		return nil, err
	}
	outs := headOutputs(ctx, m, batch, nil, func(z *Node, _ []*Node) []*Node { return []*Node{loss.Entropy(z)} })
	return Output{rollout.KeyLogProbs: outs[0], outEntropy: outs[1]}, nil
}

// ComputeLoss is the full actor objective.
func (a *actor) ComputeLoss(out Output, batch Batch, r loss.Reducer) (*Node, map[string]*Node, error) {
	k := a.cfg.Knobs
	lp, mask := out[rollout.KeyLogProbs], batch[bLossMask]
	pb := loss.PolicyBatch{LogProbs: lp, OldLogProbs: batch[rollout.KeySamplerLogProbs], SamplerLogProbs: batch[rollout.KeySamplerLogProbs],
		Advantages: batch[rollout.KeyAdvantages], Mask: mask}
	pg, err := policyLoss("actor", a.policy, k, pb, batch, r)
	if err != nil {
		return nil, nil, err
	}
	// The entropy's gradient is scaled by its coefficient, a batch input: 0 gives none.
	terms := loss.ActorTerms{Entropy: out[outEntropy], EntropyCoef: batch[bEntropyCoef]}
	if k.UseKLLoss {
		kl, err := loss.KL(lp, batch[rollout.KeyRefLogProbs], a.kl)
		if err != nil {
			return nil, nil, err
		}
		terms.KL, terms.KLCoef = kl, batch[bKLCoef]
	}
	res, err := loss.ActorLoss(pg, terms, mask, r)
	if err != nil {
		return nil, nil, err
	}
	return res.Loss, res.Metrics, nil
}
