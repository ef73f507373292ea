package engine

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestAsyncRollouts: with max_staleness 1 the servers generate each rollout after the
// first while the previous one trains: it trains one weight version behind (staleness 1,
// sampled with version id−1), the truncated importance-sampling weights then differ from 1
// (the trainer's weights moved), the generation's busy and wait times are recorded, and the
// data position is the on-policy run's (the same epoch per record).
func TestAsyncRollouts(t *testing.T) {
	if testing.Short() {
		t.Skip("two GRPO runs")
	}
	srv := newLoopServer(t, nil)
	sets := append([]string{"knobs.num_rollout=4", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=6", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
		"knobs.tis_cap=2", "knobs.lr=1e-3"}, remoteSets(srv)...)
	sync, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), runCatalog(t, "grpo", append(sets, "knobs.max_staleness=1")...), "grpo",
		RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	want, got := trainRecords(metrics(t, sync.Dir)), trainRecords(metrics(t, res.Dir))
	if len(got) != len(want) || len(got) != 4 {
		t.Fatalf("%d records, want %d (4)", len(got), len(want))
	}
	for i, rec := range got {
		id := int(num(t, rec, "rollout"))
		stale, version := num(t, rec, "rollout/staleness"), num(t, rec, "rollout/weight_version")
		if id == 0 && (stale != 0 || version != 0) || id > 0 && (stale != 1 || version != float64(id-1)) {
			t.Errorf("rollout %d: staleness %g, version %g", id, stale, version)
		}
		if num(t, rec, "epoch") != num(t, want[i], "epoch") {
			t.Errorf("rollout %d: epoch %g, on-policy %g", id, rec["epoch"], want[i]["epoch"])
		}
		num(t, rec, "time/generate_busy")
		if id > 0 {
			num(t, rec, "time/generate_wait")
		}
		var tisMean float64
		for k, v := range rec {
			if strings.HasSuffix(k, "tis_weight_mean") {
				tisMean = v.(float64)
			}
		}
		if id == 0 && math.Abs(tisMean-1) > 1e-4 || id > 0 && math.Abs(tisMean-1) < 1e-6 {
			t.Errorf("rollout %d: tis_weight_mean %g", id, tisMean)
		}
	}
	if srv.calls < 4 {
		t.Errorf("%d generate requests", srv.calls)
	}
}

// TestAsyncResume: a run with max_staleness 2 stopped after rollout 2, while the queue
// holds the rollouts generated ahead, resumes from its checkpoint and draws them again:
// the resumed run ends with the records of every rollout and the data position of the
// uninterrupted run, its first rollout on-policy and the pipeline filling again after it.
func TestAsyncResume(t *testing.T) {
	if testing.Short() {
		t.Skip("three GRPO runs")
	}
	srv := newLoopServer(t, nil)
	sets := append([]string{"knobs.num_rollout=5", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=6", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
		"knobs.max_staleness=2"}, remoteSets(srv)...)
	fill := &runHooks{fillAhead: true}
	full, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true, hooks: fill})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	part, err := Run(ctx, runCatalog(t, "grpo", sets...), "grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true,
		Out: &cancelAfter{line: "rollout 2/5", cancel: cancel}, hooks: fill})
	if err != nil {
		t.Fatal(err)
	}
	if !part.Interrupted || part.Rollouts != 2 {
		t.Fatalf("interrupted run: %+v", part)
	}
	if _, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", RunOptions{Resume: part.Dir, hooks: fill}); err != nil {
		t.Fatal(err)
	}
	a, b := trainRecords(metrics(t, full.Dir)), trainRecords(metrics(t, part.Dir))
	if len(a) != len(b) || len(a) != 5 {
		t.Fatalf("%d records uninterrupted, %d resumed (want 5)", len(a), len(b))
	}
	for i := range a {
		if a[i]["rollout"] != b[i]["rollout"] || a[i]["epoch"] != b[i]["epoch"] {
			t.Errorf("record %d: rollout %v epoch %v, resumed rollout %v epoch %v", i, a[i]["rollout"], a[i]["epoch"], b[i]["rollout"], b[i]["epoch"])
		}
	}
	// Rollout 2 was in the queue at the checkpoint (generated with version 0): the resumed
	// run drew it again on the resumed weights, version 2.
	if q := num(t, b[1], "rollout/queued"); q != 1 {
		t.Errorf("rollout 1: %g queued, want 1", q)
	}
	for i, want := range map[int][2]float64{2: {0, 2}, 3: {1, 2}, 4: {2, 2}} {
		if s, v := num(t, b[i], "rollout/staleness"), num(t, b[i], "rollout/weight_version"); s != want[0] || v != want[1] {
			t.Errorf("resumed rollout %d: staleness %g version %g, want %v", i, s, v, want)
		}
	}
	if s := num(t, a[2], "rollout/staleness"); s != 2 {
		t.Errorf("uninterrupted rollout 2: staleness %g, want 2", s)
	}
}
