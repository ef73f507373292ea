package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/engine/rundir"
)

// TestOPDUsePrecomputedAdvantage runs the catalog's opd (three passes over each rollout) with
// use_precomputed_advantage true and false from the same start: true trains on the
// teacher−student gaps, false on GRPO's advantages of the task rewards (each group's mean 0,
// so the batch's mean is 0), which give other losses; only the false run warns that the gaps
// were overwritten, once over its six passes.
func TestOPDUsePrecomputedAdvantage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs opd twice")
	}
	if onSimpleGo() || onXLA() {
		t.Skip("host-side choice of the advantages, checked on the cpu backend (tiny-teacher is slow to build on SimpleGo)")
	}
	run := func(precomputed bool) (losses, advMeans []float64, warnings []string) {
		t.Helper()
		cat := runCatalog(t, "opd", "knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=4",
			"knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
			fmt.Sprintf("knobs.use_precomputed_advantage=%t", precomputed))
		if p := cat.Recipes["opd"].Knobs.NumTrainPasses; p != 3 {
			t.Fatalf("opd trains %d passes over each rollout, want the catalog's 3", p)
		}
		res, err := Run(context.Background(), cat, "opd", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true, Quiet: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range trainRecords(metrics(t, res.Dir)) {
			losses = append(losses, num(t, r, "student/loss"))
			advMeans = append(advMeans, num(t, r, "advantage/student/mean"))
		}
		events, err := rundir.ReadEvents(filepath.Join(res.Dir, rundir.EventsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == rundir.EventWarning {
				warnings = append(warnings, e.Message)
			}
		}
		return losses, advMeans, warnings
	}
	gapLoss, gapAdv, gapWarn := run(true)
	estLoss, estAdv, estWarn := run(false)
	if len(gapLoss) != 6 || len(estLoss) != 6 {
		t.Fatalf("%d and %d optimizer steps, want 2 rollouts × 3 passes", len(gapLoss), len(estLoss))
	}
	if gapLoss[0] == estLoss[0] {
		t.Errorf("the first step's loss is %v with and without use_precomputed_advantage", gapLoss[0])
	}
	for i, m := range estAdv {
		if math.Abs(m) > 1e-6 {
			t.Errorf("step %d without use_precomputed_advantage: mean advantage %v, want GRPO's 0", i+1, m)
		}
	}
	if gapAdv[0] == 0 {
		t.Error("use_precomputed_advantage: mean advantage 0, want the gaps'")
	}
	if len(gapWarn) != 0 {
		t.Errorf("use_precomputed_advantage: warnings %q", gapWarn)
	}
	if len(estWarn) != 1 || !strings.Contains(estWarn[0], "use_precomputed_advantage is false") {
		t.Errorf("without use_precomputed_advantage: warnings %q, want one saying the gaps were overwritten", estWarn)
	}
}
