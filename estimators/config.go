package estimators

import (
	"errors"
	"fmt"
	"math"
)

// Config parameterises one advantage estimator. The zero value is not verl's default, which
// has NormByStd and Whiten true, Epsilon DefaultEpsilon, WhitenEps DefaultWhitenEps and
// Gamma = Lambda = 1.
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
	// UsePrecomputed carries the recipe's use_precomputed_advantage. RolloutAdvantages does not
	// read it: the supplied advantages are used when Name is "precomputed".
	UsePrecomputed bool
}

// Defaults of the estimators' papers and verl.
const (
	DefaultEpsilon   = 1e-6
	DefaultWhitenEps = 1e-8
)

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
