package estimators

// Needs are what an estimator asks of the rollout and the recipe beyond one reward per
// trajectory. The engine and the specializations read them, so that no caller switches on an
// estimator's name and a newly registered estimator brings its own.
type Needs struct {
	// Groups: the baseline is a statistic of the other samples of the same prompt, so every
	// prompt needs at least two samples (n_samples_per_prompt ≥ 2).
	Groups bool
	// GreedyBaseline: the baseline is the reward of one greedy completion per prompt, which the
	// rollout side samples and stores in Row[rollout.KeyGreedyReward]. A multi-turn episode
	// has no single greedy completion.
	GreedyBaseline bool
	// Values: per-token critic values of the rollout (Tok[rollout.KeyValues]).
	Values bool
}

// Needer is implemented by estimators whose Needs are not the zero value.
type Needer interface {
	Needs() Needs
}

// WithNeeds returns e reporting n from Needs; its name, level and estimates are e's.
func WithNeeds(e Estimator, n Needs) Estimator {
	return needsEstimator{Estimator: e, needs: n}
}

type needsEstimator struct {
	Estimator
	needs Needs
}

func (e needsEstimator) Needs() Needs { return e.needs }

// NeedsOf returns the Needs of the estimator registered under name: the zero value for an
// estimator that needs only rewards, or for an unknown name (Get reports that one).
func NeedsOf(name string) Needs {
	e, err := Get(name)
	if err != nil {
		return Needs{}
	}
	if n, ok := e.(Needer); ok {
		return n.Needs()
	}
	return Needs{}
}
