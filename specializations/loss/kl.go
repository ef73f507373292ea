package loss

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// KLEstimator names a per-token KL estimator (k1, k2, k3 of Schulman, 2020, "Approximating KL divergence").
type KLEstimator string

// The estimators k1, k2, k3 (Schulman, 2020; lp = logp, lq = ref_logp).
const (
	KLK1 KLEstimator = "k1" // lp − lq
	KLK2 KLEstimator = "k2" // ½(lp − lq)²
	KLK3 KLEstimator = "k3" // e^d − d − 1, d = lq − lp ("low_var_kl"), with clamps
)

// GradForm selects which gradient a KL-type term carries (the KL terms and the mixed CE + K3 blend).
type GradForm string

// Gradient forms.
const (
	// GradDirect differentiates the estimator itself ("" means the same).
	GradDirect GradForm = "direct"
	// GradK2 keeps the estimator's value but takes the gradient of k2 = ½(lp − lq)²,
	// the reverse-KL gradient (verl's "k3+": k2 − sg(k2) + sg(k)).
	GradK2 GradForm = "k2"
)

func (f GradForm) check() error {
	switch f {
	case "", GradDirect, GradK2:
		return nil
	}
	return fmt.Errorf("unknown KL gradient form %q (want %q or %q)", f, GradDirect, GradK2)
}

// KLConfig configures a KL estimator.
type KLConfig struct {
	// Estimator is k1, k2 or k3; "" means k3 (verl's default for the KL loss).
	Estimator KLEstimator
	// LogRatioClamp bounds d = lq − lp before the exp of k3; 0 means 20.
	LogRatioClamp float64
	// OutputClamp bounds the value of k3 to [−c, c]; 0 means 10.
	OutputClamp float64
	// Grad is the gradient form (kl_grad): "" / "direct" or "k2".
	Grad GradForm
}

func (c KLConfig) resolved() (KLConfig, error) {
	if c.Estimator == "" {
		c.Estimator = KLK3
	}
	switch c.Estimator {
	case KLK1, KLK2, KLK3:
	default:
		return c, fmt.Errorf("unknown KL estimator %q (want k1, k2 or k3)", c.Estimator)
	}
	if c.LogRatioClamp == 0 {
		c.LogRatioClamp = 20
	}
	if c.OutputClamp == 0 {
		c.OutputClamp = 10
	}
	if c.LogRatioClamp < 0 || c.OutputClamp < 0 {
		return c, fmt.Errorf("KL clamps must be positive, got log-ratio %g, output %g", c.LogRatioClamp, c.OutputClamp)
	}
	return c, c.Grad.check()
}

// KL returns the per-token KL estimate (k1/k2/k3, Schulman, 2020) between the policy log-probs
// logp and the reference log-probs refLogp (any equal shapes). k1 and k2 are
// unclamped; k3 clamps the log-ratio before the exp and its value, and a clamp that
// is active kills the gradient there. The reference side never gets a gradient.
func KL(logp, refLogp *Node, cfg KLConfig) (*Node, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	if !sameDims(logp, refLogp) {
		return nil, fmt.Errorf("KL: logp %s and ref_logp %s differ in shape", logp.Shape(), refLogp.Shape())
	}
	ref := StopGradient(toDType(refLogp, logp))
	diff := Sub(logp, ref)
	k2 := MulScalar(Square(diff), 0.5)
	var k *Node
	switch cfg.Estimator {
	case KLK1:
		k = diff
	case KLK2:
		k = k2
	case KLK3:
		d := clampNoGrad(Neg(diff), -cfg.LogRatioClamp, cfg.LogRatioClamp)
		// expm1(d) − d instead of e^d − d − 1: no cancellation for small d.
		k = clampNoGrad(Sub(expm1(d), d), -cfg.OutputClamp, cfg.OutputClamp)
	}
	if cfg.Grad == GradK2 {
		k = Add(Sub(k2, StopGradient(k2)), StopGradient(k))
	}
	return k, nil
}

// KLLoss is the KL loss term: L_kl = agg(k, mask, mode). The caller
// adds kl_loss_coef·L_kl (see ActorLoss). Metric "kl": masked token mean of k.
func KLLoss(logp, refLogp, mask *Node, cfg KLConfig, r Reducer) (Result, error) {
	if err := checkTokens("kl loss", []string{"logp", "ref_logp", "mask"}, logp, refLogp, mask); err != nil {
		return Result{}, err
	}
	k, err := KL(keep(logp, mask), keep(refLogp, mask), cfg)
	if err != nil {
		return Result{}, fmt.Errorf("kl loss: %w", err)
	}
	l, err := r.Reduce(k, mask)
	if err != nil {
		return Result{}, fmt.Errorf("kl loss: %w", err)
	}
	res := newResult(l)
	res.Metrics["kl"] = r.tokenMean(k, mask)
	res.Aux["kl"] = keep(k, mask)
	return res, nil
}

// KLValue is the host float64 value of the KL estimator for one token.
func KLValue(lp, lq float64, cfg KLConfig) (float64, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return 0, err
	}
	switch cfg.Estimator {
	case KLK1:
		return lp - lq, nil
	case KLK2:
		return 0.5 * (lp - lq) * (lp - lq), nil
	default:
		d := math.Min(math.Max(lq-lp, -cfg.LogRatioClamp), cfg.LogRatioClamp)
		return math.Min(math.Max(math.Expm1(d)-d, -cfg.OutputClamp), cfg.OutputClamp), nil
	}
}

// KLPenaltyRewards folds the KL into the per-token rewards:
// r'[b,t] = r[b,t] − coef·k(old_logp, ref_logp)[b,t], before GAE/returns. cfg.Estimator
// picks k (k1, the log-ratio, is the usual in-reward penalty: Ziegler et al., 2019); cfg.Grad
// is irrelevant on the host. Rewards at masked
// positions are ignored downstream (by GAE), so no mask is needed.
func KLPenaltyRewards(scores, oldLogp, refLogp [][]float64, coef float64, cfg KLConfig) ([][]float64, error) {
	if len(oldLogp) != len(scores) || len(refLogp) != len(scores) {
		return nil, fmt.Errorf("kl reward penalty: %d score rows, %d old_logp rows, %d ref_logp rows",
			len(scores), len(oldLogp), len(refLogp))
	}
	out := make([][]float64, len(scores))
	for b, row := range scores {
		if len(oldLogp[b]) != len(row) || len(refLogp[b]) != len(row) {
			return nil, fmt.Errorf("kl reward penalty: row %d has %d scores, %d old_logp, %d ref_logp",
				b, len(row), len(oldLogp[b]), len(refLogp[b]))
		}
		out[b] = make([]float64, len(row))
		for t, s := range row {
			k, err := KLValue(oldLogp[b][t], refLogp[b][t], cfg)
			if err != nil {
				return nil, fmt.Errorf("kl reward penalty: %w", err)
			}
			out[b][t] = s - coef*k
		}
	}
	return out, nil
}
