package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/runtime"
)

func TestGKDOnPolicyDraw(t *testing.T) {
	for _, tc := range []struct {
		lambda   float64
		min, max int // on-policy rollouts of 200
	}{
		{0, 0, 0},
		{1, 200, 200},
		{0.5, 80, 120}, // binomial(200, 0.5): ±2.8σ
		{0.25, 30, 70},
	} {
		n := 0
		for id := range 200 {
			on := gkdOnPolicy(7, id, tc.lambda)
			if on != gkdOnPolicy(7, id, tc.lambda) {
				t.Fatalf("λ %g rollout %d: two draws differ", tc.lambda, id)
			}
			if on {
				n++
			}
		}
		if n < tc.min || n > tc.max {
			t.Errorf("λ %g: %d of 200 rollouts on-policy, want %d…%d", tc.lambda, n, tc.min, tc.max)
		}
	}
	// Another seed draws another sequence.
	same := true
	for id := range 64 {
		same = same && gkdOnPolicy(7, id, 0.5) == gkdOnPolicy(8, id, 0.5)
	}
	if same {
		t.Error("seeds 7 and 8 draw the same 64 choices")
	}
}

// TestGKDLambdaMixesBatches runs gkd with a teacher that differs from the
// student: gkd/on_policy follows λ, and the off-policy batches are the
// teacher's samples (the completions of a λ = 0 run are not the student's).
func TestGKDLambdaMixesBatches(t *testing.T) {
	m, err := runtime.OpenModel("tiny", 99) // not the student's seed
	if err != nil {
		t.Fatal(err)
	}
	teacher := t.TempDir()
	if err := m.SaveHF(teacher, 0); err != nil {
		t.Fatal(err)
	}
	const rollouts = 8
	seed := 0
	run := func(lambda float64) ([]float64, []string) {
		cat := runCatalog(t, "gkd", fmt.Sprintf("knobs.num_rollout=%d", rollouts), "knobs.rollout_batch_size=2",
			"knobs.n_samples_per_prompt=2", "knobs.max_new_tokens=4", "knobs.eval_every=0", "knobs.save_every=0",
			"knobs.log_episodes_every=1", "task.validation_size=4", fmt.Sprintf("knobs.gkd_lambda=%g", lambda),
			`roles.teacher.model.source="`+teacher+`"`)
		seed = cat.Recipes["gkd"].Knobs.Seed
		res, err := Run(context.Background(), cat, "gkd", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
		if err != nil {
			t.Fatal(err)
		}
		var on []float64
		for _, r := range trainRecords(metrics(t, res.Dir)) {
			on = append(on, num(t, r, "gkd/on_policy"))
		}
		eps, err := rundir.ReadEpisodes(filepath.Join(res.Dir, rundir.EpisodesFile))
		if err != nil {
			t.Fatal(err)
		}
		var comps []string
		for _, e := range eps {
			if e["rollout"].(float64) == 0 {
				comps = append(comps, e["completion"].(string))
			}
		}
		return on, comps
	}
	count := func(xs []float64) (n int) {
		for _, x := range xs {
			if x == 1 {
				n++
			}
		}
		return n
	}
	never, teacherComps := run(0)
	always, studentComps := run(1)
	if len(never) != rollouts || count(never) != 0 {
		t.Errorf("λ 0: gkd/on_policy %v, want %d zeros", never, rollouts)
	}
	if len(always) != rollouts || count(always) != rollouts {
		t.Errorf("λ 1: gkd/on_policy %v, want %d ones", always, rollouts)
	}
	if fmt.Sprint(teacherComps) == fmt.Sprint(studentComps) {
		t.Errorf("λ 0 and λ 1 sampled the same completions %q: the teacher did not generate", teacherComps)
	}
	if onXLA() {
		// Which rollouts are on-policy is drawn on the host (gkdOnPolicy, checked above and on
		// the cpu backend); on xla the two runs above show both samplers at work.
		return
	}
	half, _ := run(0.5)
	if n := count(half); n == 0 || n == rollouts {
		t.Errorf("λ 0.5: gkd/on_policy %v, want both kinds over %d rollouts", half, rollouts)
	}
	again, _ := run(0.5)
	if fmt.Sprint(again) != fmt.Sprint(half) {
		t.Errorf("λ 0.5 twice: %v, then %v", half, again)
	}
	for id, v := range half {
		if want := gkdOnPolicy(seed, id, 0.5); (v == 1) != want {
			t.Errorf("rollout %d: on_policy %g, the seeded draw says %t", id, v, want)
		}
	}
}

// TestGKDTeacherTopKRun runs the catalog's gkd with gkd_teacher_top_k: the teacher role's
// summary travels to the student under teacher_logits (2k+1 wide instead of V), the loss is
// finite and positive, and the validation before training measures val/teacher_kl.
func TestGKDTeacherTopKRun(t *testing.T) {
	m, err := runtime.OpenModel("tiny", 99) // not the student's seed
	if err != nil {
		t.Fatal(err)
	}
	teacher := t.TempDir()
	if err := m.SaveHF(teacher, 0); err != nil {
		t.Fatal(err)
	}
	cat := runCatalog(t, "gkd", "knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=4", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
		"knobs.gkd_teacher_top_k=16", `roles.teacher.model.source="`+teacher+`"`)
	res, err := Run(context.Background(), cat, "gkd", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	recs := metrics(t, res.Dir)
	for _, r := range trainRecords(recs) {
		if v := num(t, r, "student/loss"); !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("student/loss = %g, want finite and positive", v)
		}
	}
	found := false
	for _, r := range recs {
		if v, ok := r["val/teacher_kl"].(float64); ok {
			found = true
			if !(v > 0) {
				t.Errorf("val/teacher_kl = %g, want positive (the teacher differs)", v)
			}
		}
	}
	if !found {
		t.Error("no val/teacher_kl recorded")
	}
}
