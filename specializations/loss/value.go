package loss

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" // the graph DSL reads like the formulas
)

// ValueConfig configures PPO's clipped value loss.
type ValueConfig struct {
	// ClipRange is ε_v: v is clipped to [v_old − ε_v, v_old + ε_v].
	ClipRange float64
	// Unclipped uses ℓ = (v − R)² instead of the clipped form.
	Unclipped bool
}

// ValueLoss is PPO's clipped value loss (Schulman et al., 2017):
// v_c = clip(v, v_old − ε_v, v_old + ε_v), ℓ = max((v − R)², (v_c − R)²), L = ½·agg(ℓ).
// The gradient w.r.t. v is w[b,t]·(v − R) where v is inside the clip interval or
// the unclipped error is the larger one, else 0. values [B,T] receive the gradient;
// oldValues (rollout-time critic) and returns are constants. Metrics: vf_loss,
// vf_clipfrac: masked mean of [(v_c − R)² > (v − R)²]. Aux: token_loss (ℓ).
func ValueLoss(values, oldValues, returns, mask *Node, cfg ValueConfig, r Reducer) (Result, error) {
	if err := checkTokens("value loss", []string{"values", "old_values", "returns", "mask"},
		values, oldValues, returns, mask); err != nil {
		return Result{}, err
	}
	if cfg.ClipRange < 0 {
		return Result{}, fmt.Errorf("value loss: cliprange_value must be >= 0, got %g", cfg.ClipRange)
	}
	v := keep(values, mask)
	old := StopGradient(keep(toDType(oldValues, values), mask))
	ret := StopGradient(keep(toDType(returns, values), mask))
	unclipped := Square(Sub(v, ret))
	tokenLoss := unclipped
	var clipfrac *Node
	if !cfg.Unclipped {
		lo, hi := AddScalar(old, -cfg.ClipRange), AddScalar(old, cfg.ClipRange)
		// Max(v, lo) and Min(·, hi) pass the gradient to v inside the interval and to
		// the constant bound outside it.
		vc := Min(Max(v, lo), hi)
		clippedErr := Square(Sub(vc, ret))
		tokenLoss = Max(unclipped, clippedErr) // a tie goes to the unclipped error
		clipfrac = r.tokenMean(indicator(GreaterThan(clippedErr, unclipped), v), mask)
	} else {
		clipfrac = ZerosLike(ReduceAllSum(v))
	}
	l, err := r.Reduce(tokenLoss, mask)
	if err != nil {
		return Result{}, fmt.Errorf("value loss: %w", err)
	}
	res := newResult(MulScalar(l, 0.5))
	res.Aux["token_loss"] = keep(tokenLoss, mask)
	res.Metrics["vf_clipfrac"] = StopGradient(clipfrac)
	res.Metrics["vf_loss"] = res.Loss
	return res, nil
}
