package engine

import (
	"stx.dev/stx/estimators"
	"stx.dev/stx/schema"
)

// workflowProblems are the graph checks of task.workflow: episodes are
// sampled on-policy by the first trainable role, which must take RL rows,
// and the generation features that re-sample single completions do not
// apply to episodes.
func workflowProblems(r *schema.Recipe, g *Graph) []Problem {
	if r.Task.Workflow == nil {
		return nil
	}
	var probs []Problem
	for _, n := range g.Nodes {
		if !n.Role.Trainable {
			continue
		}
		if !kindOf(n.Contract.Data).episodes || n.Contract.TeacherBatches {
			probs = append(probs, Problem{Path: "task.workflow", Msg: "task.workflow needs an on-policy RL role as the first trainable role (specialization " +
				n.Role.Specialization + " trains on " + string(n.Contract.Data) + " data)"})
		}
		if est := r.Knobs.EstimatorFor(n.Role.Name); estimators.NeedsOf(est).GreedyBaseline {
			probs = append(probs, Problem{Path: "knobs.estimator", Msg: est + "'s greedy baseline is a single completion: it does not apply to task.workflow episodes"})
		}
		break
	}
	if r.Knobs.DynamicSampling {
		probs = append(probs, Problem{Path: "knobs.dynamic_sampling", Msg: "dynamic_sampling is not supported with task.workflow (filter_uniform_groups is)"})
	}
	if r.Knobs.MinPartialSolveTasks > 0 {
		// It accumulates rollouts until enough tasks are partially solved, as
		// dynamic sampling does; one rollout of episodes is one batch.
		probs = append(probs, Problem{Path: "knobs.min_partial_solve_tasks", Msg: "min_partial_solve_tasks samples more rollouts per step, which task.workflow does not support (filter_uniform_groups and min_trajs_per_group apply)"})
	}
	return probs
}
