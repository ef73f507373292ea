package loss

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// SequenceLogProbs returns, per row of [rows, tokens] per-token log-probs, the
// completion log-prob P = Σ_t mask·logp and the completion length n = Σ_t mask
// (prompt tokens are masked out). Masked positions never leak.
func SequenceLogProbs(logp, mask *Node) (sum, length *Node, err error) {
	if err := checkTokens("sequence log-probs", []string{"logp", "mask"}, logp, mask); err != nil {
		return nil, nil, err
	}
	return ReduceSum(keep(logp, mask), -1), ReduceSum(maskOf(mask, logp), -1), nil
}

// PairBatch holds one value per preference pair ([pairs] vectors).
// Only the policy log-probs receive gradients.
type PairBatch struct {
	PolicyChosen, PolicyRejected *Node // P_c, P_r: completion log-prob sums under the policy
	RefChosen, RefRejected       *Node // R_c, R_r: the same under the reference (DPO family)
	ChosenLengths                *Node // n_c: completion tokens (IPO normalised, SimPO, ORPO)
	RejectedLengths              *Node // n_r
	// Count optionally gives the number of pairs of the whole mini-batch (a scalar):
	// the loss is Σ per-pair loss / Count, so micro-batches add up. nil = this batch's size.
	Count *Node
	// ChosenTokens optionally gives the chosen completion tokens of the whole mini-batch
	// (a scalar), the denominator of the sft term's token mean. nil = Σ ChosenLengths.
	ChosenTokens *Node
}

// pairMean is Σ x / count (0 for an empty batch).
func pairMean(x, count *Node) *Node {
	if count == nil {
		count = scalar(x, float64(x.Shape().Dimensions[0]))
	} else {
		count = StopGradient(toDType(count, x))
	}
	return Mul(ReduceAllSum(x), safeRecip(count))
}

// checkVectors verifies the named nodes are present rank-1 float vectors of one length.
func checkVectors(what string, names []string, nodes ...*Node) error {
	for i, n := range nodes {
		if n == nil {
			return fmt.Errorf("%s: input %q is missing", what, names[i])
		}
		if n.Rank() != 1 || (i == 0 && !n.DType().IsFloat()) {
			return fmt.Errorf("%s: input %q must be a float vector, got %s", what, names[i], n.Shape())
		}
		if !sameDims(n, nodes[0]) {
			return fmt.Errorf("%s: input %q has shape %s, want %v like %q",
				what, names[i], n.Shape(), nodes[0].Shape().Dimensions, names[0])
		}
	}
	return nil
}

// lengthOrOne is n, with 0 replaced by 1 (an empty completion must not divide by 0).
func lengthOrOne(n, like *Node) *Node {
	n = StopGradient(toDType(n, like))
	return Where(GreaterThan(n, ZerosLike(n)), n, OnesLike(n))
}

// DPOType is the per-pair loss of the DPO family (Rafailov et al., 2023; Azar et al., 2023).
type DPOType string

// DPO family losses.
const (
	DPOSigmoid DPOType = "sigmoid" // −log σ(βh); with label smoothing ε: cDPO
	DPOHinge   DPOType = "hinge"   // max(0, 1 − βh) (SLiC)
	DPOIPO     DPOType = "ipo"     // (h' − 1/(2τ))², τ passed as Beta
)

// DPOConfig configures the DPO family.
type DPOConfig struct {
	Type DPOType // "" means sigmoid
	Beta float64 // β (τ for IPO); default 0.1
	// LabelSmoothing is cDPO's ε in [0, 0.5): −(1−ε) log σ(βh) − ε log σ(−βh).
	// Only for the sigmoid loss.
	LabelSmoothing float64
	// IPOSummed uses the paper's summed log-ratios instead of the default
	// per-token-averaged ones (ipo_length_normalize = false).
	IPOSummed bool
}

// DPO is the DPO family (Rafailov et al., 2023) with h = (P_c − R_c) − (P_r − R_r): sigmoid
// (with cDPO label smoothing), hinge and IPO (length-normalised by default, n = 0 →
// 1). Loss = mean over pairs. Metrics: accuracy (mean[h > 0]), margins, chosen_rewards,
// rejected_rewards (means of β(P − R)). Aux: per_pair_loss, logits_h, chosen_rewards,
// rejected_rewards.
func DPO(b PairBatch, cfg DPOConfig) (Result, error) {
	if cfg.Type == "" {
		cfg.Type = DPOSigmoid
	}
	if cfg.Beta <= 0 {
		return Result{}, fmt.Errorf("dpo: beta must be > 0, got %g", cfg.Beta)
	}
	if cfg.LabelSmoothing < 0 || cfg.LabelSmoothing >= 0.5 {
		return Result{}, fmt.Errorf("dpo: label_smoothing must be in [0, 0.5), got %g", cfg.LabelSmoothing)
	}
	if cfg.LabelSmoothing != 0 && cfg.Type != DPOSigmoid {
		return Result{}, fmt.Errorf("dpo: label_smoothing only applies to the sigmoid loss, not %q", cfg.Type)
	}
	names := []string{"policy_chosen_logps", "policy_rejected_logps", "ref_chosen_logps", "ref_rejected_logps"}
	nodes := []*Node{b.PolicyChosen, b.PolicyRejected, b.RefChosen, b.RefRejected}
	if cfg.Type == DPOIPO && !cfg.IPOSummed {
		names = append(names, "chosen_lengths", "rejected_lengths")
		nodes = append(nodes, b.ChosenLengths, b.RejectedLengths)
	}
	if err := checkVectors("dpo", names, nodes...); err != nil {
		return Result{}, err
	}
	pc := b.PolicyChosen
	pr := toDType(b.PolicyRejected, pc)
	chosenRatio := Sub(pc, StopGradient(toDType(b.RefChosen, pc)))
	rejectedRatio := Sub(pr, StopGradient(toDType(b.RefRejected, pc)))
	h := Sub(chosenRatio, rejectedRatio)
	var perPair *Node
	switch cfg.Type {
	case DPOSigmoid:
		z := MulScalar(h, cfg.Beta)
		perPair = Neg(logSigmoid(z))
		if eps := cfg.LabelSmoothing; eps != 0 {
			perPair = Sub(MulScalar(perPair, 1-eps), MulScalar(logSigmoid(Neg(z)), eps))
		}
	case DPOHinge:
		perPair = Max(OneMinus(MulScalar(h, cfg.Beta)), ZerosLike(h))
	case DPOIPO:
		hIPO := h
		if !cfg.IPOSummed {
			hIPO = Sub(Div(chosenRatio, lengthOrOne(b.ChosenLengths, pc)),
				Div(rejectedRatio, lengthOrOne(b.RejectedLengths, pc)))
		}
		perPair = Square(AddScalar(hIPO, -1/(2*cfg.Beta)))
	default:
		return Result{}, fmt.Errorf("dpo: unknown loss_type %q (want sigmoid, hinge or ipo)", cfg.Type)
	}
	res := newResult(pairMean(perPair, b.Count))
	chosenRewards := StopGradient(MulScalar(chosenRatio, cfg.Beta))
	rejectedRewards := StopGradient(MulScalar(rejectedRatio, cfg.Beta))
	res.Aux["per_pair_loss"] = perPair
	res.Aux["logits_h"] = StopGradient(h)
	res.Aux["chosen_rewards"] = chosenRewards
	res.Aux["rejected_rewards"] = rejectedRewards
	res.Metrics["accuracy"] = pairMean(indicator(GreaterThan(h, ZerosLike(h)), h), b.Count)
	res.Metrics["margins"] = pairMean(Sub(chosenRewards, rejectedRewards), b.Count)
	res.Metrics["chosen_rewards"] = pairMean(chosenRewards, b.Count)
	res.Metrics["rejected_rewards"] = pairMean(rejectedRewards, b.Count)
	return res, nil
}

// SimPOConfig configures SimPO (Meng et al., 2024).
type SimPOConfig struct {
	Beta           float64 // β, default 2.0
	Gamma          float64 // γ, the absolute margin (= β·gamma_beta_ratio), default 1.0
	LabelSmoothing float64 // ε in [0, 0.5), as in cDPO; default 0
}

// SimPO is the reference-free, length-normalised loss of SimPO (Meng et al., 2024):
// z = β(P̄_c − P̄_r) − γ with P̄ = P/n (n = 0 → 1), ℓ = −(1−ε) log σ(z) − ε log σ(−z).
// The reference fields of the batch are not used. Metrics: accuracy (mean[P̄_c > P̄_r]),
// margins (mean β(P̄_c − P̄_r)). Aux: per_pair_loss, avg_chosen_logp, avg_rejected_logp.
func SimPO(b PairBatch, cfg SimPOConfig) (Result, error) {
	if cfg.Beta <= 0 || cfg.LabelSmoothing < 0 || cfg.LabelSmoothing >= 0.5 {
		return Result{}, fmt.Errorf("simpo: need beta > 0 and label_smoothing in [0, 0.5), got %g, %g",
			cfg.Beta, cfg.LabelSmoothing)
	}
	if err := checkVectors("simpo", []string{"policy_chosen_logps", "policy_rejected_logps", "chosen_lengths", "rejected_lengths"},
		b.PolicyChosen, b.PolicyRejected, b.ChosenLengths, b.RejectedLengths); err != nil {
		return Result{}, err
	}
	pc := b.PolicyChosen
	avgC := Div(pc, lengthOrOne(b.ChosenLengths, pc))
	avgR := Div(toDType(b.PolicyRejected, pc), lengthOrOne(b.RejectedLengths, pc))
	margin := MulScalar(Sub(avgC, avgR), cfg.Beta)
	z := AddScalar(margin, -cfg.Gamma)
	perPair := Neg(logSigmoid(z))
	if eps := cfg.LabelSmoothing; eps != 0 {
		perPair = Sub(MulScalar(perPair, 1-eps), MulScalar(logSigmoid(Neg(z)), eps))
	}
	res := newResult(pairMean(perPair, b.Count))
	res.Aux["per_pair_loss"] = perPair
	res.Aux["avg_chosen_logp"] = StopGradient(avgC)
	res.Aux["avg_rejected_logp"] = StopGradient(avgR)
	res.Metrics["accuracy"] = pairMean(indicator(GreaterThan(avgC, avgR), avgC), b.Count)
	res.Metrics["margins"] = StopGradient(pairMean(margin, b.Count))
	return res, nil
}

// orpoMaxAvgLogp keeps P̄ < 0 so that log(1 − e^P̄) is finite.
const orpoMaxAvgLogp = -1e-7

// ORPO is the reference-free odds-ratio loss of ORPO (Hong et al., 2024):
// LO = (P̄_c − P̄_r) − (log(1 − e^{P̄_c}) − log(1 − e^{P̄_r})), ℓ = −P̄_c − λ·log σ(LO),
// with P̄ = P/n clamped to ≤ −1e-7 and log(1 − e^a) computed stably. The NLL term is
// the token-mean NLL of the chosen completion only. Metrics: accuracy
// (mean[P̄_c > P̄_r]), log_odds_ratio, nll_loss. Aux: per_pair_loss, log_odds, nll_chosen.
func ORPO(b PairBatch, lambda float64) (Result, error) {
	if lambda < 0 {
		return Result{}, fmt.Errorf("orpo: lambda must be >= 0, got %g", lambda)
	}
	if err := checkVectors("orpo", []string{"policy_chosen_logps", "policy_rejected_logps", "chosen_lengths", "rejected_lengths"},
		b.PolicyChosen, b.PolicyRejected, b.ChosenLengths, b.RejectedLengths); err != nil {
		return Result{}, err
	}
	pc := b.PolicyChosen
	avgC := MinScalar(Div(pc, lengthOrOne(b.ChosenLengths, pc)), orpoMaxAvgLogp)
	avgR := MinScalar(Div(toDType(b.PolicyRejected, pc), lengthOrOne(b.RejectedLengths, pc)), orpoMaxAvgLogp)
	logOdds := Sub(Sub(avgC, avgR), Sub(log1mexp(avgC), log1mexp(avgR)))
	nll := Neg(avgC)
	perPair := Sub(nll, MulScalar(logSigmoid(logOdds), lambda))
	res := newResult(pairMean(perPair, b.Count))
	res.Aux["per_pair_loss"] = perPair
	res.Aux["log_odds"] = StopGradient(logOdds)
	res.Aux["nll_chosen"] = StopGradient(nll)
	res.Metrics["accuracy"] = pairMean(indicator(GreaterThan(avgC, avgR), avgC), b.Count)
	res.Metrics["log_odds_ratio"] = StopGradient(pairMean(logOdds, b.Count))
	res.Metrics["nll_loss"] = StopGradient(pairMean(nll, b.Count))
	return res, nil
}

// KTOBatch holds one value per example ([examples] vectors) for KTO.
type KTOBatch struct {
	PolicyLogps, RefLogps *Node // P_i, R_i of each example's own completion
	Desirable             *Node // 1 = desirable (D), 0 = undesirable (U)
	// KLPolicyLogps, KLRefLogps are P'_j, R'_j of mismatched (prompt, other
	// completion) pairs (trl: cyclic shift by one), used for z0.
	KLPolicyLogps, KLRefLogps *Node
	// Z0 optionally overrides the in-batch z0 (e.g. averaged across ranks or
	// micro-batches on the host); it is detached either way.
	Z0 *Node
	// Count optionally gives the number of examples of the whole mini-batch.
	Count *Node
}

// KTOConfig configures KTO.
type KTOConfig struct {
	Beta              float64 // β, default 0.1
	DesirableWeight   float64 // λ_D, default 1
	UndesirableWeight float64 // λ_U, default 1
}

// KTO is the loss of Ethayarajh et al. (2024): ρ_i = P_i − R_i, z0 = sg(max(0, mean_j(P'_j − R'_j))),
// ℓ_i = λ_D(1 − σ(β(ρ_i − z0))) for desirable and λ_U(1 − σ(β(z0 − ρ_i))) for
// undesirable examples; loss = mean over all examples (empty → 0). Keep
// λ_D·n_D/(λ_U·n_U) in [1, 4/3] (the caller's concern). Metrics: z0. Aux:
// per_example_loss.
func KTO(b KTOBatch, cfg KTOConfig) (Result, error) {
	if cfg.Beta <= 0 || cfg.DesirableWeight < 0 || cfg.UndesirableWeight < 0 {
		return Result{}, fmt.Errorf("kto: need beta > 0 and weights >= 0, got %g, %g, %g",
			cfg.Beta, cfg.DesirableWeight, cfg.UndesirableWeight)
	}
	if err := checkVectors("kto", []string{"policy_logps", "ref_logps", "is_desirable"},
		b.PolicyLogps, b.RefLogps, b.Desirable); err != nil {
		return Result{}, err
	}
	p := b.PolicyLogps
	var z0 *Node
	if b.Z0 != nil {
		z0 = StopGradient(toDType(b.Z0, p))
	} else {
		if err := checkVectors("kto", []string{"kl_policy_logps", "kl_ref_logps"}, b.KLPolicyLogps, b.KLRefLogps); err != nil {
			return Result{}, err
		}
		klRatio := Sub(toDType(b.KLPolicyLogps, p), toDType(b.KLRefLogps, p))
		z0 = StopGradient(MaxScalar(pairMean(klRatio, nil), 0))
	}
	rho := Sub(p, StopGradient(toDType(b.RefLogps, p)))
	shifted := MulScalar(Sub(rho, z0), cfg.Beta)
	desirable := MulScalar(Sigmoid(Neg(shifted)), cfg.DesirableWeight)
	undesirable := MulScalar(Sigmoid(shifted), cfg.UndesirableWeight)
	perExample := Where(asMask(b.Desirable), desirable, undesirable)
	res := newResult(pairMean(perExample, b.Count))
	res.Aux["per_example_loss"] = perExample
	res.Metrics["z0"] = z0
	return res, nil
}

// RewardPairBatch holds the scalar rewards of a reward model on preference pairs.
type RewardPairBatch struct {
	Chosen, Rejected *Node // r_c, r_r ([pairs]); both receive gradients
	Margin           *Node // optional m per pair (default 0)
	Count            *Node // optional number of pairs of the whole mini-batch
}

// BradleyTerry is the Bradley–Terry reward-model loss (Ouyang et al., 2022): ℓ = −log σ(r_c − r_r − m),
// plus centerCoef·(r_c + r_r)² per pair when centerCoef > 0 (trl's
// center_rewards_coef); loss = mean over pairs. Metric: accuracy (mean[r_c > r_r]).
// Aux: per_pair_loss.
func BradleyTerry(b RewardPairBatch, centerCoef float64) (Result, error) {
	if centerCoef < 0 {
		return Result{}, fmt.Errorf("bradley-terry: center_rewards_coef must be >= 0, got %g", centerCoef)
	}
	names, nodes := []string{"reward_chosen", "reward_rejected"}, []*Node{b.Chosen, b.Rejected}
	if b.Margin != nil {
		names, nodes = append(names, "margin"), append(nodes, b.Margin)
	}
	if err := checkVectors("bradley-terry", names, nodes...); err != nil {
		return Result{}, err
	}
	rc := b.Chosen
	rr := toDType(b.Rejected, rc)
	diff := Sub(rc, rr)
	z := diff
	if b.Margin != nil {
		z = Sub(z, StopGradient(toDType(b.Margin, rc)))
	}
	perPair := Neg(logSigmoid(z))
	if centerCoef > 0 {
		perPair = Add(perPair, MulScalar(Square(Add(rc, rr)), centerCoef))
	}
	res := newResult(pairMean(perPair, b.Count))
	res.Aux["per_pair_loss"] = perPair
	res.Metrics["accuracy"] = pairMean(indicator(GreaterThan(diff, ZerosLike(diff)), diff), b.Count)
	return res, nil
}
