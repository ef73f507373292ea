package estimators

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// binomialPassAtK is the textbook 1 − C(n−c, k)/C(n, k) with exact big-integer binomials.
func binomialPassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	num := new(big.Int).Binomial(int64(n-c), int64(k))
	den := new(big.Int).Binomial(int64(n), int64(k))
	q, _ := new(big.Rat).SetFrac(num, den).Float64()
	return 1 - q
}

func TestPassAtKMatchesBinomials(t *testing.T) {
	for n := 1; n <= 60; n++ {
		for c := 0; c <= n; c++ {
			for k := 1; k <= n; k++ {
				got, err := PassAtK(n, c, k)
				if err != nil {
					t.Fatal(err)
				}
				if want := binomialPassAtK(n, c, k); math.Abs(got-want) > 1e-12 {
					t.Fatalf("pass@%d n=%d c=%d: %g, binomials give %g", k, n, c, got, want)
				}
			}
		}
	}
	// pass@1 is c/n.
	if got, _ := PassAtK(7, 3, 1); math.Abs(got-3.0/7) > 1e-15 {
		t.Errorf("pass@1 = %g, want 3/7", got)
	}
}

func TestPassAtKErrors(t *testing.T) {
	for _, c := range []struct{ n, c, k int }{{5, 2, 6}, {5, 6, 1}, {0, 0, 1}, {5, 2, 0}, {5, -1, 1}} {
		if _, err := PassAtK(c.n, c.c, c.k); err == nil {
			t.Errorf("PassAtK(%d, %d, %d): no error", c.n, c.c, c.k)
		}
	}
	_, err := ValidationMetrics([]ValSample{{TaskID: "a", Correct: true}, {TaskID: "a"}}, []int{3})
	if err == nil || !strings.Contains(err.Error(), `data source "unknown"`) || !strings.Contains(err.Error(), "k = 3") {
		t.Errorf("k > n: err = %v", err)
	}
}

func TestValidationMetricsPerDataSource(t *testing.T) {
	samples := []ValSample{
		{DataSource: "gsm8k", TaskID: "1", Correct: true}, {DataSource: "gsm8k", TaskID: "1"},
		{DataSource: "gsm8k", TaskID: "2"}, {DataSource: "gsm8k", TaskID: "2"},
		{DataSource: "math", TaskID: "1", Correct: true}, {DataSource: "math", TaskID: "1", Correct: true},
	}
	m, err := ValidationMetrics(samples, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"val/gsm8k/pass@1": 0.25, "val/gsm8k/pass@2": 0.5,
		"val/math/pass@1": 1, "val/math/pass@2": 1,
	}
	if len(m) != len(want) {
		t.Errorf("metrics %v, want %v", m, want)
	}
	for k, w := range want {
		if math.Abs(m[k]-w) > 1e-15 {
			t.Errorf("%s = %g, want %g", k, m[k], w)
		}
	}
}
