package estimators_test

import (
	"fmt"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
)

func ExampleRolloutAdvantages() {
	// One prompt, four samples of one role, binary rewards; each row is 2 prompt + 2 response tokens.
	r := &rollout.Rollout{PromptLen: []int{2, 2, 2, 2}, Reward: []float64{1, 0, 0, 1},
		GroupID: []string{"q1", "q1", "q1", "q1"}}
	for range 4 {
		r.Tokens = append(r.Tokens, []int32{11, 12, 13, 14})
	}
	cfg := estimators.Config{Name: estimators.GRPO, NormByStd: true, Epsilon: estimators.DefaultEpsilon}
	if _, err := estimators.RolloutAdvantages(r, cfg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.4f\n", r.Tok[rollout.KeyAdvantages][0])
	fmt.Printf("%.4f\n", r.Tok[rollout.KeyAdvantages][1])
	// Output:
	// [0.0000 0.0000 1.0000 1.0000]
	// [0.0000 0.0000 -1.0000 -1.0000]
}

func ExampleGet() {
	_, err := estimators.Get("gpro")
	fmt.Println(err != nil)
	// Output: true
}
