package engine

import (
	"context"
	"testing"
)

// asyncSets are the knobs of the short GRPO runs of the pipeline tests, against srv.
func asyncSets(srv *loopServer, extra ...string) []string {
	sets := append([]string{"knobs.num_rollout=6", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=6", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
		"knobs.tis_cap=2", "knobs.lr=1e-3"}, remoteSets(srv)...)
	return append(sets, extra...)
}

// pipelineRun runs GRPO with the queue filled before each rollout trains (fillAhead) and
// returns its train records, one per rollout.
func pipelineRun(t *testing.T, srv *loopServer, hooks *runHooks, extra ...string) []map[string]any {
	t.Helper()
	if hooks == nil {
		hooks = &runHooks{}
	}
	hooks.fillAhead = true
	res, err := Run(context.Background(), runCatalog(t, "grpo", asyncSets(srv, extra...)...), "grpo",
		RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true, hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	recs := trainRecords(metrics(t, res.Dir))
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	return recs
}

// wantRollout is what a rollout's record must say of its place in the pipeline: its
// staleness, the weight version it was sampled with, the rollouts waiting in the queue
// when it was taken, and those dropped then.
type wantRollout struct{ staleness, version, queued, dropped float64 }

func checkPipeline(t *testing.T, recs []map[string]any, want []wantRollout) {
	t.Helper()
	for i, rec := range recs {
		w := want[i]
		got := wantRollout{num(t, rec, "rollout/staleness"), num(t, rec, "rollout/weight_version"),
			num(t, rec, "rollout/queued"), num(t, rec, "rollout/dropped")}
		if got != w {
			t.Errorf("rollout %d: (staleness, version, queued, dropped) %v, want %v", i, got, w)
		}
		if got.staleness != num(t, rec, "rollout")-got.version {
			t.Errorf("rollout %d: staleness %g is not its id minus its version %g", i, got.staleness, got.version)
		}
		num(t, rec, "time/generate_busy")
		num(t, rec, "time/generate_wait")
	}
}

// TestAsyncPipeline: with max_staleness 2 and generation ahead of training, the pipeline
// runs two rollouts ahead: rollout 0 is on-policy, 1 trains one version behind, every later one
// two (never more), and the servers answer with the versions they were told to load. The
// data positions are those of the same run with a hot change of max_staleness (below):
// rollouts dropped from the queue are drawn again from the loop's position.
func TestAsyncPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("two GRPO runs")
	}
	srv := newLoopServer(t, nil)
	k2 := pipelineRun(t, srv, nil, "knobs.max_staleness=2")
	checkPipeline(t, k2, []wantRollout{{0, 0, 0, 0}, {1, 0, 1, 0}, {2, 0, 1, 0}, {2, 1, 1, 0}, {2, 2, 1, 0}, {2, 3, 0, 0}})

	// max_staleness 2, lowered to 1 when rollout 3 is taken (the queue's rollouts 3 and 4,
	// sampled with versions 1 and 2, would train 2 behind: dropped, 3 is drawn again on
	// version 3), then to 0 at rollout 5 (the queued 5 would be 1 behind: dropped).
	hot := pipelineRun(t, srv, &runHooks{staleness: func(id, k int) int {
		switch {
		case id == 3 || id == 4:
			return 1
		case id >= 5:
			return 0
		}
		return k
	}}, "knobs.max_staleness=2")
	checkPipeline(t, hot, []wantRollout{{0, 0, 0, 0}, {1, 0, 1, 0}, {2, 0, 1, 0}, {0, 3, 0, 2}, {1, 3, 0, 0}, {0, 5, 0, 1}})
	for i := range k2 {
		if k2[i]["epoch"] != hot[i]["epoch"] {
			t.Errorf("rollout %d: epoch %v with k 2, %v with hot changes", i, k2[i]["epoch"], hot[i]["epoch"])
		}
	}
}

// TestAsyncPipelineRaised: raising max_staleness from 1 to 2 at rollout 2 lets the
// pipeline run one rollout further ahead from then on: rollouts 3 and 4 are generated
// during rollout 2's training (version 2), 4 trains two versions behind.
func TestAsyncPipelineRaised(t *testing.T) {
	if testing.Short() {
		t.Skip("a GRPO run")
	}
	srv := newLoopServer(t, nil)
	recs := pipelineRun(t, srv, &runHooks{staleness: func(id, k int) int {
		if id >= 2 {
			return 2
		}
		return k
	}}, "knobs.max_staleness=1")
	checkPipeline(t, recs, []wantRollout{{0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}, {1, 2, 1, 0}, {2, 2, 1, 0}, {2, 3, 0, 0}})
}
