package runtime

import "fmt"

// validateLimits checks the config's sizes that bound what is allocated
// from it, beyond Validate's consistency checks: the longest sequence must
// be known (positive), or no length check before sampling or scoring could
// catch a sequence the model was never meant to see.
func validateLimits(c Config) error {
	if c.MaxPositions <= 0 {
		return fmt.Errorf("model config: max_position_embeddings is missing or not positive (%d): the model's longest sequence must be known", c.MaxPositions)
	}
	return nil
}
