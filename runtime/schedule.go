package runtime

import (
	"fmt"
	"math"
)

// Schedule is a learning-rate schedule (as verl's): linear warmup from 0, then constant,
// linear or cosine decay to MinLRRatio·BaseLR at TotalSteps.
type Schedule struct {
	Kind        string  // "constant" (default), "linear" or "cosine"
	BaseLR      float64 // peak learning rate
	TotalSteps  int     // T, the number of optimizer steps of the run
	WarmupSteps int     // W if ≥ 0; a negative value means floor(WarmupRatio·T)
	WarmupRatio float64 // used when WarmupSteps < 0
	MinLRRatio  float64 // m, the floor of linear/cosine decay as a fraction of BaseLR
}

// Validate checks the schedule's parameters.
func (s Schedule) Validate() error {
	switch s.Kind {
	case "", "constant", "linear", "cosine":
	default:
		return fmt.Errorf("lr schedule: unknown kind %q (want constant, linear or cosine)", s.Kind)
	}
	if s.BaseLR < 0 || math.IsNaN(s.BaseLR) || math.IsInf(s.BaseLR, 0) {
		return fmt.Errorf("lr schedule: base lr %g must be finite and ≥ 0", s.BaseLR)
	}
	if s.TotalSteps < 0 || s.WarmupRatio < 0 || s.WarmupRatio > 1 || s.MinLRRatio < 0 || s.MinLRRatio > 1 {
		return fmt.Errorf("lr schedule: total steps %d, warmup ratio %g, min lr ratio %g out of range",
			s.TotalSteps, s.WarmupRatio, s.MinLRRatio)
	}
	return nil
}

// warmup returns W.
func (s Schedule) warmup() int {
	if s.WarmupSteps >= 0 {
		return s.WarmupSteps
	}
	return int(math.Floor(s.WarmupRatio * float64(s.TotalSteps)))
}

// Multiplier returns the factor applied to BaseLR at 0-based optimizer step step.
func (s Schedule) Multiplier(step int) float64 {
	w := s.warmup()
	if step < w {
		return float64(step) / float64(w) // 0 at step 0 (HF/verl convention)
	}
	p := float64(step-w) / float64(max(1, s.TotalSteps-w))
	p = min(max(p, 0), 1)
	m := s.MinLRRatio
	switch s.Kind {
	case "linear":
		return m + (1-m)*(1-p)
	case "cosine":
		return m + (1-m)*0.5*(1+math.Cos(math.Pi*p))
	default:
		return 1
	}
}

// LR returns the learning rate at 0-based optimizer step step.
func (s Schedule) LR(step int) float64 { return s.BaseLR * s.Multiplier(step) }
