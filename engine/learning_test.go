package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// TestGRPORaisesAccuracyAfterSFT is issue 6's RL check: GRPO from an SFT-warmed
// policy raises its greedy validation accuracy on sorting. Seeds are fixed and the
// CPU backend is deterministic, so the margin is reproducible; measured: the warm-up
// leaves 0.125 (4 of 32 prompts), 12 GRPO rollouts bring it to 0.375. The rise is not
// one lucky seed: with knobs.seed 7 and 11 the same runs measured 0.125 → 0.406 and
// 0.0625 → 0.219. From a 100-step warm-up (also 0.125) GRPO fell to 0.031: the policy
// must already sort some lists reliably for 8-sample groups to carry a signal.
func TestGRPORaisesAccuracyAfterSFT(t *testing.T) {
	if testing.Short() {
		t.Skip("≈40 s: 150 SFT steps, then 12 GRPO rollouts")
	}
	sorting := []string{`task.name="sorting"`, "knobs.max_new_tokens=16", "knobs.save_every=0", "task.validation_size=32"}
	// Small batches learn fastest per second here: 150 steps of 16 at a constant 3e-3
	// (loss ≈ 0.46) give a policy that sorts a few lists, so GRPO's groups see rewards.
	sft, err := Run(context.Background(), runCatalog(t, "sft", append(sorting, "knobs.num_rollout=150",
		"knobs.rollout_batch_size=16", "knobs.micro_batch_size=16", "knobs.lr=3e-3", `knobs.lr_schedule="constant"`,
		"knobs.warmup_ratio=0", "knobs.eval_every=0")...), "sft", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	cps, _ := filepath.Glob(filepath.Join(sft.Dir, "checkpoints", "0*"))
	if len(cps) == 0 {
		t.Fatal("the SFT run wrote no checkpoint")
	}
	warm := filepath.Join(cps[len(cps)-1], "policy")

	// eval_every equal to num_rollout: evaluations before training and after the last rollout only.
	cat := runCatalog(t, "grpo", append(sorting, "knobs.num_rollout=12", "knobs.rollout_batch_size=8",
		"knobs.n_samples_per_prompt=8", "knobs.lr=1e-4", "knobs.eval_every=12",
		`roles.actor.model.source="`+warm+`"`)...)
	res, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	recs := metrics(t, res.Dir)
	tr := trainRecords(recs)
	if len(tr) != 12 {
		t.Fatalf("%d train records, want 12", len(tr))
	}
	before, after := num(t, recs[0], "val/accuracy"), num(t, tr[len(tr)-1], "val/accuracy")
	t.Logf("val/accuracy %.4f → %.4f", before, after)
	if before == 0 {
		t.Errorf("the SFT warm-up solves no validation prompt: GRPO would see no reward")
	}
	// 0.125 is 4 of the 32 validation prompts more.
	if !(after >= before+0.125) {
		t.Errorf("val/accuracy %.4f → %.4f: GRPO did not raise it by 0.125", before, after)
	}
}

// TestOPDLowersTeacherKL is issue 6's distillation check: a fresh student trained by
// on-policy distillation against an SFT-trained teacher samples tokens the teacher
// rates higher, so the reverse KL it reports (student/teacher_kl, the mean of
// ls − lt over the sampled tokens) falls. Everything is seeded, so the run is
// deterministic on CPU; measured: 6.92 over the first two rollouts, 3.36 over the
// last two. (With task.validation_size 32, which changes the seeded data, the same run
// measured 6.85 → 3.93.)
func TestOPDLowersTeacherKL(t *testing.T) {
	if testing.Short() {
		t.Skip("≈30 s: an SFT run for the teacher and 8 distillation rollouts")
	}
	// The teacher: 20 constant-lr SFT steps on sorting (loss ≈ 1.39; far from the
	// fresh student, whose first teacher_kl is ≈ 6.9).
	sorting := []string{`task.name="sorting"`, "knobs.max_new_tokens=16", "knobs.eval_every=0", "knobs.save_every=0",
		"task.validation_size=4"}
	sft, err := Run(context.Background(), runCatalog(t, "sft", append(sorting, "knobs.num_rollout=20",
		"knobs.rollout_batch_size=64", "knobs.micro_batch_size=64", "knobs.lr=1e-2", `knobs.lr_schedule="constant"`,
		"knobs.warmup_ratio=0")...), "sft", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	cps, _ := filepath.Glob(filepath.Join(sft.Dir, "checkpoints", "0*"))
	if len(cps) == 0 {
		t.Fatal("the SFT run wrote no checkpoint")
	}
	teacher := filepath.Join(cps[len(cps)-1], "policy")

	// The recipe's lr (5e-5) barely moves the KL in 8 rollouts; 1e-2 halves it.
	cat := runCatalog(t, "opd", append(sorting, "knobs.num_rollout=8", "knobs.lr=1e-2",
		`roles.teacher.model.source="`+teacher+`"`)...)
	res, err := Run(context.Background(), cat, "opd", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := trainRecords(metrics(t, res.Dir))
	// num_train_passes is 3: three optimizer steps share each rollout and its
	// sampler log-probs, hence its teacher_kl.
	if len(tr) != 24 {
		t.Fatalf("%d train records, want 24 (8 rollouts × 3 passes)", len(tr))
	}
	kl := func(rollout int) float64 { return num(t, tr[3*rollout], "student/teacher_kl") }
	first := (kl(0) + kl(1)) / 2
	last := (kl(6) + kl(7)) / 2
	t.Logf("teacher_kl %.3f → %.3f", first, last)
	if !(first > 3) {
		t.Errorf("first teacher_kl %.3f: the student starts too close to the teacher for the test to mean anything", first)
	}
	if !(last < 0.75*first) {
		t.Errorf("teacher_kl %.3f → %.3f: did not fall by a quarter", first, last)
	}
}
