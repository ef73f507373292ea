package estimators

import (
	"fmt"
	"math"
	"slices"

	"stx.dev/stx/rollout"
)

// Step is one model call of a trajectory: its full token sequence (prompt then response).
type Step struct {
	// Tokens is the prompt followed by the response.
	Tokens []int32
	// PromptLen is the number of prompt tokens at the start of Tokens.
	PromptLen int
	// Mask has one entry per token: 1 for trainable response tokens, 0 for prompt, tool
	// observation and padding tokens. Nil means 1 on every response token and 0 on the prompt.
	Mask []float32
	// Advantage is the advantage the workflow supplied for this step, or nil.
	Advantage *Advantage
	// Values are the critic's rollout-time predictions, one per token; token-level estimators
	// such as GAE need them. Nil when the role has no critic.
	Values []float32
	// TokenRewards is optional per-token reward shaping, one per token (e.g. a KL penalty folded
	// into the reward); token-level estimators add it to the trajectory's outcome reward.
	TokenRewards []float32
}

// Trajectory is one sampled attempt at a task by one role: one or more steps and a reward.
type Trajectory struct {
	// Reward is the scalar outcome reward of the trajectory.
	Reward float64
	// IsCorrect is the verifier's verdict, used by rejection sampling and validation metrics.
	IsCorrect bool
	// Steps are the model calls of the trajectory, in order.
	Steps []Step
}

// Group is the set of trajectories sampled for one task instance by one role: the unit over
// which group-baseline estimators compute their statistics.
type Group struct {
	TaskID     string
	Role       string
	DataSource string
	// GreedyReward is the reward of a greedy rollout of the same prompt (ReMax's baseline), or nil.
	GreedyReward *float64
	Trajectories []Trajectory
}

// Result is what Collect returns.
type Result struct {
	// Advantages[g][i][s][t] is the advantage of token t of step s of trajectory i of group g,
	// aligned with that step's Tokens (0 on prompt and masked tokens).
	Advantages [][][][]float32
	// Returns has the shape of Advantages for groups whose estimator produced value targets
	// (GAE) and nil entries for the other groups; Returns itself is nil when no group has any.
	Returns [][][][]float32
	// Metrics are reward/<role>/{mean,std,max,min} and advantage/<role>/{mean,std,max,min,fraction_zero}.
	Metrics map[string]float64
	// Warnings are conditions the engine should log (overwritten or missing precomputed advantages).
	Warnings []string
}

// ZeroAdvantageTol is the magnitude under which an advantage counts as zero in fraction_zero.
const ZeroAdvantageTol = 1e-8

// Collect computes per-token advantages for every step of every group, role by role, following
// rLLM's broadcast pipeline:
//
//   - a group whose role uses the "precomputed" estimator, or whose role config has
//     UsePrecomputed and whose steps carry supplied advantages, keeps those advantages;
//   - every other group of a role goes, together with the role's other such groups, through the
//     role's estimator (cfg.For(role)); supplied advantages are then overwritten, with a warning;
//   - an outcome estimator's per-trajectory advantage is broadcast to every trainable token of
//     every step; a token estimator's output is used per token.
//
// The metrics are computed per role over trajectory rewards and over the advantages (one per
// trajectory for outcome estimators, one per trainable token otherwise).
func Collect(groups []Group, cfg CollectConfig) (*Result, error) {
	if err := checkGroups(groups); err != nil {
		return nil, err
	}
	res := &Result{
		Advantages: make([][][][]float32, len(groups)),
		Metrics:    map[string]float64{},
	}
	for g := range groups {
		res.Advantages[g] = make([][][]float32, len(groups[g].Trajectories))
	}
	for _, role := range rolesInOrder(groups) {
		if err := collectRole(groups, role, cfg.For(role), res); err != nil {
			return nil, fmt.Errorf("role %q: %w", role, err)
		}
	}
	return res, nil
}

func collectRole(groups []Group, role string, cfg Config, res *Result) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	est, err := Get(cfg.Name)
	if err != nil {
		return err
	}
	var supplied, estimated []int
	var overwritten int
	var rewards []float64
	for g := range groups {
		if groups[g].Role != role {
			continue
		}
		for _, tr := range groups[g].Trajectories {
			rewards = append(rewards, tr.Reward)
		}
		has := hasSupplied(&groups[g])
		switch {
		case cfg.Name == Precomputed || (cfg.UsePrecomputed && has):
			supplied = append(supplied, g)
		default:
			estimated = append(estimated, g)
			if has {
				overwritten++
			}
		}
	}
	if overwritten > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"role %q: %d groups carry precomputed advantages but use_precomputed is off; overwriting them with %q",
			role, overwritten, cfg.Name))
	}
	var advs []float64
	if len(supplied) > 0 {
		pre, err := Get(Precomputed)
		if err != nil {
			return err
		}
		a, err := runToken(groups, supplied, pre, cfg, res)
		if err != nil {
			return err
		}
		advs = append(advs, a...)
	}
	if len(estimated) > 0 {
		var a []float64
		switch est.Level() {
		case Outcome:
			a, err = runOutcome(groups, estimated, est, cfg, res)
		case Token:
			a, err = runToken(groups, estimated, est, cfg, res)
		default:
			err = fmt.Errorf("estimator %q has unknown level %v", est.Name(), est.Level())
		}
		if err != nil {
			return err
		}
		advs = append(advs, a...)
	}
	addStats(res.Metrics, "reward/"+role, rewards, false)
	addStats(res.Metrics, "advantage/"+role, advs, true)
	return nil
}

// runOutcome runs an outcome estimator on the given groups, broadcasts the per-trajectory
// advantages into res and returns them (for metrics).
func runOutcome(groups []Group, idx []int, est Estimator, cfg Config, res *Result) ([]float64, error) {
	in := Input{Rewards: make([][]float64, len(idx)), Baselines: make([][]float64, len(idx))}
	for j, g := range idx {
		grp := &groups[g]
		in.Rewards[j] = make([]float64, len(grp.Trajectories))
		for i, tr := range grp.Trajectories {
			in.Rewards[j][i] = tr.Reward
		}
		if grp.GreedyReward != nil {
			in.Baselines[j] = make([]float64, len(grp.Trajectories))
			for i := range in.Baselines[j] {
				in.Baselines[j][i] = *grp.GreedyReward
			}
		}
	}
	out, err := est.Estimate(in, cfg)
	if err != nil {
		return nil, err
	}
	res.Warnings = append(res.Warnings, out.Warnings...)
	if len(out.Advantages) != len(idx) {
		return nil, fmt.Errorf("estimator %q returned %d groups for %d", est.Name(), len(out.Advantages), len(idx))
	}
	var all []float64
	for j, g := range idx {
		trajs := groups[g].Trajectories
		if len(out.Advantages[j]) != len(trajs) {
			return nil, fmt.Errorf("estimator %q: group %d: %d advantages for %d trajectories", est.Name(), g, len(out.Advantages[j]), len(trajs))
		}
		for i, tr := range trajs {
			a := out.Advantages[j][i]
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return nil, fmt.Errorf("estimator %q: group %d trajectory %d: advantage %v is not finite", est.Name(), g, i, a)
			}
			masks := make([][]float32, len(tr.Steps))
			for s := range tr.Steps {
				masks[s] = tr.Steps[s].mask()
			}
			res.Advantages[g][i] = BroadcastTrajectory(a, masks)
			all = append(all, a)
		}
	}
	return all, nil
}

// runToken runs a token estimator over the rows (steps) of the given groups, stores its
// per-token output (and returns, if any) in res and returns the advantages of trainable tokens.
func runToken(groups []Group, idx []int, est Estimator, cfg Config, res *Result) ([]float64, error) {
	type ref struct{ g, i, s int }
	var refs []ref
	var in Input
	traj := 0
	for _, g := range idx {
		for i, tr := range groups[g].Trajectories {
			// The outcome reward goes on the last trainable token of the trajectory.
			lastRow, lastTok := -1, -1
			for s := range tr.Steps {
				st := &tr.Steps[s]
				m := st.mask()
				mask := make([]float64, len(m))
				rew := make([]float64, len(m))
				for t := range m {
					mask[t] = float64(m[t])
					if st.TokenRewards != nil {
						rew[t] = float64(st.TokenRewards[t])
					}
					if m[t] != 0 {
						lastRow, lastTok = len(in.Mask), t
					}
				}
				var vals []float64
				if st.Values != nil {
					vals = make([]float64, len(st.Values))
					for t, v := range st.Values {
						vals[t] = float64(v)
					}
				}
				in.Mask = append(in.Mask, mask)
				in.TokenRewards = append(in.TokenRewards, rew)
				in.Values = append(in.Values, vals)
				in.Traj = append(in.Traj, traj)
				in.PromptLen = append(in.PromptLen, st.PromptLen)
				in.Supplied = append(in.Supplied, st.Advantage)
				refs = append(refs, ref{g, i, s})
			}
			if lastRow >= 0 {
				in.TokenRewards[lastRow][lastTok] += tr.Reward
			}
			traj++
		}
	}
	out, err := est.Estimate(in, cfg)
	if err != nil {
		return nil, err
	}
	res.Warnings = append(res.Warnings, out.Warnings...)
	if err := checkTokenOutput(est.Name(), "advantages", out.TokenAdvantages, in.Mask); err != nil {
		return nil, err
	}
	if out.Returns != nil {
		if err := checkTokenOutput(est.Name(), "returns", out.Returns, in.Mask); err != nil {
			return nil, err
		}
	}
	for _, g := range idx {
		for i, tr := range groups[g].Trajectories {
			res.Advantages[g][i] = make([][]float32, len(tr.Steps))
			if out.Returns != nil {
				if res.Returns == nil {
					res.Returns = make([][][][]float32, len(groups))
				}
				if res.Returns[g] == nil {
					res.Returns[g] = make([][][]float32, len(groups[g].Trajectories))
				}
				res.Returns[g][i] = make([][]float32, len(tr.Steps))
			}
		}
	}
	var all []float64
	for b, r := range refs {
		res.Advantages[r.g][r.i][r.s] = toFloat32(out.TokenAdvantages[b])
		if out.Returns != nil {
			res.Returns[r.g][r.i][r.s] = toFloat32(out.Returns[b])
		}
		for t, m := range in.Mask[b] {
			if m != 0 {
				all = append(all, out.TokenAdvantages[b][t])
			}
		}
	}
	return all, nil
}

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

// BroadcastTrajectory gives every token of every step of a trajectory the trajectory's
// advantage a times the token's mask: a on trainable tokens, 0 elsewhere.
func BroadcastTrajectory(a float64, stepMasks [][]float32) [][]float32 {
	out := make([][]float32, len(stepMasks))
	for s, m := range stepMasks {
		row := make([]float32, len(m))
		for t, v := range m {
			row[t] = toF32(masked(a, float64(v)))
		}
		out[s] = row
	}
	return out
}

// mask returns the step's effective mask: Mask, or 1 on the response and 0 on the prompt.
func (s *Step) mask() []float32 {
	if s.Mask != nil {
		return s.Mask
	}
	m := make([]float32, len(s.Tokens))
	for t := s.PromptLen; t < len(m); t++ {
		m[t] = 1
	}
	return m
}

func hasSupplied(g *Group) bool {
	for _, tr := range g.Trajectories {
		for _, st := range tr.Steps {
			if st.Advantage != nil {
				return true
			}
		}
	}
	return false
}

func rolesInOrder(groups []Group) []string {
	var roles []string
	for _, g := range groups {
		if !slices.Contains(roles, g.Role) {
			roles = append(roles, g.Role)
		}
	}
	return roles
}

func checkGroups(groups []Group) error {
	for g := range groups {
		grp := &groups[g]
		if grp.GreedyReward != nil && (math.IsNaN(*grp.GreedyReward) || math.IsInf(*grp.GreedyReward, 0)) {
			return fmt.Errorf("group %d (task %q): greedy reward %v is not finite", g, grp.TaskID, *grp.GreedyReward)
		}
		for i, tr := range grp.Trajectories {
			if math.IsNaN(tr.Reward) || math.IsInf(tr.Reward, 0) {
				return fmt.Errorf("group %d (task %q) trajectory %d: reward %v is not finite", g, grp.TaskID, i, tr.Reward)
			}
			for s := range tr.Steps {
				if err := tr.Steps[s].check(); err != nil {
					return fmt.Errorf("group %d (task %q) trajectory %d step %d: %w", g, grp.TaskID, i, s, err)
				}
			}
		}
	}
	return nil
}

func (s *Step) check() error {
	n := len(s.Tokens)
	if s.PromptLen < 0 || s.PromptLen > n {
		return fmt.Errorf("prompt length %d outside [0, %d]", s.PromptLen, n)
	}
	for _, c := range []struct {
		name string
		col  []float32
	}{{"mask", s.Mask}, {"values", s.Values}, {"token rewards", s.TokenRewards}} {
		if c.col == nil {
			continue
		}
		if len(c.col) != n {
			return fmt.Errorf("%s has %d entries for %d tokens", c.name, len(c.col), n)
		}
		for t, v := range c.col {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("%s token %d: %v is not finite", c.name, t, v)
			}
		}
	}
	return nil
}

// addStats records prefix/{mean,std,max,min} (population std, as np.std) and, when withZero,
// prefix/fraction_zero. Nothing is recorded for an empty list.
func addStats(m map[string]float64, prefix string, x []float64, withZero bool) {
	if len(x) == 0 {
		return
	}
	scale, mean, std := scaledMoments(x, 0)
	lo, hi := x[0], x[0]
	zeros := 0
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
		if math.Abs(v) < ZeroAdvantageTol {
			zeros++
		}
	}
	m[prefix+"/mean"] = scale * mean
	m[prefix+"/std"] = saturate(scale * std)
	m[prefix+"/max"] = hi
	m[prefix+"/min"] = lo
	if withZero {
		m[prefix+"/fraction_zero"] = float64(zeros) / float64(len(x))
	}
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

// ToRollout lays the steps of groups out as rollout.Rollout rows, in group, trajectory, step order.
// GroupID is "<task id>/<role>", Traj numbers trajectories across all groups, Reward is the
// trajectory reward, Row[rollout.KeyIsCorrect] is 1 or 0, Row[rollout.KeyGreedyReward] is set when every group
// has a greedy reward, and Tok[rollout.KeyValues] (Tok[rollout.KeyTokenRewards]) when every step has values
// (token rewards). With a non-nil res (from Collect on the same groups), Tok[rollout.KeyAdvantages] holds the
// advantages and, when res has returns, Tok[rollout.KeyReturns] the returns (0 for steps without).
func ToRollout(groups []Group, res *Result) (*rollout.Rollout, error) {
	if err := checkGroups(groups); err != nil {
		return nil, err
	}
	if res != nil && len(res.Advantages) != len(groups) {
		return nil, fmt.Errorf("to rollout: result has %d groups, want %d", len(res.Advantages), len(groups))
	}
	r := &rollout.Rollout{
		Tokens:     [][]int32{},
		PromptLen:  []int{},
		Mask:       [][]float32{},
		Reward:     []float64{},
		GroupID:    []string{},
		TaskID:     []string{},
		Role:       []string{},
		DataSource: []string{},
		Traj:       []int{},
		Row:        map[string][]float64{rollout.KeyIsCorrect: {}},
		Tok:        map[string][][]float32{},
	}
	var adv, ret, vals, shaping [][]float32
	allValues, allShaping, allGreedy := true, true, true
	var greedy []float64
	traj := 0
	for g := range groups {
		grp := &groups[g]
		for i, tr := range grp.Trajectories {
			correct := 0.0
			if tr.IsCorrect {
				correct = 1
			}
			if res != nil && len(res.Advantages[g]) != len(grp.Trajectories) ||
				res != nil && len(res.Advantages[g][i]) != len(tr.Steps) {
				return nil, fmt.Errorf("to rollout: group %d trajectory %d: result does not match the groups", g, i)
			}
			for s := range tr.Steps {
				st := &tr.Steps[s]
				r.Tokens = append(r.Tokens, slices.Clone(st.Tokens))
				r.PromptLen = append(r.PromptLen, st.PromptLen)
				r.Mask = append(r.Mask, slices.Clone(st.mask()))
				r.Reward = append(r.Reward, tr.Reward)
				r.GroupID = append(r.GroupID, grp.TaskID+"/"+grp.Role)
				r.TaskID = append(r.TaskID, grp.TaskID)
				r.Role = append(r.Role, grp.Role)
				r.DataSource = append(r.DataSource, grp.DataSource)
				r.Traj = append(r.Traj, traj)
				r.Row[rollout.KeyIsCorrect] = append(r.Row[rollout.KeyIsCorrect], correct)
				if grp.GreedyReward != nil {
					greedy = append(greedy, *grp.GreedyReward)
				} else {
					allGreedy = false
				}
				vals = append(vals, slices.Clone(st.Values))
				allValues = allValues && st.Values != nil
				shaping = append(shaping, slices.Clone(st.TokenRewards))
				allShaping = allShaping && st.TokenRewards != nil
				if res != nil {
					a := res.Advantages[g][i][s]
					if len(a) != len(st.Tokens) {
						return nil, fmt.Errorf("to rollout: group %d trajectory %d step %d: %d advantages for %d tokens", g, i, s, len(a), len(st.Tokens))
					}
					adv = append(adv, slices.Clone(a))
					rt := make([]float32, len(st.Tokens))
					if res.Returns != nil && res.Returns[g] != nil && res.Returns[g][i] != nil {
						copy(rt, res.Returns[g][i][s])
					}
					ret = append(ret, rt)
				}
			}
			traj++
		}
	}
	if allValues && len(vals) > 0 {
		r.Tok[rollout.KeyValues] = vals
	}
	if allGreedy && len(greedy) > 0 {
		r.Row[rollout.KeyGreedyReward] = greedy
	}
	if allShaping && len(shaping) > 0 {
		r.Tok[rollout.KeyTokenRewards] = shaping
	}
	if res != nil {
		r.Tok[rollout.KeyAdvantages] = adv
		if res.Returns != nil {
			r.Tok[rollout.KeyReturns] = ret
		}
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("to rollout: %w", err)
	}
	return r, nil
}
