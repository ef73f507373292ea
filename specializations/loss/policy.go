package loss

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// PolicyBatch holds the [rows, tokens] tensors of a policy loss (PPO and
// its variants). Only LogProbs receives a gradient; every other input is treated as a
// constant. Which of OldLogProbs / SamplerLogProbs is needed depends on the loss.
type PolicyBatch struct {
	LogProbs        *Node // logp under the policy being trained
	OldLogProbs     *Node // old_logp: behaviour/proximal policy (PPO, GSPO, CISPO)
	SamplerLogProbs *Node // sampler_logp: inference engine's log-probs (importance_sampling, DRO)
	Advantages      *Node // A[b,t]
	Mask            *Node // 1 = token receives loss
	// TokenWeights optionally multiplies ℓ[b,t] before aggregation, without gradient: the
	// place for a rollout-correction weight such as truncated importance sampling's
	// sg(min(exp(old_logp − sampler_logp), tis_cap)).
	TokenWeights *Node
}

// policyInputs are the batch's tensors, validated and with masked positions zeroed.
type policyInputs struct {
	lp, old, sampler, adv, mask, weights *Node
}

func (b PolicyBatch) prepare(what string, needOld, needSampler bool) (policyInputs, error) {
	names := []string{"logp", "advantages", "mask"}
	nodes := []*Node{b.LogProbs, b.Advantages, b.Mask}
	if needOld {
		names, nodes = append(names, "old_logp"), append(nodes, b.OldLogProbs)
	}
	if needSampler {
		names, nodes = append(names, "sampler_logp"), append(nodes, b.SamplerLogProbs)
	}
	if b.TokenWeights != nil {
		names, nodes = append(names, "token_weights"), append(nodes, b.TokenWeights)
	}
	if err := checkTokens(what, names, nodes...); err != nil {
		return policyInputs{}, err
	}
	// Zeroing masked positions keeps padding garbage (e.g. −Inf log-probs) out of
	// both the value and the gradient.
	constant := func(x *Node) *Node {
		if x == nil {
			return nil
		}
		return StopGradient(keep(toDType(x, b.LogProbs), b.Mask))
	}
	return policyInputs{
		lp:      keep(b.LogProbs, b.Mask),
		old:     constant(b.OldLogProbs),
		sampler: constant(b.SamplerLogProbs),
		adv:     constant(b.Advantages),
		mask:    b.Mask,
		weights: constant(b.TokenWeights),
	}, nil
}

// finish weights and reduces the token loss and fills the common outputs.
func (p policyInputs) finish(what string, tokenLoss *Node, r Reducer) (Result, error) {
	weighted := tokenLoss
	if p.weights != nil {
		weighted = Mul(tokenLoss, p.weights)
	}
	l, err := r.Reduce(weighted, p.mask)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", what, err)
	}
	res := newResult(l)
	res.Aux["token_loss"] = keep(tokenLoss, p.mask)
	return res, nil
}

// ratio is ρ = exp(clip(logp − old, −c, c)) (the ratio the policy losses share): a clamped
// log-ratio gives a finite ρ and no gradient.
func ratio(lp, old *Node, clamp float64) *Node {
	return Exp(clampNoGrad(Sub(lp, old), -clamp, clamp))
}

// bound is a clip bound in x's dtype: node when set (a scalar batch input, which the
// host can change between steps without recompiling the graph), else the constant v.
func bound(x, node *Node, v float64) *Node {
	if node != nil {
		return toDType(node, x)
	}
	return scalar(x, v)
}

// oneMinus and onePlus turn an ε bound into the clip interval's 1 − ε and 1 + ε; the
// constant form folds them on the host, as before nodes were accepted.
func oneMinus(x, eps *Node, v float64) *Node {
	if eps != nil {
		return Sub(scalar(x, 1), toDType(eps, x))
	}
	return scalar(x, 1-v)
}

func onePlus(x, eps *Node, v float64) *Node {
	if eps != nil {
		return AddScalar(toDType(eps, x), 1)
	}
	return scalar(x, 1+v)
}

// checkScalars reports a bound node that is not a scalar.
func checkScalars(what string, names []string, nodes ...*Node) error {
	for i, n := range nodes {
		if n != nil && n.Rank() != 0 {
			return fmt.Errorf("%s: %s must be a scalar, got shape %s", what, names[i], n.Shape())
		}
	}
	return nil
}

// clampNodes is clampNoGrad with bounds given as (scalar) nodes.
func clampNodes(x, lo, hi *Node) *Node { return Min(Max(x, lo), hi) }

// ratioStats adds ratio_mean (a masked-mean contribution), ratio_max and ratio_min
// (over this micro-batch; 0 when it has no token) to the metrics.
func (p policyInputs) ratioStats(res Result, rho *Node, r Reducer) {
	res.Metrics["ratio_mean"] = r.tokenMean(rho, p.mask)
	nonEmpty := GreaterThan(ReduceAllSum(maskOf(p.mask, rho)), ScalarZero(rho.Graph(), rho.DType()))
	// ρ > 0, so zeros at masked positions never win the max of a non-empty batch.
	res.Metrics["ratio_max"] = StopGradient(ReduceAllMax(keep(rho, p.mask)))
	big := Where(asMask(p.mask), rho, AddScalar(StopGradient(ReduceAllMax(rho)), 1))
	res.Metrics["ratio_min"] = StopGradient(Where(nonEmpty, ReduceAllMin(big), ScalarZero(rho.Graph(), rho.DType())))
}

// PPOConfig configures the clipped surrogate of PPO (Schulman et al., 2017).
type PPOConfig struct {
	EpsLow  float64 // ε_low: lower clip 1 − ε_low
	EpsHigh float64 // ε_high: upper clip 1 + ε_high (DAPO clip-higher: 0.28)
	// DualClipC is the dual-clip cap c > 1 for A < 0; 0 disables it (the default:
	// dual clip is opt-in, c = 3 when on).
	DualClipC float64
	// LogRatioClamp bounds logp − old_logp before the exp; 0 means 20.
	LogRatioClamp float64
	// EpsLowNode and EpsHighNode, when set, are scalar nodes used instead of EpsLow and
	// EpsHigh: clip ranges fed as batch inputs can be hot-reloaded without recompiling
	// the loss. Their values are not checked in the graph; the caller validates them.
	EpsLowNode, EpsHighNode *Node
}

func (c PPOConfig) resolved() (PPOConfig, error) {
	if c.LogRatioClamp == 0 {
		c.LogRatioClamp = 20
	}
	if err := checkScalars("ppo", []string{"eps_low", "eps_high"}, c.EpsLowNode, c.EpsHighNode); err != nil {
		return c, err
	}
	if c.EpsLow < 0 || c.EpsHigh < 0 || c.LogRatioClamp < 0 {
		return c, fmt.Errorf("ppo: eps_low %g, eps_high %g and log-ratio clamp %g must be >= 0",
			c.EpsLow, c.EpsHigh, c.LogRatioClamp)
	}
	if c.DualClipC != 0 && c.DualClipC <= 1 {
		return c, fmt.Errorf("ppo: dual_clip_c must be > 1 (or 0 = off), got %g", c.DualClipC)
	}
	return c, nil
}

// PPO is the clipped surrogate of PPO (Schulman et al., 2017) with clip-higher and optional dual
// clip: ℓ = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)), and for A < 0 with dual clip
// ℓ = min(ℓ, −A·c). The gradient is −A·ρ where the unclipped branch is the max and
// the dual cap is inactive, 0 elsewhere. Metrics: clipfrac, clipfrac_lower (with
// dual clip), ppo_kl, ratio_mean/max/min. Aux: token_loss, ratio.
func PPO(b PolicyBatch, cfg PPOConfig, r Reducer) (Result, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return Result{}, err
	}
	p, err := b.prepare("ppo", true, false)
	if err != nil {
		return Result{}, err
	}
	rho := ratio(p.lp, p.old, cfg.LogRatioClamp)
	negA := Neg(p.adv)
	l1 := Mul(negA, rho)
	l2 := Mul(negA, clampNodes(rho, oneMinus(rho, cfg.EpsLowNode, cfg.EpsLow), onePlus(rho, cfg.EpsHighNode, cfg.EpsHigh)))
	// Max routes a tie (ρ inside the interval, where l1 = l2) to l1: gradient −A·ρ.
	clipped := Max(l1, l2)
	tokenLoss := clipped
	var lowerClipped *Node
	if cfg.DualClipC != 0 {
		dualCap := MulScalar(negA, cfg.DualClipC)
		negAdv := LessThan(p.adv, ZerosLike(p.adv))
		tokenLoss = Where(negAdv, Min(clipped, dualCap), clipped)
		lowerClipped = LogicalAnd(negAdv, LessThan(dualCap, clipped))
	}
	res, err := p.finish("ppo", tokenLoss, r)
	if err != nil {
		return Result{}, err
	}
	res.Aux["ratio"] = keep(rho, p.mask)
	res.Metrics["clipfrac"] = r.tokenMean(indicator(GreaterThan(l2, l1), rho), p.mask)
	if lowerClipped != nil {
		res.Metrics["clipfrac_lower"] = r.tokenMean(indicator(lowerClipped, rho), p.mask)
	}
	res.Metrics["ppo_kl"] = StopGradient(r.tokenMean(Sub(p.old, p.lp), p.mask))
	p.ratioStats(res, rho, r)
	return res, nil
}

// GSPOConfig configures the sequence-level ratio loss of GSPO (Zheng et al., 2025).
type GSPOConfig struct {
	EpsLow, EpsHigh float64 // clip interval [1 − ε_low, 1 + ε_high] (paper: 3e-4, 4e-4)
	// SeqLogRatioMax caps the mean log-ratio before the exp; 0 means 10.
	SeqLogRatioMax float64
	// EpsLowNode, EpsHighNode and SeqLogRatioMaxNode, when set, are scalar nodes used
	// instead of the float fields (hot-reloadable batch inputs; see PPOConfig).
	EpsLowNode, EpsHighNode, SeqLogRatioMaxNode *Node
}

// GSPO is the sequence-level clipped surrogate (Zheng et al., 2025):
// s_b = exp(min(masked mean_t(logp − old_logp), max)), s[b,t] = sg(s_b)·exp(logp − sg(logp)),
// ℓ = max(−A·s, −A·clip(s, 1−ε_low, 1+ε_high)). The gradient w.r.t. logp[b,t] is
// w[b,t]·(−A·s_b) where the unclipped branch is the max, else 0. Metrics: clipfrac,
// ppo_kl. Aux: token_loss, seq_ratio ([rows]; 1 for empty rows).
func GSPO(b PolicyBatch, cfg GSPOConfig, r Reducer) (Result, error) {
	if cfg.SeqLogRatioMax == 0 {
		cfg.SeqLogRatioMax = 10
	}
	if cfg.EpsLow < 0 || cfg.EpsHigh < 0 {
		return Result{}, fmt.Errorf("gspo: eps_low %g and eps_high %g must be >= 0", cfg.EpsLow, cfg.EpsHigh)
	}
	if err := checkScalars("gspo", []string{"eps_low", "eps_high", "seq_logratio_max"},
		cfg.EpsLowNode, cfg.EpsHighNode, cfg.SeqLogRatioMaxNode); err != nil {
		return Result{}, err
	}
	p, err := b.prepare("gspo", true, false)
	if err != nil {
		return Result{}, err
	}
	m := maskOf(p.mask, p.lp)
	n := MaxScalar(ReduceSum(m, -1), 1)
	meanLR := Div(ReduceSum(keep(Sub(p.lp, p.old), p.mask), -1), n)
	seqRatio := StopGradient(Exp(Min(meanLR, bound(meanLR, cfg.SeqLogRatioMaxNode, cfg.SeqLogRatioMax))))
	// exp(logp − sg(logp)) is 1 in value and carries ∂/∂logp = 1 per token.
	s := Mul(InsertAxes(seqRatio, -1), Exp(Sub(p.lp, StopGradient(p.lp))))
	negA := Neg(p.adv)
	l1 := Mul(negA, s)
	l2 := Mul(negA, clampNodes(s, oneMinus(s, cfg.EpsLowNode, cfg.EpsLow), onePlus(s, cfg.EpsHighNode, cfg.EpsHigh)))
	tokenLoss := Max(l1, l2)
	res, err := p.finish("gspo", tokenLoss, r)
	if err != nil {
		return Result{}, err
	}
	res.Aux["seq_ratio"] = seqRatio
	res.Metrics["clipfrac"] = r.tokenMean(indicator(GreaterThan(l2, l1), s), p.mask)
	res.Metrics["ppo_kl"] = StopGradient(r.tokenMean(Sub(p.old, p.lp), p.mask))
	return res, nil
}

// CISPOConfig configures CISPO (MiniMax, 2025). The bounds are absolute (lo = 1 − ε_low,
// hi = 1 + ε_high in the ε form).
type CISPOConfig struct {
	ClipLow, ClipHigh float64
	// LogRatioClamp bounds logp − old_logp before the exp; 0 means 20.
	LogRatioClamp float64
	// ClipLowNode and ClipHighNode, when set, are scalar nodes used instead of ClipLow
	// and ClipHigh (hot-reloadable batch inputs; see PPOConfig).
	ClipLowNode, ClipHighNode *Node
}

// CISPO is the clipped-IS-weight loss (MiniMax, 2025): ℓ = −sg(clip(ρ, lo, hi))·A·logp,
// whose gradient −clip(ρ)·A is never zeroed. The value depends on the absolute
// log-prob and only its gradient is meaningful. Metrics: clipfrac (clip(ρ) ≠ ρ),
// ppo_kl, ratio stats. Aux: token_loss, clipped_ratio.
func CISPO(b PolicyBatch, cfg CISPOConfig, r Reducer) (Result, error) {
	if cfg.LogRatioClamp == 0 {
		cfg.LogRatioClamp = 20
	}
	// Only the float bounds in use are checked: a node's value is the caller's to validate.
	switch {
	case cfg.ClipLowNode == nil && cfg.ClipLow < 0:
		return Result{}, fmt.Errorf("cispo: clip_low must be >= 0, got %g", cfg.ClipLow)
	case cfg.ClipLowNode == nil && cfg.ClipHighNode == nil && cfg.ClipHigh < cfg.ClipLow:
		return Result{}, fmt.Errorf("cispo: need 0 <= clip_low <= clip_high, got %g, %g", cfg.ClipLow, cfg.ClipHigh)
	}
	if err := checkScalars("cispo", []string{"clip_low", "clip_high"}, cfg.ClipLowNode, cfg.ClipHighNode); err != nil {
		return Result{}, err
	}
	p, err := b.prepare("cispo", true, false)
	if err != nil {
		return Result{}, err
	}
	rho := StopGradient(ratio(p.lp, p.old, cfg.LogRatioClamp))
	clipped := clampNodes(rho, bound(rho, cfg.ClipLowNode, cfg.ClipLow), bound(rho, cfg.ClipHighNode, cfg.ClipHigh))
	tokenLoss := Neg(Mul(Mul(clipped, p.adv), p.lp))
	res, err := p.finish("cispo", tokenLoss, r)
	if err != nil {
		return Result{}, err
	}
	res.Aux["clipped_ratio"] = keep(clipped, p.mask)
	res.Metrics["clipfrac"] = r.tokenMean(indicator(NotEqual(clipped, rho), rho), p.mask)
	res.Metrics["ppo_kl"] = StopGradient(r.tokenMean(Sub(p.old, p.lp), p.mask))
	p.ratioStats(res, rho, r)
	return res, nil
}

// ImportanceSampling is tinker's importance_sampling loss:
// ℓ = −exp(logp − sampler_logp)·A, no clipping of ρ (the log-ratio is only clamped at
// ±logRatioClamp, 0 meaning 20, to keep exp finite). tinker's aggregation
// for it is sum. Aux: token_loss, ratio.
//
// It is meant for on-policy data (ρ = 1: REINFORCE). Off-policy — a second pass over a
// rollout — nothing bounds −ρ·A; PPO with OldLogProbs = SamplerLogProbs is its clipped form,
// equal to it in value and gradient at ρ = 1 (ALGORITHMS.md C.4, F.2).
func ImportanceSampling(b PolicyBatch, logRatioClamp float64, r Reducer) (Result, error) {
	if logRatioClamp == 0 {
		logRatioClamp = 20
	}
	p, err := b.prepare("importance_sampling", false, true)
	if err != nil {
		return Result{}, err
	}
	rho := ratio(p.lp, p.sampler, logRatioClamp)
	res, err := p.finish("importance_sampling", Neg(Mul(rho, p.adv)), r)
	if err != nil {
		return Result{}, err
	}
	res.Aux["ratio"] = keep(rho, p.mask)
	p.ratioStats(res, StopGradient(rho), r)
	return res, nil
}

// DRO is tinker's DRO loss: ℓ = −(logp·A − ½·β·(logp − sampler_logp)²),
// ∂ℓ/∂logp = −A + β·(logp − sampler_logp). tinker's aggregation is sum.
// Aux: token_loss.
func DRO(b PolicyBatch, beta float64, r Reducer) (Result, error) {
	if beta < 0 {
		return Result{}, fmt.Errorf("dro: beta must be >= 0, got %g", beta)
	}
	p, err := b.prepare("dro", false, true)
	if err != nil {
		return Result{}, err
	}
	diff := Sub(p.lp, p.sampler)
	tokenLoss := Neg(Sub(Mul(p.lp, p.adv), MulScalar(Square(diff), 0.5*beta)))
	return p.finish("dro", tokenLoss, r)
}

// PolicyGradient is the plain policy gradient (REINFORCE, Williams, 1992): ℓ = −A·logp.
// Aux: token_loss.
func PolicyGradient(b PolicyBatch, r Reducer) (Result, error) {
	p, err := b.prepare("pg", false, false)
	if err != nil {
		return Result{}, err
	}
	return p.finish("pg", Neg(Mul(p.adv, p.lp)), r)
}

// TISWeights is the truncated importance-sampling weight of the rollout correction
// (ALGORITHMS.md C.7; verl's and slime's TIS): w[b,t] = sg(min(exp(old_logp − sampler_logp),
// tisCap)), which corrects tokens drawn by the sampler (another engine, or weights some
// versions old) towards the trained policy before the step. The log-ratio is clamped at
// ±20 before the exp; masked positions get 0. Metrics: tis_weight_mean (token mean of w),
// tis_clipfrac (the share of tokens whose weight the cap truncated) and tis_rollout_kl (token
// mean of sampler_logp − old_logp, the k1 estimate of KL(sampler ‖ policy)).
func TISWeights(old, sampler, mask *Node, tisCap float64, r Reducer) (*Node, map[string]*Node, error) {
	if !(tisCap > 0) {
		return nil, nil, fmt.Errorf("tis: tis_cap must be > 0, got %g", tisCap)
	}
	if err := checkTokens("tis", []string{"old_logp", "sampler_logp", "mask"}, old, sampler, mask); err != nil {
		return nil, nil, err
	}
	old = StopGradient(keep(old, mask))
	sampler = StopGradient(keep(toDType(sampler, old), mask))
	rho := ratio(old, sampler, 20)
	w := keep(MinScalar(rho, tisCap), mask)
	m := map[string]*Node{
		"tis_weight_mean": r.tokenMean(w, mask),
		"tis_clipfrac":    r.tokenMean(indicator(GreaterThan(rho, scalar(rho, tisCap)), rho), mask),
		"tis_rollout_kl":  r.tokenMean(Sub(sampler, old), mask),
	}
	return StopGradient(w), m, nil
}
