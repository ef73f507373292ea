package estimators

import (
	"fmt"
	"math"
)

// OPO is the name of the optimal-baseline estimator.
const OPO = "opo"

func init() {
	MustRegister(WithNeeds(NewOutcomeEstimator(OPO, func(in OutcomeInput, _ Config) ([][]float64, error) {
		return OPOAdvantages(in.Rewards, in.Lengths)
	}), Needs{Groups: true}))
}

// OPOAdvantages is OPO (Hao et al., 2025, "On-Policy RL with Optimal reward baseline"): each
// group's baseline is the length-weighted mean reward b = Σ_i l_i r_i / Σ_i l_i, with l_i the
// trajectory's response tokens, and A_i = r_i − b, without std normalisation (cf. verl's
// compute_opo_outcome_advantage). The group rules of the other baselines apply: a singleton has
// baseline 0 (A = r, R1), an all-equal group gets exact zeros (R2), an empty group empty output
// (R3). A group whose lengths are all 0 has no weights and uses the plain mean (Dr.GRPO).
// lengths must be shaped like groups.
func OPOAdvantages(groups [][]float64, lengths [][]int) ([][]float64, error) {
	if len(lengths) != len(groups) {
		return nil, fmt.Errorf("trajectory lengths: %d groups, want %d (the input carries no lengths)", len(lengths), len(groups))
	}
	out := make([][]float64, len(groups))
	for g, r := range groups {
		l := lengths[g]
		if len(l) != len(r) {
			return nil, fmt.Errorf("group %d: %d lengths for %d trajectories", g, len(l), len(r))
		}
		a := make([]float64, len(r))
		out[g] = a
		switch {
		case len(r) == 0:
		case len(r) == 1:
			a[0] = r[0]
		case allEqual(r):
		default:
			// b = scale·Σ l_i (r_i/scale) / Σ l_i, on r/scale ∈ [−1, 1] so that no sum overflows.
			var scale, wsum, total float64
			for _, x := range r {
				scale = max(scale, math.Abs(x))
			}
			for i, x := range r {
				wsum += float64(l[i]) * (x / scale)
				total += float64(l[i])
			}
			var b float64
			if total == 0 {
				_, b, _ = scaledMoments(r, 0)
			} else {
				b = wsum / total
			}
			mu := scale * b
			for i, x := range r {
				a[i] = saturate(x - mu)
			}
		}
	}
	return out, nil
}
