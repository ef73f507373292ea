package estimators

import (
	"fmt"
	"slices"
	"testing"
)

// group builds a group of n trajectories of which the first `correct` are correct (reward 1).
func group(task string, n, correct int) Group {
	g := Group{TaskID: task, Role: "policy"}
	for i := range n {
		ok := i < correct
		r := 0.0
		if ok {
			r = 1
		}
		g.Trajectories = append(g.Trajectories, Trajectory{Reward: r, IsCorrect: ok})
	}
	return g
}

func taskIDs(gs []Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.TaskID)
	}
	return out
}

func TestRejectClassifiesTasksAcrossRoles(t *testing.T) {
	// Task "t" has a solver group all correct and a judge group all wrong: partially solved.
	solver, judge := group("t", 2, 2), group("t", 2, 0)
	judge.Role = "judge"
	cfg := DefaultRejectionConfig()
	cfg.FilterUniformGroups = true
	rej, err := Reject([]Group{solver, judge, group("u", 1, 1)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rej.Kept) != 0 || rej.SolvePartial != 1 || rej.SolveAll != 0 || rej.SolveNone != 0 || !rej.Proceed {
		t.Errorf("rejection %+v", rej)
	}
	if rej.Metrics["rejection/dropped_uniform"] != 2 || rej.Metrics["rejection/dropped_min_trajs"] != 1 || rej.Metrics["rejection/solve_partial_frac"] != 1 {
		t.Errorf("metrics %v", rej.Metrics)
	}
}

func TestRejectionConfigErrors(t *testing.T) {
	cfg := DefaultRejectionConfig()
	cfg.UniformTol = -1
	if _, err := FilterGroups(nil, nil, cfg); err == nil {
		t.Error("negative tolerance: no error")
	}
	if _, err := FilterGroups([][]float64{{1}}, nil, DefaultRejectionConfig()); err == nil {
		t.Error("shape mismatch: no error")
	}
	if _, err := NewAccumulator(RejectionConfig{MaxGenBatches: -1}); err == nil {
		t.Error("negative cap: no error")
	}
}

func TestAccumulatorReachesTargetAndTruncates(t *testing.T) {
	cfg := DefaultRejectionConfig()
	cfg.FilterUniformGroups = true
	cfg.TrainBatchGroups = 3
	acc, err := NewAccumulator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Batch 1: one informative group of three.
	rel, err := acc.Add([]Group{group("a", 4, 2), group("b", 4, 4), group("c", 4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Ready || rel.Skip || acc.Pending() != 1 {
		t.Fatalf("after batch 1: %+v pending %d", rel, acc.Pending())
	}
	// Batch 2: three more informative groups: 4 ≥ 3, truncated to 3 in arrival order.
	rel, err = acc.Add([]Group{group("d", 4, 1), group("e", 4, 3), group("f", 4, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Ready || !slices.Equal(taskIDs(rel.Groups), []string{"a", "d", "e"}) {
		t.Fatalf("after batch 2: ready %v groups %v", rel.Ready, taskIDs(rel.Groups))
	}
	want := map[string]float64{
		"dynamic_sampling/num_gen_batches": 2, "dynamic_sampling/groups_before": 6,
		"dynamic_sampling/groups_kept": 3, "dynamic_sampling/dropped_uniform": 2,
		"dynamic_sampling/truncated": 1, "dynamic_sampling/cap_reached": 0,
	}
	for k, w := range want {
		if rel.Metrics[k] != w {
			t.Errorf("metric %s = %v, want %v", k, rel.Metrics[k], w)
		}
	}
	if acc.Pending() != 0 {
		t.Errorf("accumulator not reset: %d pending", acc.Pending())
	}
}

func TestAccumulatorCapSkipsEmptyAndReleasesPartial(t *testing.T) {
	cfg := DefaultRejectionConfig()
	cfg.FilterUniformGroups = true
	cfg.TrainBatchGroups = 10
	cfg.MaxGenBatches = 2
	acc, err := NewAccumulator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	uniform := []Group{group("a", 4, 4), group("b", 4, 0)}
	for i := range 2 {
		rel, err := acc.Add(uniform)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (rel.Ready || rel.Skip) {
			t.Fatalf("batch 1: %+v", rel)
		}
		if i == 1 && (!rel.Skip || rel.Ready || rel.Metrics["dynamic_sampling/cap_reached"] != 1) {
			t.Fatalf("cap with nothing kept: %+v", rel)
		}
	}
	// After the skip the accumulator starts over; at the cap a non-empty batch is released.
	if _, err := acc.Add([]Group{group("c", 4, 1)}); err != nil {
		t.Fatal(err)
	}
	rel, err := acc.Add(uniform)
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Ready || !slices.Equal(taskIDs(rel.Groups), []string{"c"}) || rel.Metrics["dynamic_sampling/cap_reached"] != 1 {
		t.Errorf("cap with one kept group: %+v", rel)
	}
}

func TestAccumulatorWaitsForPartiallySolvedTasks(t *testing.T) {
	cfg := DefaultRejectionConfig()
	cfg.MinPartialSolveTasks = 2
	acc, err := NewAccumulator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Batches 0–2 carry one partially solved task in total (p1: 1 of 2 correct).
	for i := range 3 {
		rel, err := acc.Add([]Group{group(fmt.Sprint("p", i), 2, i%2), group(fmt.Sprint("s", i), 2, 2)})
		if err != nil {
			t.Fatal(err)
		}
		if rel.Ready || rel.Skip {
			t.Fatalf("batch %d released with %v partially solved tasks", i, rel.Metrics["dynamic_sampling/solve_partial"])
		}
	}
	rel, err := acc.Add([]Group{group("x", 3, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Ready || len(rel.Groups) != 7 {
		t.Errorf("after the second partial task: ready %v with %d groups", rel.Ready, len(rel.Groups))
	}
}
