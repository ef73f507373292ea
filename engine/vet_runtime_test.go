package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx"
	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// TestVetReportsRunRefusals walks the run-time checks that depend on the
// recipe alone: each case is a catalog recipe with settings a run would
// refuse, or would silently not act on. The run's own code is exercised
// (runs: it must refuse, or show the knob has no effect), and `stx vet`'s
// pipeline (Load) must report the setting at its --set position first.
func TestVetReportsRunRefusals(t *testing.T) {
	cases := []struct {
		name   string
		recipe string
		sets   []string
		path   string // the error's path below recipes.<recipe>
		msg    string // a fragment of its message
		// runs exercises the run-time code on the recipe vet did not check:
		// an error is the run's refusal; nil, a knob the run does not act on
		// (the function checks that itself and fails the test otherwise).
		runs func(t *testing.T, r *schema.Recipe) error
	}{
		{
			name: "task sizes beyond the distinct prompts", recipe: "grpo",
			sets: []string{"task.train_size=200"},
			path: "task.train_size", msg: "exceed the 100 distinct prompts",
			runs: func(t *testing.T, r *schema.Recipe) error {
				_, err := tasks.NewFor(r.Task, r.Knobs)
				return err
			},
		},
		{
			name: "task digits that shrink the task", recipe: "grpo",
			sets: []string{"task.train_size=2000", "knobs.task_digits=1"},
			path: "knobs.task_digits", msg: "exceed the 100 distinct prompts",
			runs: func(t *testing.T, r *schema.Recipe) error {
				_, err := tasks.NewFor(r.Task, r.Knobs)
				return err
			},
		},
		{
			name: "reward terms on a task that scores points", recipe: "flow_grpo",
			sets: []string{`task.reward=[{fn: "exact_match"}]`},
			path: "task.reward", msg: "scores generated points",
			runs: func(t *testing.T, r *schema.Recipe) error {
				task, err := tasks.NewFor(r.Task, r.Knobs)
				if err != nil {
					t.Fatal(err)
				}
				_, err = tasks.NewReward(r.Task.Reward, task)
				return err
			},
		},
		{
			name: "a language model's source on a velocity role", recipe: "flow_matching",
			sets: []string{`roles.velocity.model.source="tiny"`},
			path: "roles[0].model.source", msg: `must be "flow_mlp"`,
			runs: func(t *testing.T, r *schema.Recipe) error {
				if _, ok := runtime.BuiltinVelocityConfig(r.Roles[0].Model.Source); !ok {
					return errors.New("velocityRole refuses the source")
				}
				return nil
			},
		},
		{
			name: "bf16 on a velocity model", recipe: "flow_matching",
			sets: []string{`roles.velocity.model.dtype="bfloat16"`},
			path: "roles[0].model.dtype", msg: "computes in float32 only",
			runs: func(t *testing.T, r *schema.Recipe) error {
				// velocityRole refuses it (TestMixedPrecisionRefusedForVelocityModels runs it).
				return errors.New(VelocityDTypeReason)
			},
		},
		{
			name: "groups that can never be large enough", recipe: "grpo",
			sets: []string{"knobs.min_trajs_per_group=9"},
			path: "knobs.min_trajs_per_group", msg: "every group would be dropped",
			runs: func(t *testing.T, r *schema.Recipe) error {
				rej, err := estimators.Reject(groupsOf(r.Knobs.RolloutBatchSize, r.Knobs.NSamplesPerPrompt), rejection(r.Knobs))
				if err != nil {
					t.Fatal(err)
				}
				if len(rej.Kept) != 0 {
					t.Fatalf("kept %d groups", len(rej.Kept))
				}
				return errors.New("every step is skipped")
			},
		},
		{
			name: "partially solved tasks beyond what a step samples", recipe: "grpo",
			sets: []string{"knobs.min_partial_solve_tasks=40", "knobs.max_num_gen_batches=4"},
			path: "knobs.min_partial_solve_tasks", msg: "can never be met",
			runs: func(t *testing.T, r *schema.Recipe) error {
				cfg := rejection(r.Knobs)
				cfg.MaxGenBatches = r.Knobs.MaxNumGenBatches
				acc, err := estimators.NewAccumulator(cfg)
				if err != nil {
					t.Fatal(err)
				}
				for {
					rel, err := acc.Add(groupsOf(r.Knobs.RolloutBatchSize, r.Knobs.NSamplesPerPrompt))
					if err != nil {
						t.Fatal(err)
					}
					if rel.Ready || rel.Skip {
						if rel.Metrics["dynamic_sampling/cap_reached"] != 1 {
							t.Fatalf("released without reaching the cap: %v", rel.Metrics)
						}
						return errors.New("every step is released by the cap")
					}
				}
			},
		},
		{
			name: "dynamic sampling on a recipe without groups", recipe: "sft",
			sets: []string{"knobs.dynamic_sampling=true"},
			path: "knobs.dynamic_sampling", msg: "trains on sft data",
			runs: func(t *testing.T, r *schema.Recipe) error { return offlineIgnores(t, r) },
		},
		{
			name: "filtering uniform groups of preference pairs", recipe: "dpo",
			sets: []string{"knobs.filter_uniform_groups=true"},
			path: "knobs.filter_uniform_groups", msg: "trains on preference data",
			runs: func(t *testing.T, r *schema.Recipe) error { return offlineIgnores(t, r) },
		},
		{
			name: "a second role feeding the sampler", recipe: "ppo",
			sets: []string{"roles.value.sync_to_rollout=true"},
			path: "roles[1].sync_to_rollout", msg: "both push weights to the rollout sampler",
			runs: func(t *testing.T, r *schema.Recipe) error {
				// newLoop's rule: the sampler takes the first sync_to_rollout role.
				n := 0
				for _, role := range r.Roles {
					if role.SyncToRollout {
						n++
					}
				}
				if n != 2 {
					t.Fatalf("%d sync_to_rollout roles", n)
				}
				return nil
			},
		},
		{
			name: "precomputed advantages nothing supplies", recipe: "grpo",
			sets: []string{"knobs.use_precomputed_advantage=true"},
			path: "knobs.use_precomputed_advantage", msg: "no trainable role supplies precomputed advantages",
			runs: func(t *testing.T, r *schema.Recipe) error {
				if slices.ContainsFunc(r.Roles, specializations.PrecomputedAdvantageSource) {
					t.Fatal("a grpo role supplies advantages")
				}
				return nil // the estimator runs either way
			},
		},
		{
			name: "accumulating rollouts of workflow episodes", recipe: "grpo_calculator",
			sets: []string{"knobs.min_partial_solve_tasks=2"},
			path: "knobs.min_partial_solve_tasks", msg: "task.workflow does not support",
			runs: func(t *testing.T, r *schema.Recipe) error { return nil }, // one rollout of episodes is one batch
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The recipe as a run would take it, without vet's own checks.
			base, err := schema.Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir(), Only: c.recipe, Sets: c.sets, Enums: Enums()})
			if err != nil {
				t.Fatalf("the schema refuses %v: %v", c.sets, err)
			}
			if err := c.runs(t, base.Recipes[c.recipe]); err != nil {
				t.Logf("run: %v", err)
			}
			_, err = Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir(), Only: c.recipe, Sets: c.sets})
			var l schema.List
			if !errors.As(err, &l) {
				t.Fatalf("vet passes %v (err %v)", c.sets, err)
			}
			want := "recipes." + c.recipe + "." + c.path
			for _, e := range l {
				if e.Path == want || e.Path == "recipes."+c.recipe+"."+base.UserPath(c.recipe, c.path) {
					if !strings.Contains(e.Msg, c.msg) {
						t.Errorf("%s: %q, want it to say %q", e.Path, e.Msg, c.msg)
					}
					if e.Pos.File != "--set" {
						t.Errorf("%s reported at %s, want the --set that set it", e.Path, e.Pos)
					}
					return
				}
			}
			t.Errorf("vet reports %v, want an error at %s", l, want)
		})
	}
}

// groupsOf is a rollout of n groups of k samples, each task partially solved.
func groupsOf(n, k int) []estimators.Group {
	gs := make([]estimators.Group, n)
	for i := range gs {
		gs[i].TaskID = fmt.Sprint(i)
		for j := range k {
			gs[i].Trajectories = append(gs[i].Trajectories, estimators.Trajectory{Reward: float64(j % 2), IsCorrect: j%2 == 1})
		}
	}
	return gs
}

func rejection(k schema.Knobs) estimators.RejectionConfig {
	return estimators.RejectionConfig{MinTrajsPerGroup: max(k.MinTrajsPerGroup, 1), FilterUniformGroups: k.FilterUniformGroups,
		UniformTol: 1e-8, MinPartialSolveTasks: k.MinPartialSolveTasks}
}

// offlineIgnores checks that the recipe's first trainable role draws its
// rows from the dataset (the offline strategy, which reads no sampling knob).
func offlineIgnores(t *testing.T, r *schema.Recipe) error {
	t.Helper()
	c, err := specializations.Get(r.Roles[0].Specialization)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := chooseStrategy(c, r.Knobs, estimators.Needs{}).(offline); !ok {
		t.Fatalf("specialization %s samples on-policy", c.Name)
	}
	return nil
}

// TestMinPartialSolveTasksAccumulates: without dynamic sampling,
// min_partial_solve_tasks samples more batches until enough tasks are
// partially solved (docs/ALGORITHMS.md §G step 4), up to max_num_gen_batches.
func TestMinPartialSolveTasksAccumulates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs grpo")
	}
	sets := []string{"knobs.num_rollout=1", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=4",
		"knobs.eval_every=0", "knobs.eval_before_train=false", "knobs.save_every=0", "task.validation_size=4",
		"knobs.dynamic_sampling=false", "knobs.filter_uniform_groups=false"}
	for _, c := range []struct {
		extra   []string
		batches float64
	}{
		// 6 partial solves need all 3 batches of 2 tasks (the cap releases them otherwise).
		{[]string{"knobs.min_partial_solve_tasks=6", "knobs.max_num_gen_batches=3"}, 3},
		{[]string{"knobs.min_partial_solve_tasks=1", "knobs.max_num_gen_batches=1"}, 1},
	} {
		cat := runCatalog(t, "grpo", append(sets, c.extra...)...)
		res, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: t.TempDir(), Quiet: true})
		if err != nil {
			t.Fatal(err)
		}
		recs := trainRecords(metrics(t, res.Dir))
		if len(recs) == 0 {
			t.Fatalf("%v: no step trained", c.extra)
		}
		if got := num(t, recs[0], "dynamic_sampling/num_gen_batches"); got != c.batches {
			t.Errorf("%v: %g generation batches, want %g", c.extra, got, c.batches)
		}
	}
}
