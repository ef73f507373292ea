package estimators

import (
	"fmt"
	"math"

	"stx.dev/stx/rollout"
)

// RolloutAdvantages runs the estimator cfg.Name on one role's rollout.Rollout, for specializations and
// engine stages that work on rows rather than on trajectory groups (for example a PPO actor
// whose critic values arrive through a sync). It sets r.Tok[rollout.KeyAdvantages] and, for
// estimators that produce them, r.Tok[rollout.KeyReturns], and returns the estimator's warnings.
//
// Rows of one trajectory share a Traj value (without a Traj column every row is a trajectory);
// a trajectory's reward is its first row's Reward. Outcome estimators group trajectories by
// GroupID (without one, every trajectory is its own group), read baselines from
// Row[rollout.KeyGreedyReward], and broadcast the advantage over Mask; they also receive every
// trajectory's length (trainable tokens over its rows), step count, group, task and data source
// ids and every Row column at its first row (OutcomeInput), so no estimator needs plumbing.
// Token estimators see the rows as they are: values from Tok[rollout.KeyValues], per-token shaping from Tok[rollout.KeyTokenRewards] plus the
// trajectory reward on the trajectory's last trainable token, supplied advantages (for
// "precomputed") from Tok[rollout.KeyAdvantages]; their rows of a trajectory must be consecutive.
// Without a Mask column, response tokens (after PromptLen) are trainable.
func RolloutAdvantages(r *rollout.Rollout, cfg Config) ([]string, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Reward == nil {
		return nil, fmt.Errorf("rollout advantages: the rollout has no reward column")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	est, err := Get(cfg.Name)
	if err != nil {
		return nil, err
	}
	mask := rolloutMask(r)
	traj := r.Traj
	if traj == nil {
		traj = make([]int, r.Len())
		for i := range traj {
			traj[i] = i
		}
	}
	var out Output
	switch est.Level() {
	case Outcome:
		out, err = rolloutOutcome(r, est, cfg, traj, mask)
	case Token:
		out, err = rolloutToken(r, est, cfg, traj, mask)
	default:
		err = fmt.Errorf("estimator %q has unknown level %v", est.Name(), est.Level())
	}
	if err != nil {
		return nil, fmt.Errorf("rollout advantages: %w", err)
	}
	if err := r.SetTok(rollout.KeyAdvantages, out.TokenAdvantages32()); err != nil {
		return nil, fmt.Errorf("rollout advantages: %w", err)
	}
	if out.Returns != nil {
		ret := make([][]float32, len(out.Returns))
		for b := range out.Returns {
			ret[b] = toFloat32(out.Returns[b])
		}
		if err := r.SetTok(rollout.KeyReturns, ret); err != nil {
			return nil, fmt.Errorf("rollout advantages: %w", err)
		}
	}
	return out.Warnings, nil
}

// TokenAdvantages32 narrows TokenAdvantages to float32, saturating instead of overflowing.
func (o Output) TokenAdvantages32() [][]float32 {
	out := make([][]float32, len(o.TokenAdvantages))
	for b := range o.TokenAdvantages {
		out[b] = toFloat32(o.TokenAdvantages[b])
	}
	return out
}

func rolloutMask(r *rollout.Rollout) [][]float64 {
	mask := make([][]float64, r.Len())
	for b, toks := range r.Tokens {
		mask[b] = make([]float64, len(toks))
		for t := range toks {
			switch {
			case r.Mask != nil:
				mask[b][t] = float64(r.Mask[b][t])
			case r.PromptLen == nil || t >= r.PromptLen[b]:
				mask[b][t] = 1
			}
		}
	}
	return mask
}

// rolloutOutcome groups the rollout's trajectories, runs an outcome estimator and broadcasts
// each trajectory's advantage over its rows' masks (as TokenAdvantages of the returned Output).
func rolloutOutcome(r *rollout.Rollout, est Estimator, cfg Config, traj []int, mask [][]float64) (Output, error) {
	type pos struct{ g, i int }
	trajPos := map[int]pos{}
	groupOf := map[string]int{}
	var in Input
	greedy := r.Row[rollout.KeyGreedyReward]
	rowKeys := make([]string, 0, len(r.Row))
	for key := range r.Row {
		rowKeys = append(rowKeys, key)
	}
	if len(rowKeys) > 0 {
		in.RowColumns = make(map[string][][]float64, len(rowKeys))
	}
	appendStr := func(col []string, dst [][]string, g, b int) [][]string {
		if col == nil {
			return nil
		}
		return appendAt(dst, g, col[b])
	}
	for b := range r.Tokens {
		if p, ok := trajPos[traj[b]]; ok {
			// A further step of the trajectory: it adds its response tokens and one step.
			in.Lengths[p.g][p.i] += trainable(mask[b])
			in.Steps[p.g][p.i]++
			continue
		}
		key := fmt.Sprint("traj ", traj[b])
		if r.GroupID != nil {
			key = r.GroupID[b]
		}
		g, ok := groupOf[key]
		if !ok {
			g = len(in.Rewards)
			groupOf[key] = g
			in.Rewards = append(in.Rewards, nil)
			in.Baselines = append(in.Baselines, nil)
			in.Lengths = append(in.Lengths, nil)
			in.Steps = append(in.Steps, nil)
			in.GroupIDs = append(in.GroupIDs, key)
		}
		trajPos[traj[b]] = pos{g, len(in.Rewards[g])}
		in.Rewards[g] = append(in.Rewards[g], r.Reward[b])
		if greedy != nil {
			in.Baselines[g] = append(in.Baselines[g], greedy[b])
		}
		in.Lengths[g] = append(in.Lengths[g], trainable(mask[b]))
		in.Steps[g] = append(in.Steps[g], 1)
		in.TaskIDs = appendStr(r.TaskID, in.TaskIDs, g, b)
		in.DataSources = appendStr(r.DataSource, in.DataSources, g, b)
		for _, k := range rowKeys {
			in.RowColumns[k] = appendAt(in.RowColumns[k], g, r.Row[k][b])
		}
	}
	out, err := est.Estimate(in, cfg)
	if err != nil {
		return Output{}, err
	}
	for g := range in.Rewards {
		if g >= len(out.Advantages) || len(out.Advantages[g]) != len(in.Rewards[g]) {
			return Output{}, fmt.Errorf("estimator %q returned advantages of the wrong shape", est.Name())
		}
	}
	res := Output{TokenAdvantages: make([][]float64, r.Len()), Warnings: out.Warnings}
	for b := range r.Tokens {
		p := trajPos[traj[b]]
		a := out.Advantages[p.g][p.i]
		if math.IsNaN(a) || math.IsInf(a, 0) {
			return Output{}, fmt.Errorf("estimator %q: row %d: advantage %v is not finite", est.Name(), b, a)
		}
		res.TokenAdvantages[b] = make([]float64, len(mask[b]))
		for t, m := range mask[b] {
			res.TokenAdvantages[b][t] = masked(a, m)
		}
	}
	return res, nil
}

func rolloutToken(r *rollout.Rollout, est Estimator, cfg Config, traj []int, mask [][]float64) (Output, error) {
	n := r.Len()
	in := Input{Mask: mask, Traj: traj, PromptLen: r.PromptLen,
		TokenRewards: make([][]float64, n), Values: make([][]float64, n), Supplied: make([]*Advantage, n)}
	shaping, values, supplied := r.Tok[rollout.KeyTokenRewards], r.Tok[rollout.KeyValues], r.Tok[rollout.KeyAdvantages]
	seen := map[int]bool{}
	for b := range n {
		if b > 0 && traj[b] != traj[b-1] && seen[traj[b]] {
			return Output{}, fmt.Errorf("rows of trajectory %d are not consecutive (compute advantages before shuffling)", traj[b])
		}
		seen[traj[b]] = true
		in.TokenRewards[b] = make([]float64, len(mask[b]))
		if shaping != nil {
			for t, v := range shaping[b] {
				in.TokenRewards[b][t] = float64(v)
			}
		}
		if values != nil {
			in.Values[b] = make([]float64, len(mask[b]))
			for t, v := range values[b] {
				in.Values[b][t] = float64(v)
			}
		}
		if supplied != nil {
			p := 0
			if r.PromptLen != nil {
				p = r.PromptLen[b]
			}
			resp := make([]float64, len(supplied[b])-p)
			for t := range resp {
				resp[t] = float64(supplied[b][p+t])
			}
			in.Supplied[b] = PerTokenAdvantage(resp)
		}
	}
	// The trajectory reward goes on the last trainable token of the trajectory's rows.
	for b := n - 1; b >= 0; {
		first := b
		for first > 0 && traj[first-1] == traj[b] {
			first--
		}
		placed := false
		for row := b; row >= first && !placed; row-- {
			for t := len(mask[row]) - 1; t >= 0; t-- {
				if mask[row][t] != 0 {
					in.TokenRewards[row][t] += r.Reward[row]
					placed = true
					break
				}
			}
		}
		b = first - 1
	}
	out, err := est.Estimate(in, cfg)
	if err != nil {
		return Output{}, err
	}
	if err := checkTokenOutput(est.Name(), "advantages", out.TokenAdvantages, mask); err != nil {
		return Output{}, err
	}
	if out.Returns != nil {
		if err := checkTokenOutput(est.Name(), "returns", out.Returns, mask); err != nil {
			return Output{}, err
		}
	}
	return out, nil
}

// appendAt appends v to dst[g], growing dst to g+1 groups (groups are created in order).
func appendAt[T any](dst [][]T, g int, v T) [][]T {
	for len(dst) <= g {
		dst = append(dst, nil)
	}
	dst[g] = append(dst[g], v)
	return dst
}

// trainable counts the trainable (mask ≠ 0) tokens of a row.
func trainable(mask []float64) int {
	n := 0
	for _, m := range mask {
		if m != 0 {
			n++
		}
	}
	return n
}

// ZeroAdvantageTol is the magnitude under which an advantage counts as zero in fraction_zero.
const ZeroAdvantageTol = 1e-8

func checkTokenOutput(name, what string, got, mask [][]float64) error {
	if len(got) != len(mask) {
		return fmt.Errorf("estimator %q returned %s for %d rows, want %d", name, what, len(got), len(mask))
	}
	for b := range got {
		if len(got[b]) != len(mask[b]) {
			return fmt.Errorf("estimator %q: row %d: %d %s for %d tokens", name, b, len(got[b]), what, len(mask[b]))
		}
		for t, v := range got[b] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("estimator %q: row %d token %d: %s value %v is not finite", name, b, t, what, v)
			}
		}
	}
	return nil
}

// masked returns x·m, with a positive zero where m is 0 (x·0 is −0 for negative x).
func masked(x, m float64) float64 {
	if m == 0 {
		return 0
	}
	return x * m
}

// toF32 narrows to float32, saturating at ±MaxFloat32 instead of overflowing to ±Inf.
func toF32(x float64) float32 {
	switch {
	case x > math.MaxFloat32:
		return math.MaxFloat32
	case x < -math.MaxFloat32:
		return -math.MaxFloat32
	}
	return float32(x)
}

func toFloat32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = toF32(v)
	}
	return out
}
