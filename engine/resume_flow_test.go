package engine

import (
	"context"
	"math"
	"testing"
)

// TestFlowResumeEqualsUninterrupted is the resume test for a velocity-model
// recipe: flow_grpo under a warmup + cosine schedule with gradient clipping,
// interrupted after rollout 2 of 4 and resumed, logs the same metrics as an
// uninterrupted run (weights, Adam moments and step counter restored, the
// LR schedule continued), and a changed lr reaches the resumed steps.
func TestFlowResumeEqualsUninterrupted(t *testing.T) {
	sets := []string{"knobs.num_rollout=4", "knobs.rollout_batch_size=4", "knobs.n_samples_per_prompt=4",
		"knobs.eval_every=2", "knobs.save_every=0", "knobs.num_train_passes=2", `knobs.lr_schedule="cosine"`,
		"knobs.warmup_steps=2", "knobs.max_grad_norm=0.5", "knobs.lr=1e-2"}
	full := checkResumeEqualsUninterrupted(t, "flow_grpo", sets...)
	// The schedule really moved: warmup, then the cosine decay.
	tr := trainRecords(metrics(t, full.Dir))
	lr0, lrPeak, lrLast := num(t, tr[0], "policy/lr"), num(t, tr[2], "policy/lr"), num(t, tr[len(tr)-1], "policy/lr")
	if !(lr0 < lrPeak && lrLast < lrPeak) {
		t.Errorf("lr %g, %g, …, %g: no warmup then decay", lr0, lrPeak, lrLast)
	}
	if gn := num(t, tr[0], "policy/grad_norm"); !(gn > 0) {
		t.Errorf("policy/grad_norm = %g", gn)
	}

	// lr is a hot knob for velocity roles too: resumed with lr doubled (the
	// files changed while the run was stopped), the steps after the
	// checkpoint run at twice the uninterrupted run's rates.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w2 := &cancelAfter{line: "rollout 2/4", cancel: cancel2}
	part2, err := Run(ctx2, runCatalog(t, "flow_grpo", sets...), "flow_grpo", RunOptions{RunsDir: t.TempDir(), Out: w2})
	if err != nil {
		t.Fatal(err)
	}
	doubled := append(append([]string{}, sets...), "knobs.lr=2e-2")
	if _, err := Run(context.Background(), runCatalog(t, "flow_grpo", doubled...), "flow_grpo", RunOptions{Resume: part2.Dir}); err != nil {
		t.Fatal(err)
	}
	tr2 := trainRecords(metrics(t, part2.Dir))
	if len(tr2) != len(tr) {
		t.Fatalf("%d train records after the lr change, want %d", len(tr2), len(tr))
	}
	half := len(tr) / 2 // 2 of 4 rollouts, the same number of steps each
	for i := range tr {
		want := num(t, tr[i], "policy/lr")
		if i >= half {
			want *= 2
		}
		if got := num(t, tr2[i], "policy/lr"); math.Abs(got-want) > 1e-12 {
			t.Errorf("step %d: lr %g, want %g", i+1, got, want)
		}
	}
}
