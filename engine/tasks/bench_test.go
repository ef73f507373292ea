package tasks

import (
	"testing"

	"stx.dev/stx/schema"
)

// BenchmarkNewArithmetic builds the default-sized arithmetic task (2000 +
// 200 examples), the cost paid once per run.
func BenchmarkNewArithmetic(b *testing.B) {
	for b.Loop() {
		if _, err := NewArithmetic(ArithmeticConfig{}, 2000, 200, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScore scores one completion with three shaping terms, the cost
// paid per sampled completion.
func BenchmarkScore(b *testing.B) {
	rw, err := NewReward([]schema.Reward{
		{Fn: "numeric_match", Weight: 1, Tolerance: 1e-6},
		{Fn: "format", Weight: 0.1, Pattern: `-?[0-9]+`},
		{Fn: "length_penalty", Weight: 1, TargetLength: 3, Scale: 0.1},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ex := Example{Answer: "119"}
	for b.Loop() {
		rw.Score("119 is the answer", ex)
	}
}
