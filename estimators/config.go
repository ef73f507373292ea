package estimators

import (
	"errors"
	"fmt"
	"math"
)

// Config parameterises one advantage estimator. Start from DefaultConfig: the zero value is not
// the default (NormByStd and Whiten default to true).
type Config struct {
	// Name is the registered estimator ("grpo", "rloo", "gae", "precomputed", or a custom one).
	Name string
	// NormByStd divides GRPO's centred rewards by the group std (false gives Dr.GRPO).
	NormByStd bool
	// Epsilon is ε_adv, added to a std before dividing by it.
	Epsilon float64
	// StdDDOF is the delta degrees of freedom of every group/batch std: 0 (numpy, rLLM) or 1 (torch, verl/trl).
	StdDDOF int
	// Gamma is GAE's discount γ.
	Gamma float64
	// Lambda is GAE's λ.
	Lambda float64
	// Whiten whitens GAE advantages over the valid tokens of the role's batch (returns never are).
	Whiten bool
	// WhitenEps is added to the variance before its square root when whitening.
	WhitenEps float64
	// UsePrecomputed makes Collect use the advantages the workflow supplied on the steps of a
	// group (when it supplied any) instead of running the estimator.
	UsePrecomputed bool
}

// Defaults of the estimators' papers and verl.
const (
	DefaultEpsilon   = 1e-6
	DefaultWhitenEps = 1e-8
)

// DefaultConfig returns verl's defaults: GRPO with std normalisation, ε = 1e-6, ddof 0,
// GAE γ = λ = 1 with whitening.
func DefaultConfig() Config {
	return Config{
		Name:      "grpo",
		NormByStd: true,
		Epsilon:   DefaultEpsilon,
		StdDDOF:   0,
		Gamma:     1,
		Lambda:    1,
		Whiten:    true,
		WhitenEps: DefaultWhitenEps,
	}
}

// Check reports an out-of-range parameter. It does not check that Name is registered (Get does).
func (c Config) Check() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("estimator name is empty"))
	}
	if !(c.Epsilon >= 0) || math.IsInf(c.Epsilon, 0) {
		errs = append(errs, fmt.Errorf("epsilon %v must be finite and >= 0", c.Epsilon))
	}
	if c.StdDDOF < 0 {
		errs = append(errs, fmt.Errorf("std_ddof %d must be >= 0", c.StdDDOF))
	}
	if !(c.Gamma >= 0 && c.Gamma <= 1) {
		errs = append(errs, fmt.Errorf("gamma %v must be in [0, 1]", c.Gamma))
	}
	if !(c.Lambda >= 0 && c.Lambda <= 1) {
		errs = append(errs, fmt.Errorf("lambda %v must be in [0, 1]", c.Lambda))
	}
	if !(c.WhitenEps >= 0) || math.IsInf(c.WhitenEps, 0) {
		errs = append(errs, fmt.Errorf("whiten_eps %v must be finite and >= 0", c.WhitenEps))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("estimator config %q: %w", c.Name, err)
	}
	return nil
}

// CollectConfig configures Collect: one estimator Config for every role, overridden per role.
type CollectConfig struct {
	// Default applies to every role without an entry in PerRole.
	Default Config
	// PerRole maps a role name to the estimator config of that role (rLLM's estimator map).
	PerRole map[string]Config
}

// For returns the estimator config of role.
func (c CollectConfig) For(role string) Config {
	if rc, ok := c.PerRole[role]; ok {
		return rc
	}
	return c.Default
}
