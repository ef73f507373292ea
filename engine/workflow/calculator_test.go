package workflow

import "testing"

// TestCalculatorRounding: results print with up to 6 decimals, and a
// negative value that rounds to zero prints 0, not -0.
func TestCalculatorRounding(t *testing.T) {
	ans, _ := evalExpr("1")
	for _, tc := range []struct{ action, obs string }{
		{"calc: -1/3000000", "result: 0\n"},
		{"calc: 1/3000000", "result: 0\n"},
		{"calc: -1/3", "result: -0.333333\n"},
		{"calc: -1/2000000", "result: -0.000001\n"},
		{"calc: 0-0", "result: 0\n"},
		{"calc: 2.5-0.5", "result: 2\n"},
	} {
		if rep := calcStep(tc.action, ans); rep["observation"] != tc.obs {
			t.Errorf("%q observes %q, want %q", tc.action, rep["observation"], tc.obs)
		}
	}
}
