package estimators_test

import (
	"fmt"

	"stx.dev/stx/estimators"
)

func ExampleCollect() {
	// One prompt, four samples of one role, binary rewards; each step is 2 prompt + 2 response tokens.
	step := estimators.Step{Tokens: []int32{11, 12, 13, 14}, PromptLen: 2}
	var trajs []estimators.Trajectory
	for _, r := range []float64{1, 0, 0, 1} {
		trajs = append(trajs, estimators.Trajectory{Reward: r, IsCorrect: r == 1, Steps: []estimators.Step{step}})
	}
	groups := []estimators.Group{{TaskID: "q1", Role: "policy", Trajectories: trajs}}

	res, err := estimators.Collect(groups, estimators.CollectConfig{Default: estimators.DefaultConfig()})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.4f\n", res.Advantages[0][0][0])
	fmt.Printf("%.4f\n", res.Advantages[0][1][0])
	fmt.Println(res.Metrics["reward/policy/mean"], res.Metrics["advantage/policy/fraction_zero"])
	// Output:
	// [0.0000 0.0000 1.0000 1.0000]
	// [0.0000 0.0000 -1.0000 -1.0000]
	// 0.5 0
}

func ExampleGet() {
	_, err := estimators.Get("gpro")
	fmt.Println(err != nil)
	// Output: true
}
