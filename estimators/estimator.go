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

// Input is the data of one role's advantage batch. Outcome estimators use Rewards (and
// Baselines); token estimators use the per-token rows. Unused fields may be nil.
type Input struct {
	// Rewards[g][i] is the scalar reward of trajectory i of group g.
	Rewards [][]float64
	// Baselines[g][i] is an external per-trajectory baseline (ReMax: the reward of the greedy
	// rollout of the same prompt). Baselines[g] is nil when group g has none.
	Baselines [][]float64

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

// OutcomeFunc computes one advantage per trajectory from grouped rewards (and optional
// per-trajectory baselines): the shape of every outcome estimator.
type OutcomeFunc func(rewards, baselines [][]float64, cfg Config) ([][]float64, error)

// NewOutcome wraps an OutcomeFunc as an Outcome-level Estimator, the easy way to register a
// custom group-baseline estimator. Input rewards are checked to be finite before fn runs.
func NewOutcome(name string, fn OutcomeFunc) Estimator {
	return outcomeEstimator{name: name, fn: fn}
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
	adv, err := e.fn(in.Rewards, in.Baselines, cfg)
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
