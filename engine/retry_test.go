package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/engine/rundir"
)

// TestRolloutRetries injects generation failures into rollout 1 of a GRPO
// run: with up to rollout_retries of them the run completes, each retry is
// an event and a console line, and the data and metrics equal those of a run
// without failures (a retry takes the same prompts); with one more the run
// fails with an error that names the rollout (1-based, as the console), the retries and the cause.
func TestRolloutRetries(t *testing.T) {
	boom := errors.New("injected sampler failure")
	sets := []string{"knobs.num_rollout=3", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=4", "knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4",
		"knobs.rollout_retries=2"}
	run := func(failures int) (*Result, string, error) {
		calls := 0
		var out bytes.Buffer
		opts := RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true, Out: &out, hooks: &runHooks{
			rolloutFault: func(id, attempt int) error {
				if id != 1 {
					return nil
				}
				calls++
				if attempt != calls-1 {
					return fmt.Errorf("attempt %d at call %d", attempt, calls)
				}
				if attempt < failures {
					return boom
				}
				return nil
			}}}
		res, err := Run(context.Background(), runCatalog(t, "grpo", sets...), "grpo", opts)
		return res, out.String(), err
	}
	clean, _, err := run(0)
	if err != nil {
		t.Fatal(err)
	}
	counts := []int{1, 2}
	if onXLA() {
		// Retries are the engine's (checked on the cpu backend with 1 and 2 failures); on
		// xla a rollout whose generation fails twice shows a retry there takes the same
		// prompts and leaves the run as without failures.
		counts = []int{2}
	}
	for _, failures := range counts {
		res, out, err := run(failures)
		if err != nil {
			t.Fatalf("%d failures, 2 retries allowed: %v", failures, err)
		}
		evs, err := rundir.ReadEvents(filepath.Join(res.Dir, rundir.EventsFile))
		if err != nil {
			t.Fatal(err)
		}
		var attempts []float64
		for _, e := range evs {
			if e.Type == rundir.EventRolloutRetry {
				if e.Rollout != 1 || !strings.Contains(e.Message, boom.Error()) {
					t.Errorf("retry event %+v", e)
				}
				attempts = append(attempts, e.Metrics["attempt"])
			}
		}
		if len(attempts) != failures || attempts[0] != 1 || attempts[len(attempts)-1] != float64(failures) {
			t.Errorf("%d failures: retry events with attempts %v", failures, attempts)
		}
		if n := strings.Count(out, "generation failed"); n != failures {
			t.Errorf("%d failures: %d console lines about them:\n%s", failures, n, out)
		}
		tr := trainRecords(metrics(t, res.Dir))
		if got := num(t, tr[1], "rollout/retries"); got != float64(failures) {
			t.Errorf("rollout/retries = %g, want %d", got, failures)
		}
		// The retried rollout trains on the same prompts: the rollouts after it match the clean run's.
		ref := trainRecords(metrics(t, clean.Dir))
		if a, b := num(t, tr[2], "epoch"), num(t, ref[2], "epoch"); a != b {
			t.Errorf("epoch after a retry %g, clean run %g: the retry took new prompts", a, b)
		}
	}
	_, _, err = run(3)
	if !errors.Is(err, boom) {
		t.Fatalf("3 failures, 2 retries allowed: err = %v, want the injected failure", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "rollout 2") || !strings.Contains(msg, "after 2 retries") {
		t.Errorf("error %q does not name the rollout and the retries", msg)
	}
}
