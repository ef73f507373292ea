package engine

import (
	"fmt"
	"slices"

	"stx.dev/stx/engine/remote"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// rolloutEngineProblems are the checks of the recipe's rollout block (an external rollout
// engine) and of max_staleness, which needs one.
func rolloutEngineProblems(r *schema.Recipe, g *Graph) []Problem {
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	ro := r.Rollout
	switch k := r.Knobs.MaxStaleness; {
	case k > 0 && ro == nil:
		add("knobs.max_staleness", "max_staleness %d needs a rollout engine (a rollout block with servers): the in-process sampler reads the weights being trained, so it cannot generate while they train", k)
	case k > 0 && r.Task.RewardRole != "":
		add("knobs.max_staleness", "max_staleness %d generates the next rollout while this one trains, and task.reward_role %q would score it on the backend meanwhile: use the task's reward functions, or max_staleness 0", k, r.Task.RewardRole)
	}
	if ro == nil {
		return probs
	}
	if k := r.Knobs.MaxStaleness; ro.SleepBetween && k > 0 {
		add("rollout.sleep_between", "sleep_between releases the servers' memory while the trainer trains, and max_staleness %d has them generate meanwhile: set one of them off", k)
	}
	for i, s := range ro.Servers {
		if err := remote.CheckURL(s); err != nil {
			add(fmt.Sprintf("rollout.servers[%d]", i), "%v", err)
		}
		if j := slices.Index(ro.Servers, s); j < i {
			add(fmt.Sprintf("rollout.servers[%d]", i), "server %q is listed twice (also servers[%d])", s, j)
		}
	}
	// The role whose weights the servers load, and what the trained role samples.
	if i := rolloutRole(r); i >= 0 {
		role := r.Roles[i]
		if isVelocityRole(g, role.Name) {
			add("rollout", "role %q (specialization %s) is a velocity model: the flow recipes sample in-process; remove the rollout block", role.Name, role.Specialization)
		}
		if role.RolloutDevice != nil {
			add(fmt.Sprintf("roles[%d].rollout_device", i), "role %q samples on the rollout engine's servers: rollout_device places an in-process sampler, which a rollout block replaces; remove one of them", role.Name)
		}
	}
	if n := slices.IndexFunc(g.Nodes, func(n Node) bool { return n.Role.Trainable }); n >= 0 {
		switch d := g.Nodes[n].Contract.Data; d {
		case specializations.DataSFT, specializations.DataPreference, specializations.DataKTO, specializations.DataFlow:
			add("rollout", "role %q trains on %s data from the dataset: nothing is sampled, so a rollout engine would never be asked; remove the rollout block", g.Nodes[n].Role.Name, d)
		}
	}
	return probs
}
