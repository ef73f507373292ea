package runtime

import "testing"

// Micro-batch metrics are shares of the mini-batch (they add up) except
// extremes, which combine as extremes.
func TestCombineMetric(t *testing.T) {
	fold := func(name string, vs ...float64) float64 {
		acc := 0.0
		for i, v := range vs {
			acc = CombineMetric(name, acc, v, i == 0)
		}
		return acc
	}
	for _, tc := range []struct {
		name string
		vs   []float64
		want float64
	}{
		{"clipfrac", []float64{0.1, 0.25}, 0.35},
		{"ratio_max", []float64{1.5, 3, 2}, 3},
		{"ratio_min", []float64{0.9, 0.5, 0.7}, 0.5},
		{"ratio_max", []float64{-2, -1}, -1}, // the first value seeds, not zero
		{"pg_loss", []float64{-1}, -1},
	} {
		if got := fold(tc.name, tc.vs...); got != tc.want {
			t.Errorf("%s over %v = %g, want %g", tc.name, tc.vs, got, tc.want)
		}
	}
}
