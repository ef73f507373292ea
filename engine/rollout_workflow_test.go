package engine

import (
	"math"
	"testing"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/engine/workflow"
	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
)

// episode builds an episode whose step s has a 2+s-token prompt and an
// (s+1)-token action, with the given step rewards.
func episode(i int, task string, term workflow.Termination, rewards ...float64) *workflow.Episode {
	ep := &workflow.Episode{Index: i, Task: workflow.Task{ID: task}, Termination: term, Attempts: 1}
	for s, r := range rewards {
		prompt := make([]int32, 2+s)
		action := make([]int32, s+1)
		lps := make([]float32, s+1)
		for t := range action {
			action[t], lps[t] = int32(10+t), -0.5
		}
		ep.Steps = append(ep.Steps, workflow.Step{Action: workflow.Action{Text: "a", PromptTokens: prompt, Tokens: action, LogProbs: lps}, Reward: r})
	}
	return ep
}

// TestWorkflowRowsBroadcast checks that multi-step episodes become one row
// per step sharing a trajectory, that compact filtering drops the filtered
// episodes, and that the GRPO advantage of each trajectory (from its total
// reward) reaches every action token of every step and no prompt token.
func TestWorkflowRowsBroadcast(t *testing.T) {
	w := &workflowGen{filter: []workflow.Termination{workflow.TermError, workflow.TermTimeout}}
	eps := []*workflow.Episode{
		episode(0, "a", workflow.TermDone, 0, 0, 1),  // 3 steps, total 1
		episode(1, "a", workflow.TermMaxTurns, 0, 0), // 2 steps, total 0
		episode(2, "a", workflow.TermError),          // filtered, no steps
		episode(3, "b", workflow.TermDone, 0.5),      // group b: one trajectory
		episode(4, "b", workflow.TermTimeout, 0.25),  // filtered although it has a step
	}
	owners := []tasks.Example{{ID: "a"}, {ID: "a"}, {ID: "a"}, {ID: "b"}, {ID: "b"}}
	k := schema.Knobs{CorrectThreshold: 1}
	b, err := w.rows(eps, owners, "actor", k)
	if err != nil {
		t.Fatal(err)
	}
	d := b.data
	if d.Len() != 6 {
		t.Fatalf("%d rows, want 6 (3 + 2 + 1)", d.Len())
	}
	wantTraj := []int{0, 0, 0, 1, 1, 2}
	wantReward := []float64{1, 1, 1, 0, 0, 0.5}
	wantStep := []float64{0, 0, 1, 0, 0, 0.5}
	for i := range wantTraj {
		if d.Traj[i] != wantTraj[i] || d.Reward[i] != wantReward[i] || d.Row[KeyStepReward][i] != wantStep[i] {
			t.Errorf("row %d: traj %d reward %g step reward %g", i, d.Traj[i], d.Reward[i], d.Row[KeyStepReward][i])
		}
	}
	if got := b.wf.firstRow; got[0] != 0 || got[1] != 3 || got[2] != -1 || got[3] != 5 || got[4] != -1 {
		t.Errorf("first rows %v", got)
	}
	if d.Row[rollout.KeyIsCorrect][0] != 1 || d.Row[rollout.KeyIsCorrect][3] != 0 {
		t.Errorf("is_correct %v", d.Row[rollout.KeyIsCorrect])
	}
	for name, want := range map[string]float64{"workflow/episodes": 5, "workflow/invalid": 2, "workflow/steps": 6,
		"workflow/turns/mean": 7.0 / 5, "workflow/termination/done": 0.4, "workflow/termination/error": 0.2,
		"reward/actor/mean": 0.5, "reward/actor/max": 1, "reward/actor/min": 0, "reward/mean": 0.5} {
		if got := b.metrics[name]; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}

	cfg := estimators.Config{Name: estimators.GRPO, NormByStd: true, Epsilon: estimators.DefaultEpsilon}
	if _, err := estimators.RolloutAdvantages(d, cfg); err != nil {
		t.Fatal(err)
	}
	// Group a: rewards {1, 0} → ±1/(1+2e-6); group b alone: its reward
	// over std 1 (a single trajectory has no baseline).
	a := 1 / (1 + 2e-6)
	wantAdv := []float64{a, a, a, -a, -a, 0.5 / (1 + 1e-6)}
	adv := d.Tok[rollout.KeyAdvantages]
	lp := d.Tok[rollout.KeySamplerLogProbs]
	for i := range d.Tokens {
		for tok := range d.Tokens[i] {
			want, wantLP := 0.0, 0.0
			if tok >= d.PromptLen[i] {
				want, wantLP = wantAdv[i], -0.5
			}
			if math.Abs(float64(adv[i][tok])-want) > 1e-6 || float64(lp[i][tok]) != wantLP || float64(d.Mask[i][tok]) != map[bool]float64{true: 1}[tok >= d.PromptLen[i]] {
				t.Errorf("row %d token %d: advantage %g log-prob %g mask %g, want %g %g", i, tok, adv[i][tok], lp[i][tok], d.Mask[i][tok], want, wantLP)
			}
		}
	}
	m := b.wf.advantageMetrics("actor", rowAdvantages(d))
	if math.Abs(m["advantage/actor/max"]-a) > 1e-6 || math.Abs(m["advantage/actor/mean"]-(0.5/(1+1e-6))/3) > 1e-6 {
		t.Errorf("advantage metrics %v", m)
	}

	// filter_uniform_groups drops group b (one trajectory, uniform) whole.
	k.FilterUniformGroups = true
	b, err = w.rows(eps, owners, "actor", k)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = rejectTrajectories(b, k); err != nil {
		t.Fatal(err)
	}
	if b.data.Len() != 5 || b.wf.firstRow[3] != -1 || b.wf.firstRow[1] != 3 {
		t.Errorf("after rejection: %d rows, first rows %v", b.data.Len(), b.wf.firstRow)
	}
}

func TestReshuffleTrajectoriesKeepsEpisodes(t *testing.T) {
	w := &workflowGen{}
	var eps []*workflow.Episode
	var owners []tasks.Example
	for i := range 6 {
		eps = append(eps, episode(i, "t", workflow.TermDone, make([]float64, 1+i%3)...))
		owners = append(owners, tasks.Example{ID: "t"})
	}
	b, err := w.rows(eps, owners, "actor", schema.Knobs{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := reshuffleTrajectories(b.data, 7)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != b.data.Len() {
		t.Fatalf("%d rows, want %d", d.Len(), b.data.Len())
	}
	seen := map[int]bool{}
	moved := false
	for i := 0; i < d.Len(); {
		tr := d.Traj[i]
		if seen[tr] {
			t.Fatalf("trajectory %d split: %v", tr, d.Traj)
		}
		seen[tr] = true
		for s := 0; i < d.Len() && d.Traj[i] == tr; s, i = s+1, i+1 {
			// Step s of every episode has a 2+s-token prompt: step order kept.
			if d.PromptLen[i] != 2+s {
				t.Fatalf("trajectory %d out of step order: %v", tr, d.PromptLen)
			}
		}
		moved = moved || tr != len(seen)-1
	}
	if len(seen) != 6 || !moved {
		t.Errorf("trajectories %v: want all 6, reordered", d.Traj)
	}
}
