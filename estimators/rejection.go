package estimators

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// RejectionConfig configures rejection and dynamic sampling (DAPO, Yu et al., 2025).
type RejectionConfig struct {
	// MinTrajsPerGroup drops groups with fewer trajectories (step 2; default 2).
	MinTrajsPerGroup int
	// FilterUniformGroups drops groups whose rewards span at most UniformTol (step 3).
	FilterUniformGroups bool
	// UniformTol is the max − min reward span under which a group counts as uniform (default 1e-8).
	UniformTol float64
	// MinPartialSolveTasks is the number of partially solved tasks a batch needs before it goes
	// to training (step 4; default 1; 0 disables the check).
	MinPartialSolveTasks int
	// TrainBatchGroups is the number of kept groups a training batch needs (DAPO dynamic
	// sampling, step 5); 0 disables the target. A batch that reaches it is truncated to it.
	TrainBatchGroups int
	// MaxGenBatches caps the rollout batches accumulated for one training batch (0 = unbounded).
	MaxGenBatches int
}

// Check reports an out-of-range parameter.
func (c RejectionConfig) Check() error {
	var errs []error
	if c.MinTrajsPerGroup < 0 {
		errs = append(errs, fmt.Errorf("min_trajs_per_group %d must be >= 0", c.MinTrajsPerGroup))
	}
	if !(c.UniformTol >= 0) || math.IsInf(c.UniformTol, 0) {
		errs = append(errs, fmt.Errorf("uniform_tol %v must be finite and >= 0", c.UniformTol))
	}
	if c.MinPartialSolveTasks < 0 {
		errs = append(errs, fmt.Errorf("min_partial_solve_tasks %d must be >= 0", c.MinPartialSolveTasks))
	}
	if c.TrainBatchGroups < 0 {
		errs = append(errs, fmt.Errorf("train_batch_groups %d must be >= 0", c.TrainBatchGroups))
	}
	if c.MaxGenBatches < 0 {
		errs = append(errs, fmt.Errorf("max_num_gen_batches %d must be >= 0", c.MaxGenBatches))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rejection config: %w", err)
	}
	return nil
}

// Reasons a group is kept or dropped.
const (
	ReasonKept     = "kept"
	ReasonMinTrajs = "min_trajs"
	ReasonUniform  = "uniform"
)

// FilterResult is the outcome of FilterGroups.
type FilterResult struct {
	// Kept are the indices of the kept groups, in input order.
	Kept []int
	// Reasons has one entry per input group: ReasonKept, ReasonMinTrajs or ReasonUniform.
	Reasons []string
	// SolveAll, SolveNone and SolvePartial count the tasks (groups here) surviving the
	// min-trajectories filter whose trajectories were all, none or some correct.
	SolveAll, SolveNone, SolvePartial int
	// Proceed is true when SolvePartial >= MinPartialSolveTasks.
	Proceed bool
}

// FilterGroups applies rejection and dynamic sampling (DAPO, Yu et al., 2025) to groups of rewards, one group per task:
// drop groups with fewer than MinTrajsPerGroup trajectories, then (if FilterUniformGroups) groups
// whose reward span is at most UniformTol, and classify the tasks that passed step 2 by how many
// of their trajectories are correct. isCorrect must have the shape of rewards.
func FilterGroups(rewards [][]float64, isCorrect [][]bool, cfg RejectionConfig) (FilterResult, error) {
	if err := cfg.Check(); err != nil {
		return FilterResult{}, err
	}
	if len(isCorrect) != len(rewards) {
		return FilterResult{}, fmt.Errorf("filter groups: %d correctness groups for %d reward groups", len(isCorrect), len(rewards))
	}
	res := FilterResult{Reasons: make([]string, len(rewards))}
	for g, r := range rewards {
		if len(isCorrect[g]) != len(r) {
			return FilterResult{}, fmt.Errorf("filter groups: group %d: %d correctness flags for %d rewards", g, len(isCorrect[g]), len(r))
		}
		if err := checkFiniteGroups("reward", [][]float64{r}); err != nil {
			return FilterResult{}, fmt.Errorf("filter groups: group %d: %w", g, err)
		}
		if len(r) < cfg.MinTrajsPerGroup {
			res.Reasons[g] = ReasonMinTrajs
			continue
		}
		switch solveClass(isCorrect[g]) {
		case solveAll:
			res.SolveAll++
		case solveNone:
			res.SolveNone++
		default:
			res.SolvePartial++
		}
		if cfg.FilterUniformGroups && len(r) > 0 && slices.Max(r)-slices.Min(r) <= cfg.UniformTol {
			res.Reasons[g] = ReasonUniform
			continue
		}
		res.Reasons[g] = ReasonKept
		res.Kept = append(res.Kept, g)
	}
	res.Proceed = res.SolvePartial >= cfg.MinPartialSolveTasks
	return res, nil
}

type solveKind int

const (
	solveNone solveKind = iota
	solvePartial
	solveAll
)

func solveClass(correct []bool) solveKind {
	n := 0
	for _, c := range correct {
		if c {
			n++
		}
	}
	switch n {
	case 0:
		return solveNone
	case len(correct):
		return solveAll
	}
	return solvePartial
}

// Rejection is the result of Reject on Groups.
type Rejection struct {
	// Kept are the groups that passed steps 2 and 3, in input order.
	Kept []Group
	// SolveAll, SolveNone and SolvePartial count tasks (by TaskID, over all their groups that
	// passed step 2) whose trajectories were all, none or some correct.
	SolveAll, SolveNone, SolvePartial int
	// Proceed is true when SolvePartial >= MinPartialSolveTasks.
	Proceed bool
	// Metrics: rejection/{groups_before, groups_after, dropped_min_trajs, dropped_uniform,
	// solve_all, solve_none, solve_partial} (counts) and rejection/solve_{all,none,partial}_frac.
	Metrics map[string]float64
}

// Reject applies rejection and dynamic sampling (DAPO, Yu et al., 2025) to trajectory groups. Tasks are classified by TaskID
// over all their groups that passed the min-trajectories filter (several roles may share a task).
func Reject(groups []Group, cfg RejectionConfig) (Rejection, error) {
	rewards := make([][]float64, len(groups))
	correct := make([][]bool, len(groups))
	for g := range groups {
		for _, tr := range groups[g].Trajectories {
			rewards[g] = append(rewards[g], tr.Reward)
			correct[g] = append(correct[g], tr.IsCorrect)
		}
	}
	fr, err := FilterGroups(rewards, correct, cfg)
	if err != nil {
		return Rejection{}, err
	}
	var tasks []string
	byTask := map[string][]bool{}
	var droppedMin, droppedUniform int
	for g, reason := range fr.Reasons {
		if reason == ReasonMinTrajs {
			droppedMin++
			continue
		}
		if reason == ReasonUniform {
			droppedUniform++
		}
		id := groups[g].TaskID
		if _, ok := byTask[id]; !ok {
			tasks = append(tasks, id)
		}
		byTask[id] = append(byTask[id], correct[g]...)
	}
	out := Rejection{Metrics: map[string]float64{}}
	for _, id := range tasks {
		switch solveClass(byTask[id]) {
		case solveAll:
			out.SolveAll++
		case solveNone:
			out.SolveNone++
		default:
			out.SolvePartial++
		}
	}
	for _, g := range fr.Kept {
		out.Kept = append(out.Kept, groups[g])
	}
	out.Proceed = out.SolvePartial >= cfg.MinPartialSolveTasks
	m := out.Metrics
	m["rejection/groups_before"] = float64(len(groups))
	m["rejection/groups_after"] = float64(len(out.Kept))
	m["rejection/dropped_min_trajs"] = float64(droppedMin)
	m["rejection/dropped_uniform"] = float64(droppedUniform)
	m["rejection/solve_all"] = float64(out.SolveAll)
	m["rejection/solve_none"] = float64(out.SolveNone)
	m["rejection/solve_partial"] = float64(out.SolvePartial)
	if n := len(tasks); n > 0 {
		m["rejection/solve_all_frac"] = float64(out.SolveAll) / float64(n)
		m["rejection/solve_none_frac"] = float64(out.SolveNone) / float64(n)
		m["rejection/solve_partial_frac"] = float64(out.SolvePartial) / float64(n)
	}
	return out, nil
}

// Accumulator implements DAPO's dynamic sampling (Yu et al., 2025): the engine feeds it one
// rollout batch of groups after another; it filters each batch with Reject, keeps the survivors,
// and releases a training batch once enough partially solved tasks (MinPartialSolveTasks) and
// enough groups (TrainBatchGroups, truncating the excess) have been gathered. When MaxGenBatches
// batches have been fed without reaching that, it releases what it has, or, if nothing survived,
// tells the engine to skip the optimizer step: it never releases an empty batch.
type Accumulator struct {
	cfg       RejectionConfig
	kept      []Group
	batches   int
	partial   int
	before    int
	dropMin   int
	dropUnif  int
	truncated int
}

// NewAccumulator returns an empty accumulator after checking cfg.
func NewAccumulator(cfg RejectionConfig) (*Accumulator, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Accumulator{cfg: cfg}, nil
}

// Release is what Accumulator.Add decided.
type Release struct {
	// Ready is true when Groups is a training batch; the accumulator has been reset.
	Ready bool
	// Skip is true when the cap was reached with nothing kept: skip this optimizer step
	// (the accumulator has been reset).
	Skip bool
	// Groups is the training batch when Ready.
	Groups []Group
	// Metrics describe the accumulation so far (or the released batch): dynamic_sampling/
	// {num_gen_batches, groups_before, groups_kept, dropped_min_trajs, dropped_uniform,
	// solve_partial, truncated, cap_reached}.
	Metrics map[string]float64
}

// Add feeds one rollout batch and reports whether a training batch is ready.
func (a *Accumulator) Add(groups []Group) (Release, error) {
	rej, err := Reject(groups, a.cfg)
	if err != nil {
		return Release{}, fmt.Errorf("dynamic sampling batch %d: %w", a.batches+1, err)
	}
	a.batches++
	a.kept = append(a.kept, rej.Kept...)
	a.partial += rej.SolvePartial
	a.before += len(groups)
	a.dropMin += int(rej.Metrics["rejection/dropped_min_trajs"])
	a.dropUnif += int(rej.Metrics["rejection/dropped_uniform"])

	enough := a.partial >= a.cfg.MinPartialSolveTasks &&
		len(a.kept) > 0 &&
		(a.cfg.TrainBatchGroups == 0 || len(a.kept) >= a.cfg.TrainBatchGroups)
	capped := a.cfg.MaxGenBatches > 0 && a.batches >= a.cfg.MaxGenBatches
	var rel Release
	switch {
	case enough || (capped && len(a.kept) > 0):
		out := a.kept
		if t := a.cfg.TrainBatchGroups; t > 0 && len(out) > t {
			a.truncated = len(out) - t
			out = out[:t]
		}
		rel = Release{Ready: true, Groups: out}
	case capped:
		rel = Release{Skip: true}
	}
	rel.Metrics = a.metrics(capped && !enough)
	if rel.Ready || rel.Skip {
		*a = Accumulator{cfg: a.cfg}
	}
	return rel, nil
}

func (a *Accumulator) metrics(capReached bool) map[string]float64 {
	c := 0.0
	if capReached {
		c = 1
	}
	return map[string]float64{
		"dynamic_sampling/num_gen_batches":   float64(a.batches),
		"dynamic_sampling/groups_before":     float64(a.before),
		"dynamic_sampling/groups_kept":       float64(len(a.kept) - a.truncated),
		"dynamic_sampling/dropped_min_trajs": float64(a.dropMin),
		"dynamic_sampling/dropped_uniform":   float64(a.dropUnif),
		"dynamic_sampling/solve_partial":     float64(a.partial),
		"dynamic_sampling/truncated":         float64(a.truncated),
		"dynamic_sampling/cap_reached":       c,
	}
}

// Trajectory is one sampled attempt at a task by one role, as rejection sees it: its
// outcome reward and the verifier's verdict.
type Trajectory struct {
	// Reward is the scalar outcome reward of the trajectory.
	Reward float64
	// IsCorrect is the verifier's verdict, used by rejection sampling and validation metrics.
	IsCorrect bool
}

// Group is the set of trajectories sampled for one task instance by one role: the unit that
// rejection keeps or drops.
type Group struct {
	TaskID       string
	Role         string
	DataSource   string
	Trajectories []Trajectory
}
