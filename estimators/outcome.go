package estimators

import (
	"fmt"
	"math"
)

// Names of the built-in estimators.
const (
	GRPO                = "grpo"
	DrGRPO              = "dr_grpo"
	Reinforce           = "reinforce"
	ReinforcePPBaseline = "reinforce_pp_baseline"
	RLOO                = "rloo"
	ReMax               = "remax"
	GAE                 = "gae"
	Precomputed         = "precomputed"
)

func init() {
	MustRegister(WithNeeds(NewOutcomeEstimator(GRPO, func(in OutcomeInput, cfg Config) ([][]float64, error) {
		return GRPOAdvantages(in.Rewards, cfg.NormByStd, cfg.Epsilon, cfg.StdDDOF), nil
	}), Needs{Groups: true}))
	MustRegister(WithNeeds(NewOutcomeEstimator(DrGRPO, func(in OutcomeInput, cfg Config) ([][]float64, error) {
		return GRPOAdvantages(in.Rewards, false, cfg.Epsilon, cfg.StdDDOF), nil
	}), Needs{Groups: true}))
	MustRegister(NewOutcomeEstimator(Reinforce, func(in OutcomeInput, _ Config) ([][]float64, error) {
		return ReinforceAdvantages(in.Rewards), nil
	}))
	MustRegister(WithNeeds(NewOutcomeEstimator(ReinforcePPBaseline, func(in OutcomeInput, cfg Config) ([][]float64, error) {
		return ReinforcePPBaselineAdvantages(in.Rewards, cfg.Epsilon, cfg.StdDDOF), nil
	}), Needs{Groups: true}))
	MustRegister(WithNeeds(NewOutcomeEstimator(RLOO, func(in OutcomeInput, _ Config) ([][]float64, error) {
		return RLOOAdvantages(in.Rewards), nil
	}), Needs{Groups: true}))
	MustRegister(WithNeeds(NewOutcomeEstimator(ReMax, func(in OutcomeInput, _ Config) ([][]float64, error) {
		return ReMaxAdvantages(in.Rewards, in.Baselines)
	}), Needs{GreedyBaseline: true}))
	MustRegister(WithNeeds(gaeEstimator{}, Needs{Values: true}))
	MustRegister(precomputedEstimator{})
}

// GRPOAdvantages computes GRPO (Shao et al., 2024) for every group: (r − mean)/(std + eps) with normByStd, else
// r − mean. Singleton groups use mean 0 and std 1 (R1); groups whose rewards are all equal get
// exact zeros (R2); empty groups give empty output (R3). The result is finite for finite input.
func GRPOAdvantages(groups [][]float64, normByStd bool, eps float64, ddof int) [][]float64 {
	out := make([][]float64, len(groups))
	for g, r := range groups {
		out[g] = make([]float64, len(r))
		grpoGroup(r, out[g], normByStd, eps, ddof)
	}
	return out
}

func grpoGroup(r, dst []float64, normByStd bool, eps float64, ddof int) {
	switch {
	case len(r) == 0:
		return
	case len(r) == 1:
		if normByStd {
			dst[0] = r[0] / (1 + eps)
		} else {
			dst[0] = r[0]
		}
		return
	case allEqual(r):
		clear(dst)
		return
	}
	scale, mean, std := scaledMoments(r, ddof)
	if !normByStd {
		mu := scale * mean
		for i, x := range r {
			dst[i] = saturate(x - mu)
		}
		return
	}
	// (r − μ)/(s + ε) evaluated on r/scale so that neither the difference nor the std overflows.
	denom := std + eps/scale
	for i, x := range r {
		if denom == 0 {
			dst[i] = 0
			continue
		}
		dst[i] = saturate((x/scale - mean) / denom)
	}
}

// ReinforceAdvantages is REINFORCE (Williams, 1992): A = r (a copy).
func ReinforceAdvantages(groups [][]float64) [][]float64 {
	out := make([][]float64, len(groups))
	for g, r := range groups {
		out[g] = append([]float64(nil), r...)
	}
	return out
}

// RLOOAdvantages is RLOO (Ahmadian et al., 2024): A_i = r_i − mean of the other rewards = n/(n−1)·(r_i − mean); a
// singleton keeps its reward and an all-equal group gets exact zeros.
func RLOOAdvantages(groups [][]float64) [][]float64 {
	out := make([][]float64, len(groups))
	for g, r := range groups {
		n := len(r)
		a := make([]float64, n)
		out[g] = a
		switch {
		case n == 0:
		case n == 1:
			a[0] = r[0]
		case allEqual(r):
		default:
			scale, mean, _ := scaledMoments(r, 0)
			f := float64(n) / float64(n-1)
			for i, x := range r {
				a[i] = saturate(scale * (f * (x/scale - mean)))
			}
		}
	}
	return out
}

// ReinforcePPBaselineAdvantages is REINFORCE++-baseline (Hu, 2025): centre by the group mean (R1, R2), then divide by the
// std of all centred values of the batch plus eps, without re-centring. A batch whose centred
// values are all equal (including a batch of one trajectory) gets zeros.
func ReinforcePPBaselineAdvantages(groups [][]float64, eps float64, ddof int) [][]float64 {
	centred := make([][]float64, len(groups))
	total := 0
	for _, r := range groups {
		total += len(r)
	}
	all := make([]float64, 0, total)
	for g, r := range groups {
		c := make([]float64, len(r))
		centred[g] = c
		switch {
		case len(r) == 0:
		case len(r) == 1:
			c[0] = r[0]
		case allEqual(r):
		default:
			scale, mean, _ := scaledMoments(r, 0)
			mu := scale * mean
			for i, x := range r {
				c[i] = saturate(x - mu)
			}
		}
		all = append(all, c...)
	}
	if len(all) < 2 || allEqual(all) {
		for _, c := range centred {
			clear(c)
		}
		return centred
	}
	scale, _, std := scaledMoments(all, ddof)
	denom := std + eps/scale
	for _, c := range centred {
		for i, x := range c {
			if denom == 0 {
				c[i] = 0
				continue
			}
			c[i] = saturate((x / scale) / denom)
		}
	}
	return centred
}

// ReMaxAdvantages is ReMax (Li et al., 2023): A_i = r_i − b_i with b_i the reward of the greedy rollout of the same
// prompt. Every group needs one baseline per trajectory.
func ReMaxAdvantages(groups, baselines [][]float64) ([][]float64, error) {
	if len(baselines) != len(groups) {
		return nil, fmt.Errorf("greedy baseline rewards: %d groups, want %d", len(baselines), len(groups))
	}
	if err := checkFiniteGroups("greedy baseline reward", baselines); err != nil {
		return nil, err
	}
	out := make([][]float64, len(groups))
	for g, r := range groups {
		b := baselines[g]
		if len(r) > 0 && b == nil {
			return nil, fmt.Errorf("group %d: missing greedy baseline reward", g)
		}
		if len(b) != len(r) {
			return nil, fmt.Errorf("group %d: %d greedy baseline rewards for %d trajectories", g, len(b), len(r))
		}
		out[g] = make([]float64, len(r))
		for i := range r {
			out[g][i] = saturate(r[i] - b[i])
		}
	}
	return out, nil
}

// scaledMoments returns scale = max|x| and the mean and the std (with ddof; 0 when n − ddof ≤ 0)
// of x/scale. Working on x/scale ∈ [−1, 1] keeps sums and squares finite for any finite input,
// which the plain formulas do not for rewards beyond ~1e154. scale is 0 when every x is 0.
func scaledMoments(x []float64, ddof int) (scale, mean, std float64) {
	for _, v := range x {
		scale = max(scale, math.Abs(v))
	}
	if scale == 0 || len(x) == 0 {
		return scale, 0, 0
	}
	var sum float64
	for _, v := range x {
		sum += v / scale
	}
	mean = sum / float64(len(x))
	if d := len(x) - ddof; d > 0 {
		var ss float64
		for _, v := range x {
			dv := v/scale - mean
			ss += dv * dv
		}
		std = math.Sqrt(ss / float64(d))
	}
	return scale, mean, std
}

// allEqual reports whether every value equals the first (R2 compares values exactly).
func allEqual(x []float64) bool {
	for _, v := range x[1:] {
		if v != x[0] {
			return false
		}
	}
	return true
}

// saturate maps an overflowed ±Inf to ±MaxFloat64 so that no Inf leaves an estimator.
func saturate(x float64) float64 {
	switch {
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}

func checkFiniteGroups(what string, groups [][]float64) error {
	for g, r := range groups {
		for i, v := range r {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("group %d trajectory %d: %s %v is not finite", g, i, what, v)
			}
		}
	}
	return nil
}
