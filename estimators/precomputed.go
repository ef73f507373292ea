package estimators

import (
	"fmt"
	"math"
)

// Advantage is an advantage a workflow or specialization supplies for one step: either
// one scalar for every response token, or one value per response token.
type Advantage struct {
	// IsScalar selects Scalar; otherwise PerToken is used.
	IsScalar bool
	// Scalar is broadcast to every response token when IsScalar.
	Scalar float64
	// PerToken holds one advantage per response token (Tokens[PromptLen:]) of the step.
	PerToken []float64
}

// PerTokenAdvantage returns a supplied advantage with one value per response token.
func PerTokenAdvantage(v []float64) *Advantage { return &Advantage{PerToken: v} }

// SupplyStatus says how a step's supplied advantage was used.
type SupplyStatus int

// Supply statuses of a step's precomputed advantage.
const (
	SuppliedOK          SupplyStatus = iota // used as given
	SuppliedMissing                         // no advantage: zeros
	SuppliedWrongLength                     // per-token list of the wrong length: zeros
)

// PrecomputedTokens expands a supplied advantage to responseLen per-token values: a
// per-token list of the right length is used as is, a scalar is broadcast, and a missing
// advantage or a list of the wrong length gives zeros. status says which case applied.
func PrecomputedTokens(a *Advantage, responseLen int) (vals []float64, status SupplyStatus) {
	vals = make([]float64, responseLen)
	switch {
	case a == nil:
		return vals, SuppliedMissing
	case a.IsScalar:
		for i := range vals {
			vals[i] = a.Scalar
		}
		return vals, SuppliedOK
	case len(a.PerToken) != responseLen:
		return vals, SuppliedWrongLength
	}
	copy(vals, a.PerToken)
	return vals, SuppliedOK
}

// precomputedEstimator is the registered "precomputed": per-token advantages supplied by a
// workflow or specialization (on-policy distillation, SFT-as-RL, custom), masked, with no group
// or batch normalisation.
type precomputedEstimator struct{}

func (precomputedEstimator) Name() string { return Precomputed }
func (precomputedEstimator) Level() Level { return Token }

func (precomputedEstimator) Estimate(in Input, _ Config) (Output, error) {
	if len(in.Supplied) != len(in.Mask) {
		return Output{}, fmt.Errorf("%s: %d supplied advantages for %d rows", Precomputed, len(in.Supplied), len(in.Mask))
	}
	if in.PromptLen != nil && len(in.PromptLen) != len(in.Mask) {
		return Output{}, fmt.Errorf("%s: %d prompt lengths for %d rows", Precomputed, len(in.PromptLen), len(in.Mask))
	}
	out := Output{TokenAdvantages: make([][]float64, len(in.Mask))}
	var missing, wrong int
	for b, m := range in.Mask {
		p := 0
		if in.PromptLen != nil {
			p = in.PromptLen[b]
		}
		if p < 0 || p > len(m) {
			return Output{}, fmt.Errorf("%s: row %d: prompt length %d outside [0, %d]", Precomputed, b, p, len(m))
		}
		vals, status := PrecomputedTokens(in.Supplied[b], len(m)-p)
		switch status {
		case SuppliedMissing:
			missing++
		case SuppliedWrongLength:
			wrong++
		}
		row := make([]float64, len(m))
		for t, v := range vals {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return Output{}, fmt.Errorf("%s: row %d response token %d: advantage %v is not finite", Precomputed, b, t, v)
			}
			row[p+t] = masked(v, m[p+t])
		}
		out.TokenAdvantages[b] = row
	}
	if missing > 0 || wrong > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf(
			"precomputed advantages: %d of %d steps had none and %d had a per-token list of the wrong length; their advantages are 0",
			missing, len(in.Mask), wrong))
	}
	return out, nil
}
