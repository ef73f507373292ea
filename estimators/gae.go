package estimators

import (
	"fmt"
	"math"
)

// GAEAdvantages is GAE (Schulman et al., 2016): generalised advantage estimation over per-token rewards and critic
// values. Tokens with mask 0 (prompt, tool observations, padding) are skipped: they get advantage
// 0, consume no discount step, and their values and rewards are ignored. Consecutive rows with the
// same traj value are the steps of one trajectory and the recursion runs across them, from the
// last step back to the first (traj nil: every row stands alone). Returns are (A + V)·mask from
// the un-whitened advantages.
func GAEAdvantages(tokenRewards, values, mask [][]float64, traj []int, gamma, lambda float64) (adv, ret [][]float64, err error) {
	if err := checkRows(mask, tokenRewards, values, traj); err != nil {
		return nil, nil, err
	}
	adv = make([][]float64, len(mask))
	ret = make([][]float64, len(mask))
	var vNext, aNext float64
	for b := len(mask) - 1; b >= 0; b-- {
		if b == len(mask)-1 || traj == nil || traj[b] != traj[b+1] {
			vNext, aNext = 0, 0
		}
		m, r, v := mask[b], tokenRewards[b], values[b]
		adv[b] = make([]float64, len(m))
		ret[b] = make([]float64, len(m))
		for t := len(m) - 1; t >= 0; t-- {
			if m[t] == 0 {
				continue
			}
			delta := saturate(r[t] + gamma*vNext - v[t])
			aNext = saturate(delta + gamma*lambda*aNext)
			vNext = v[t]
			adv[b][t] = aNext
			ret[b][t] = saturate(aNext + v[t])
		}
	}
	return adv, ret, nil
}

func checkRows(mask, tokenRewards, values [][]float64, traj []int) error {
	if len(tokenRewards) != len(mask) {
		return fmt.Errorf("token rewards: %d rows, want %d (rows of mask)", len(tokenRewards), len(mask))
	}
	if len(values) != len(mask) {
		return fmt.Errorf("values: %d rows, want %d (rows of mask)", len(values), len(mask))
	}
	if traj != nil && len(traj) != len(mask) {
		return fmt.Errorf("traj: %d rows, want %d (rows of mask)", len(traj), len(mask))
	}
	for b := range mask {
		if values[b] == nil && len(mask[b]) > 0 {
			return fmt.Errorf("row %d: missing critic values", b)
		}
		if len(tokenRewards[b]) != len(mask[b]) || len(values[b]) != len(mask[b]) {
			return fmt.Errorf("row %d: %d token rewards and %d values for %d mask entries", b, len(tokenRewards[b]), len(values[b]), len(mask[b]))
		}
		for t, m := range mask[b] {
			if m == 0 {
				continue
			}
			if r := tokenRewards[b][t]; math.IsNaN(r) || math.IsInf(r, 0) {
				return fmt.Errorf("row %d token %d: token reward %v is not finite", b, t, r)
			}
			if v := values[b][t]; math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("row %d token %d: value %v is not finite", b, t, v)
			}
		}
	}
	return nil
}

// MaskedWhiten standardises x over the tokens where mask is non-zero (the whole batch):
// (x − μ)/sqrt(var + eps)·mask with μ the masked mean and var the unbiased (N − 1) masked
// variance. Fewer than two valid tokens give zeros. mask must have the shape of x.
func MaskedWhiten(x, mask [][]float64, eps float64) ([][]float64, error) {
	if len(mask) != len(x) {
		return nil, fmt.Errorf("whiten: mask has %d rows, want %d", len(mask), len(x))
	}
	for b := range x {
		if len(mask[b]) != len(x[b]) {
			return nil, fmt.Errorf("whiten: mask row %d has %d entries, want %d", b, len(mask[b]), len(x[b]))
		}
	}
	out := make([][]float64, len(x))
	var n int
	var scale float64
	for b := range x {
		out[b] = make([]float64, len(x[b]))
		for t, m := range mask[b] {
			if m != 0 {
				n++
				scale = max(scale, math.Abs(x[b][t]))
			}
		}
	}
	if n < 2 || scale == 0 {
		// Too few tokens for a variance, or every valid value is 0: the whitened value is 0.
		return out, nil
	}
	// Statistics of x/scale: finite for any finite x; the result is rescaled through eps/scale².
	var sum float64
	for b := range x {
		for t, m := range mask[b] {
			if m != 0 {
				sum += x[b][t] / scale
			}
		}
	}
	mean := sum / float64(n)
	var ss float64
	for b := range x {
		for t, m := range mask[b] {
			if m != 0 {
				d := x[b][t]/scale - mean
				ss += d * d
			}
		}
	}
	denom := math.Sqrt(ss/float64(n-1) + eps/(scale*scale))
	if denom == 0 || math.IsInf(denom, 0) {
		return out, nil
	}
	for b := range x {
		for t, m := range mask[b] {
			if m != 0 {
				out[b][t] = saturate((x[b][t]/scale - mean) / denom * m)
			}
		}
	}
	return out, nil
}

// gaeEstimator is the registered "gae": GAE with optional whitening of the advantages.
type gaeEstimator struct{}

func (gaeEstimator) Name() string { return GAE }
func (gaeEstimator) Level() Level { return Token }

func (gaeEstimator) Estimate(in Input, cfg Config) (Output, error) {
	adv, ret, err := GAEAdvantages(in.TokenRewards, in.Values, in.Mask, in.Traj, cfg.Gamma, cfg.Lambda)
	if err != nil {
		return Output{}, fmt.Errorf("%s: %w", GAE, err)
	}
	if cfg.Whiten {
		if adv, err = MaskedWhiten(adv, in.Mask, cfg.WhitenEps); err != nil {
			return Output{}, fmt.Errorf("%s: %w", GAE, err)
		}
	}
	return Output{TokenAdvantages: adv, Returns: ret}, nil
}
