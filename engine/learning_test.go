package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// arithmetic1 is the arithmetic task the tiny model learns in seconds: 1-digit
// addition, whose 100 distinct prompts split into 80 for training and 20 held
// out ("3+5=" held out is learnable from "5+3=" and the rest of the table).
var arithmetic1 = []string{`task.name="arithmetic"`, "knobs.task_digits=1", `knobs.task_ops="+"`,
	"task.train_size=80", "task.validation_size=20", "knobs.max_new_tokens=4", "knobs.save_every=0"}

// TestGRPORaisesAccuracyAfterSFT is issue 6's RL check: GRPO from an SFT-warmed
// policy raises its greedy validation accuracy on arithmetic. Seeds are fixed and
// each CPU backend is deterministic, so the margin is reproducible; measured on
// SimpleGo: the warm-up leaves 0.50 (10 of 20 held-out prompts), 16 GRPO rollouts
// bring it to 0.85; on the cpu backend (another summation order) 0.40 → 0.65. The rise is not one lucky seed: with knobs.seed 7, 11 and 99 (other splits)
// the same SFT gave 0.40, 0.55, 0.20 and 40 GRPO rollouts 0.55, 0.80, 0.50.
func TestGRPORaisesAccuracyAfterSFT(t *testing.T) {
	if testing.Short() {
		t.Skip("≈4 s on the cpu backend, ≈30 s on SimpleGo: 150 SFT steps, then 16 GRPO rollouts")
	}
	// 150 steps of 16 at a constant 3e-3 (loss ≈ 0.43): the policy answers half
	// the held-out sums, and samples right answers often enough on the training
	// prompts (reward ≈ 0.5) for 8-sample groups to carry a signal. Longer SFT
	// memorises the 80 training sums (400 steps: reward ≈ 0.9), and GRPO's
	// groups then agree and teach nothing.
	sft, err := Run(context.Background(), runCatalog(t, "sft", append(arithmetic1, "knobs.num_rollout=150",
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
	cat := runCatalog(t, "grpo", append(arithmetic1, "knobs.num_rollout=16", "knobs.rollout_batch_size=8",
		"knobs.n_samples_per_prompt=8", "knobs.lr=2e-4", "knobs.eval_every=16",
		`roles.actor.model.source="`+warm+`"`)...)
	res, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	recs := metrics(t, res.Dir)
	tr := trainRecords(recs)
	if len(tr) != 16 {
		t.Fatalf("%d train records, want 16", len(tr))
	}
	before, after := num(t, recs[0], "val/accuracy"), num(t, tr[len(tr)-1], "val/accuracy")
	t.Logf("val/accuracy %.4f → %.4f", before, after)
	if before < 0.2 || before > 0.8 {
		t.Errorf("the SFT warm-up solves %.2f of the validation prompts: want a middling policy GRPO can improve", before)
	}
	// 0.2 is 4 of the 20 validation prompts more.
	if !(after >= before+0.2) {
		t.Errorf("val/accuracy %.4f → %.4f: GRPO did not raise it by 0.2", before, after)
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
