package engine

import (
	"fmt"
	"slices"
	"strings"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// knobProblems are the checks of settings that a run would refuse, or that
// would do nothing, and that depend on the recipe alone: `stx vet` reports
// them at the setting's position instead of a run failing (or silently
// ignoring a knob) after its models are built. TestVetReportsRunRefusals
// keeps each paired with the run-time refusal it anticipates.
func knobProblems(r *schema.Recipe, g *Graph) []Problem {
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}

	// One role feeds the rollout sampler.
	first := -1
	for i, role := range r.Roles {
		if !role.SyncToRollout {
			continue
		}
		if first >= 0 {
			add(fmt.Sprintf("roles[%d].sync_to_rollout", i), "role %q and role %q both push weights to the rollout sampler, which samples with one model: keep sync_to_rollout on one role (the others train on its samples)",
				r.Roles[first].Name, role.Name)
			continue
		}
		first = i
	}

	// The model each kind of specialization runs.
	for i, n := range g.Nodes {
		flow := kindOf(n.Contract.Data).velocity
		_, velocity := runtime.BuiltinVelocityConfig(n.Role.Model.Source)
		switch {
		case flow && !velocity && n.Role.Model.InitFrom == "":
			add(fmt.Sprintf("roles[%d].model.source", roleIndex(r, n.Role.Name, i)), "specialization %s trains a velocity model: model.source must be \"flow_mlp\" (got %q)", n.Contract.Name, n.Role.Model.Source)
		case !flow && velocity:
			add(fmt.Sprintf("roles[%d].model.source", roleIndex(r, n.Role.Name, i)), "%q is a velocity model; specialization %s trains a language model", n.Role.Model.Source, n.Contract.Name)
		}
		if flow && n.Role.Model.DType != "" && n.Role.Model.DType != "float32" {
			add(fmt.Sprintf("roles[%d].model.dtype", roleIndex(r, n.Role.Name, i)), "%q: %s", n.Role.Model.DType, VelocityDTypeReason)
		}
	}

	if r.Knobs.UsePrecomputedAdvantage && !slices.ContainsFunc(r.Roles, specializations.PrecomputedAdvantageSource) {
		add("knobs.use_precomputed_advantage", "no trainable role supplies precomputed advantages (specialization opd does; task.workflow episodes carry none), so the knob would change nothing: remove it")
	}

	probs = append(probs, samplingProblems(r, g)...)
	probs = append(probs, taskProblems(r)...)
	return probs
}

// roleIndex is the index of the named role in r.Roles (Graph nodes skip
// roles with an unknown specialization, so theirs may differ).
func roleIndex(r *schema.Recipe, name string, fallback int) int {
	for i, role := range r.Roles {
		if role.Name == name {
			return i
		}
	}
	return fallback
}

// samplingProblems: the rejection and dynamic-sampling knobs act on the
// groups an on-policy role samples (docs/ALGORITHMS.md §G). Elsewhere they
// would be ignored; where they can never be met, every step would be
// skipped or capped.
func samplingProblems(r *schema.Recipe, g *Graph) []Problem {
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	k := r.Knobs
	var primary *Node
	for i := range g.Nodes {
		if g.Nodes[i].Role.Trainable {
			primary = &g.Nodes[i]
			break
		}
	}
	if primary == nil {
		return nil
	}
	c := primary.Contract
	groups := kindOf(c.Data).groups && !c.CandidateActions
	if !groups {
		set := []string{}
		if k.MinTrajsPerGroup > 1 {
			set = append(set, "knobs.min_trajs_per_group")
		}
		if k.FilterUniformGroups {
			set = append(set, "knobs.filter_uniform_groups")
		}
		if k.MinPartialSolveTasks > 0 {
			set = append(set, "knobs.min_partial_solve_tasks")
		}
		if k.DynamicSampling {
			set = append(set, "knobs.dynamic_sampling")
		}
		for _, p := range set {
			add(p, "%s filters the groups of completions an on-policy role samples; role %q (specialization %s) trains on %s data without them",
				strings.TrimPrefix(p, "knobs."), primary.Role.Name, c.Name, c.Data)
		}
		return probs
	}
	if k.MinTrajsPerGroup > k.NSamplesPerPrompt {
		add("knobs.min_trajs_per_group", "min_trajs_per_group %d exceeds the %d samples of a group (n_samples_per_prompt): every group would be dropped and no step would train",
			k.MinTrajsPerGroup, k.NSamplesPerPrompt)
	}
	if k.MinPartialSolveTasks > 0 && k.MaxNumGenBatches > 0 {
		if most := k.MaxNumGenBatches * k.RolloutBatchSize; k.MinPartialSolveTasks > most {
			add("knobs.min_partial_solve_tasks", "min_partial_solve_tasks %d can never be met: a step samples at most max_num_gen_batches %d × rollout_batch_size %d = %d tasks",
				k.MinPartialSolveTasks, k.MaxNumGenBatches, k.RolloutBatchSize, most)
		}
	}
	return probs
}

// taskProblems builds a built-in synthetic task and its reward as a run
// would: their sizes and terms depend on the recipe alone (a dataset's
// depend on its files, read by the run).
func taskProblems(r *schema.Recipe) []Problem {
	switch r.Task.Name {
	case "jsonl", "json", "parquet", "":
		return nil // "": a recipe built in Go, whose task the schema never filled in
	}
	task, err := tasks.Probe(r.Task, r.Knobs)
	if err != nil {
		// The split sizes against what the task's knobs can generate: blame
		// the one the user set.
		factors := []string{"task.validation_size", "task.train_size"}
		if r.Task.Name == "arithmetic" {
			factors = append([]string{"knobs.task_ops", "knobs.task_digits"}, factors...)
		}
		return []Problem{{Msg: err.Error(), Factors: factors}}
	}
	// External terms start processes or reach servers: a run checks them.
	var local []schema.Reward
	for _, t := range r.Task.Reward {
		if t.Fn != "command" && t.Fn != "http" {
			local = append(local, t)
		}
	}
	if len(local) == 0 && len(r.Task.Reward) > 0 {
		return nil
	}
	rew, err := tasks.NewReward(local, task)
	if err != nil {
		return []Problem{{Path: "task.reward", Msg: err.Error()}}
	}
	rew.Close()
	return nil
}
