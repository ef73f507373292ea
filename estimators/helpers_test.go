package estimators

// Shorthands of the tests.

// Estimate looks up cfg.Name, checks cfg, and runs the estimator on in.
func Estimate(in Input, cfg Config) (Output, error) {
	if err := cfg.Check(); err != nil {
		return Output{}, err
	}
	e, err := Get(cfg.Name)
	if err != nil {
		return Output{}, err
	}
	return e.Estimate(in, cfg)
}

// DefaultRejectionConfig returns the defaults: min 2 trajectories per group, uniform
// groups kept, tolerance 1e-8, one partially solved task, no batch target, no cap.
func DefaultRejectionConfig() RejectionConfig {
	return RejectionConfig{MinTrajsPerGroup: 2, UniformTol: 1e-8, MinPartialSolveTasks: 1}
}

// Pending returns how many kept groups are waiting for the next release.
func (a *Accumulator) Pending() int { return len(a.kept) }

// ScalarAdvantage returns a supplied advantage broadcast to every response token.
func ScalarAdvantage(v float64) *Advantage { return &Advantage{IsScalar: true, Scalar: v} }

// defaultConfig returns verl's defaults: GRPO with std normalisation, ε = 1e-6, ddof 0,
// GAE γ = λ = 1 with whitening.
func defaultConfig() Config {
	return Config{Name: GRPO, NormByStd: true, Epsilon: DefaultEpsilon, Gamma: 1, Lambda: 1,
		Whiten: true, WhitenEps: DefaultWhitenEps}
}
