package schema

import (
	"encoding/json"
	"fmt"
)

// Terms is a knob that names one term or a list of terms (knobs.dpo_loss_type): a recipe
// writes "ipo" or ["sigmoid", "sft"], as TRL's loss_type takes a string or a list. One term
// is written back as a string, so an exported recipe reads as it was written.
type Terms []string

// UnmarshalJSON accepts a string or a list of strings.
func (t *Terms) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*t = Terms{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("want a string or a list of strings: %w", err)
	}
	*t = list
	return nil
}

// MarshalJSON writes one term as a string and several as a list.
func (t Terms) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

// checkTerms is what CUE does not say of dpo_loss_type and dpo_loss_weights: one weight
// per term (or none), and no term twice.
func (c *Catalog) checkTerms(r *Recipe) List {
	var errs List
	k := r.Knobs
	if n, w := len(k.DPOLossType), len(k.DPOLossWeights); w != 0 && w != n {
		errs = append(errs, c.Err(r.Name, "knobs.dpo_loss_weights",
			"%d weights for the %d terms of dpo_loss_type %v: give one weight per term, or none for all 1", w, n, []string(k.DPOLossType)))
	}
	seen := map[string]bool{}
	for _, t := range k.DPOLossType {
		if seen[t] {
			errs = append(errs, c.Err(r.Name, "knobs.dpo_loss_type", "term %q appears twice", t))
		}
		seen[t] = true
	}
	return errs
}
