package estimators

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Level says which part of Input an estimator reads and which part of Output it fills.
type Level int

const (
	// Outcome estimators read Input.Rewards (one scalar per trajectory, grouped) and fill
	// Output.Advantages with one scalar per trajectory; RolloutAdvantages broadcasts it
	// to every trainable token.
	Outcome Level = iota
	// Token estimators read the per-token rows of Input and fill Output.TokenAdvantages (and
	// optionally Output.Returns) row by row.
	Token
)

func (l Level) String() string {
	switch l {
	case Outcome:
		return "outcome"
	case Token:
		return "token"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Input is the data of one role's advantage batch. Outcome estimators read its OutcomeInput
// (the trajectories' rewards, baselines and facts); token estimators the per-token rows.
// Unused fields may be nil.
type Input struct {
	OutcomeInput

	// Mask[b][t] is 1 for trainable tokens of row b (a step's full sequence), else 0.
	Mask [][]float64
	// TokenRewards[b][t] is the per-token reward (the outcome reward on the trajectory's last
	// trainable token plus any per-token shaping).
	TokenRewards [][]float64
	// Values[b][t] are the critic's rollout-time predictions; Values[b] is nil when missing.
	Values [][]float64
	// Traj[b] is the trajectory of row b: consecutive rows with equal Traj are the steps of one
	// trajectory in order, and GAE carries its recursion across them. Nil: every row stands alone.
	Traj []int
	// PromptLen[b] is the number of prompt tokens at the start of row b (nil: 0 everywhere).
	PromptLen []int
	// Supplied[b] is the advantage the workflow supplied for row b's response tokens (nil: none).
	Supplied []*Advantage
}

// Output is what an estimator returns for an Input.
type Output struct {
	// Advantages[g][i]: one scalar per trajectory (Outcome estimators), same shape as Input.Rewards.
	Advantages [][]float64
	// TokenAdvantages[b][t]: per-token advantages (Token estimators), same shape as Input.Mask.
	TokenAdvantages [][]float64
	// Returns[b][t]: per-token value targets (GAE), or nil.
	Returns [][]float64
	// Warnings are conditions worth logging that did not stop the computation.
	Warnings []string
}

// Estimator computes advantages for one role's batch.
type Estimator interface {
	// Name is the name the estimator is registered and selected under.
	Name() string
	// Level says whether the estimator works on trajectory rewards or on token rows.
	Level() Level
	// Estimate computes the advantages. It returns an error for malformed input, never panics.
	Estimate(in Input, cfg Config) (Output, error)
}

// OutcomeInput is everything an outcome estimator may read about one role's advantage batch,
// grouped like Rewards: [g][i] is trajectory i of group g (one group per prompt). Every
// per-trajectory field other than Rewards is nil when the caller has none; RolloutAdvantages
// fills all of them (Baselines only from a greedy_reward column), so that a new estimator that
// reads them needs no plumbing.
type OutcomeInput struct {
	// Rewards[g][i] is the scalar reward of trajectory i of group g (checked finite).
	Rewards [][]float64
	// Baselines[g][i] is an external per-trajectory baseline (ReMax: the reward of the greedy
	// rollout of the same prompt). Baselines[g] is nil when group g has none.
	Baselines [][]float64
	// Lengths[g][i] is the number of response tokens of the trajectory: its trainable
	// (mask ≠ 0) tokens summed over its steps.
	Lengths [][]int
	// Steps[g][i] is the number of rows (model calls) of the trajectory.
	Steps [][]int
	// GroupIDs[g] is the group's key (the rollout's GroupID: task id and role).
	GroupIDs []string
	// TaskIDs[g][i] and DataSources[g][i] are the trajectory's task and dataset.
	TaskIDs     [][]string
	DataSources [][]string
	// RowColumns[key][g][i] is the rollout's per-row column key (is_correct, greedy_reward,
	// ...) at the trajectory's first row.
	RowColumns map[string][][]float64
}

// check reports an optional field whose shape does not match Rewards, or a negative length.
func (in OutcomeInput) check() error {
	if in.GroupIDs != nil && len(in.GroupIDs) != len(in.Rewards) {
		return fmt.Errorf("%d group ids for %d groups", len(in.GroupIDs), len(in.Rewards))
	}
	for _, f := range []struct {
		what string
		lens func(g int) int
		n    int
	}{
		{"lengths", func(g int) int { return len(in.Lengths[g]) }, len(in.Lengths)},
		{"steps", func(g int) int { return len(in.Steps[g]) }, len(in.Steps)},
		{"task ids", func(g int) int { return len(in.TaskIDs[g]) }, len(in.TaskIDs)},
		{"data sources", func(g int) int { return len(in.DataSources[g]) }, len(in.DataSources)},
	} {
		if f.n == 0 {
			continue
		}
		if f.n != len(in.Rewards) {
			return fmt.Errorf("%s: %d groups, want %d", f.what, f.n, len(in.Rewards))
		}
		for g := range in.Rewards {
			if f.lens(g) != len(in.Rewards[g]) {
				return fmt.Errorf("%s: group %d: %d values for %d trajectories", f.what, g, f.lens(g), len(in.Rewards[g]))
			}
		}
	}
	for g, ls := range in.Lengths {
		for i, l := range ls {
			if l < 0 {
				return fmt.Errorf("group %d trajectory %d: length %d is negative", g, i, l)
			}
		}
	}
	for key, col := range in.RowColumns {
		if len(col) != len(in.Rewards) {
			return fmt.Errorf("row column %q: %d groups, want %d", key, len(col), len(in.Rewards))
		}
		for g := range col {
			if len(col[g]) != len(in.Rewards[g]) {
				return fmt.Errorf("row column %q: group %d: %d values for %d trajectories", key, g, len(col[g]), len(in.Rewards[g]))
			}
		}
	}
	return nil
}

// OutcomeFunc computes one advantage per trajectory, shaped like in.Rewards: the shape of every
// outcome estimator. It receives the whole OutcomeInput and reads what it needs.
type OutcomeFunc func(in OutcomeInput, cfg Config) ([][]float64, error)

// NewOutcomeEstimator wraps an OutcomeFunc as an Outcome-level Estimator. Rewards are checked
// to be finite, and the optional fields to match their shape, before fn runs; fn's result is
// checked to have Rewards' shape.
func NewOutcomeEstimator(name string, fn OutcomeFunc) Estimator {
	return outcomeEstimator{name: name, fn: fn}
}

// RewardsFunc is an outcome estimator that reads only rewards and baselines.
type RewardsFunc func(rewards, baselines [][]float64, cfg Config) ([][]float64, error)

// NewOutcome is NewOutcomeEstimator for a RewardsFunc, the shortest way to register a custom
// group-baseline estimator.
func NewOutcome(name string, fn RewardsFunc) Estimator {
	if fn == nil {
		return outcomeEstimator{name: name}
	}
	return outcomeEstimator{name: name, fn: func(in OutcomeInput, cfg Config) ([][]float64, error) {
		return fn(in.Rewards, in.Baselines, cfg)
	}}
}

type outcomeEstimator struct {
	name string
	fn   OutcomeFunc
}

func (e outcomeEstimator) Name() string { return e.name }
func (e outcomeEstimator) Level() Level { return Outcome }

func (e outcomeEstimator) Estimate(in Input, cfg Config) (Output, error) {
	if err := checkFiniteGroups("reward", in.Rewards); err != nil {
		return Output{}, fmt.Errorf("%s: %w", e.name, err)
	}
	if e.fn == nil {
		return Output{}, fmt.Errorf("%s: no estimator function", e.name)
	}
	oin := in.OutcomeInput
	if err := oin.check(); err != nil {
		return Output{}, fmt.Errorf("%s: %w", e.name, err)
	}
	adv, err := e.fn(oin, cfg)
	if err != nil {
		return Output{}, fmt.Errorf("%s: %w", e.name, err)
	}
	if len(adv) != len(in.Rewards) {
		return Output{}, fmt.Errorf("%s: returned %d groups for %d", e.name, len(adv), len(in.Rewards))
	}
	for g := range adv {
		if len(adv[g]) != len(in.Rewards[g]) {
			return Output{}, fmt.Errorf("%s: group %d: returned %d advantages for %d trajectories", e.name, g, len(adv[g]), len(in.Rewards[g]))
		}
	}
	return Output{Advantages: adv}, nil
}

// registry holds every estimator by name. It is the package's only mutable global; it is
// guarded so that users may register custom estimators from any goroutine.
var registry = struct {
	sync.RWMutex
	byName map[string]Estimator
}{byName: map[string]Estimator{}}

// Register adds an estimator under e.Name(). Registering an empty name or a name already taken
// is an error.
func Register(e Estimator) error {
	if e == nil {
		return errors.New("register estimator: nil estimator")
	}
	name := e.Name()
	if strings.TrimSpace(name) == "" {
		return errors.New("register estimator: empty name")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.byName[name]; ok {
		return fmt.Errorf("register estimator: %q is already registered", name)
	}
	registry.byName[name] = e
	return nil
}

// MustRegister is Register for package initialisation, where a clash is a programming error.
func MustRegister(e Estimator) {
	if err := Register(e); err != nil {
		panic(err)
	}
}

// Get returns the estimator registered under name. An unknown name is an error that lists the
// known names; there is no fallback.
func Get(name string) (Estimator, error) {
	registry.RLock()
	e, ok := registry.byName[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown advantage estimator %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// Names returns the registered estimator names, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.byName))
	for n := range registry.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
