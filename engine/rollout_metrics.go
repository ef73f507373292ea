package engine

import (
	"math"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
)

// rewardMetrics are the reward statistics of a batch's rows per role, named
// as rLLM names them: reward/<role>/{mean,std,min,max}, plus
// reward/<role>/correct_frac (the fraction of correct completions).
func rewardMetrics(d *rollout.Rollout) map[string]float64 {
	m := map[string]float64{}
	if d.Len() == 0 || d.Reward == nil {
		return m
	}
	correct := d.Row[rollout.KeyIsCorrect]
	for _, role := range rowRoles(d) {
		var xs, cs []float64
		for i, r := range d.Reward {
			if d.Role[i] == role {
				xs = append(xs, r)
				if correct != nil {
					cs = append(cs, correct[i])
				}
			}
		}
		addMoments(m, "reward/"+role, xs, false)
		if correct != nil {
			t := 0.0
			for _, v := range cs {
				t += v
			}
			m["reward/"+role+"/correct_frac"] = t / float64(len(cs))
		}
	}
	return m
}

// rowRoles are the distinct roles of d's rows, in order of appearance.
func rowRoles(d *rollout.Rollout) []string {
	var roles []string
	seen := map[string]bool{}
	for _, r := range d.Role {
		if !seen[r] {
			seen[r] = true
			roles = append(roles, r)
		}
	}
	return roles
}

// addMoments adds prefix/{mean,std,min,max} of xs (population std) and,
// with zero, prefix/fraction_zero (|x| < estimators.ZeroAdvantageTol).
func addMoments(m map[string]float64, prefix string, xs []float64, zero bool) {
	if len(xs) == 0 {
		return
	}
	s, ss, nz := 0.0, 0.0, 0.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range xs {
		s += v
		ss += v * v
		lo, hi = min(lo, v), max(hi, v)
		if math.Abs(v) < estimators.ZeroAdvantageTol {
			nz++
		}
	}
	n := float64(len(xs))
	mean := s / n
	m[prefix+"/mean"] = mean
	m[prefix+"/std"] = math.Sqrt(max(ss/n-mean*mean, 0))
	m[prefix+"/min"], m[prefix+"/max"] = lo, hi
	if zero {
		m[prefix+"/fraction_zero"] = nz / n
	}
}

// advantageMetrics are statistics of the advantages over trainable tokens,
// per role: advantage/<role>/{mean,std,min,max,fraction_zero}. (rLLM takes
// one advantage per trajectory; over tokens is the same for broadcast
// estimators such as GRPO up to length weighting, and also meaningful for
// per-token ones such as GAE.)
func advantageMetrics(d *rollout.Rollout) map[string]float64 {
	adv, ok := d.Tok[rollout.KeyAdvantages]
	perRow, rowOK := d.Row[rollout.KeyAdvantages] // one advantage per row (Flow-GRPO)
	if !ok && !rowOK {
		return nil
	}
	m := map[string]float64{}
	for _, role := range rowRoles(d) {
		var xs []float64
		for i := range d.Len() {
			if d.Role[i] != role {
				continue
			}
			if !ok {
				xs = append(xs, perRow[i])
				continue
			}
			for t, a := range adv[i] {
				if d.Mask[i][t] != 0 {
					xs = append(xs, float64(a))
				}
			}
		}
		addMoments(m, "advantage/"+role, xs, true)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
