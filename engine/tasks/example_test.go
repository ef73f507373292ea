package tasks_test

import (
	"fmt"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/schema"
)

// A recipe's task section becomes a task and its reward; completions of an
// example are scored against its reference answer.
func Example() {
	task, err := tasks.NewFor(schema.Task{Name: "arithmetic", TrainSize: 100, ValidationSize: 10}, schema.Knobs{Seed: 1234})
	if err != nil {
		panic(err)
	}
	reward, err := tasks.NewReward([]schema.Reward{
		{Fn: "numeric_match", Weight: 1, Tolerance: 1e-6},
		{Fn: "format", Weight: 0.1, Pattern: `-?[0-9]+`},
	}, task)
	if err != nil {
		panic(err)
	}
	ex := tasks.Example{ID: "demo", Prompt: "12+7=", Answer: "19"}
	for _, c := range []string{"19", "19 apples", "18"} {
		r, correct := reward.Score(c, ex)
		fmt.Printf("%-10q reward %.1f correct %v\n", c, r, correct)
	}
	fmt.Println(len(task.Train()), len(task.Validation()), task.Kinds())
	// Output:
	// "19"       reward 1.1 correct true
	// "19 apples" reward 1.0 correct true
	// "18"       reward 0.1 correct false
	// 100 10 [rl sft preference kto]
}
