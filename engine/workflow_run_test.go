package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/engine/rundir"
)

// TestRunWorkflowDeterministic runs grpo_calculator twice with one seed:
// the episodes, rewards, advantages and losses must be the same.
func TestRunWorkflowDeterministic(t *testing.T) {
	sets := []string{"knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.eval_every=0", "knobs.log_episodes_every=1", "task.validation_size=4", "task.workflow.max_turns=2",
		"task.workflow.n_parallel_tasks=3", "knobs.train_batch_size=2", "knobs.micro_batch_size=2"}
	var runs [2][]map[string]any
	var episodes [2]string
	for i := range runs {
		cat := runCatalog(t, "grpo_calculator", sets...)
		res, err := Run(context.Background(), cat, "grpo_calculator", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = trainRecords(metrics(t, res.Dir))
		data, err := os.ReadFile(filepath.Join(res.Dir, rundir.EpisodesFile))
		if err != nil {
			t.Fatal(err)
		}
		episodes[i] = string(data)
	}
	if len(runs[0]) == 0 || len(runs[0]) != len(runs[1]) {
		t.Fatalf("%d and %d train records", len(runs[0]), len(runs[1]))
	}
	last := runs[0][len(runs[0])-1]
	for _, key := range []string{"workflow/episodes", "workflow/turns/mean", "workflow/termination/max_turns", "reward/actor/mean",
		"advantage/actor/mean", "actor/loss", "val/accuracy", "val/workflow/turns/mean"} {
		num(t, last, key)
	}
	if last["workflow/episodes"].(float64) != 4 {
		t.Errorf("workflow/episodes = %v, want 4", last["workflow/episodes"])
	}
	for i := range runs[0] {
		for k, v := range runs[0][i] {
			if strings.HasPrefix(k, "time/") || strings.HasPrefix(k, "perf/") {
				continue
			}
			if runs[1][i][k] != v {
				t.Errorf("record %d: %s = %v then %v", i, k, v, runs[1][i][k])
			}
		}
	}
	if episodes[0] != episodes[1] {
		t.Errorf("episodes differ between runs with one seed")
	}
	if n := strings.Count(episodes[0], "\n"); n != 8 {
		t.Errorf("%d episodes logged, want 8", n)
	}
}
