package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// runCatalog loads recipes.cue with --set overrides for one recipe.
func runCatalog(t *testing.T, name string, sets ...string) *schema.Catalog {
	t.Helper()
	cat, err := Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: ".", Only: name, Sets: sets})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return cat
}

// metrics reads a run's metrics.jsonl.
func metrics(t *testing.T, dir string) []map[string]any {
	t.Helper()
	recs, err := rundir.ReadMetrics(filepath.Join(dir, rundir.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// trainRecords are the records of optimizer steps (step > 0).
func trainRecords(recs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["step"].(float64) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func num(t *testing.T, rec map[string]any, key string) float64 {
	t.Helper()
	v, ok := rec[key].(float64)
	if !ok {
		t.Fatalf("metric %q missing from %v", key, rec)
	}
	return v
}

func TestRunSFTLowersLossAndCheckpointsReload(t *testing.T) {
	// 32 training examples seen again every other rollout: the loss must fall.
	cat := runCatalog(t, "sft", "knobs.num_rollout=8", "knobs.rollout_batch_size=16", "knobs.micro_batch_size=8",
		"knobs.eval_every=0", "knobs.save_every=4", "knobs.lr_schedule=\"constant\"", "knobs.warmup_ratio=0",
		"task.train_size=32", "task.validation_size=8")
	res, err := Run(context.Background(), cat, "sft", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 8 || res.Rollouts != 8 {
		t.Fatalf("steps %d rollouts %d, want 8 and 8", res.Steps, res.Rollouts)
	}
	recs := metrics(t, res.Dir)
	if recs[0]["step"].(float64) != 0 || recs[0]["val/accuracy"] == nil {
		t.Errorf("first record %v is not the evaluation before training", recs[0])
	}
	tr := trainRecords(recs)
	if len(tr) != 8 {
		t.Fatalf("%d train records, want 8", len(tr))
	}
	first := (num(t, tr[0], "policy/loss") + num(t, tr[1], "policy/loss")) / 2
	last := (num(t, tr[6], "policy/loss") + num(t, tr[7], "policy/loss")) / 2
	if !(last < first-0.3) {
		t.Errorf("loss %.3f → %.3f: did not fall", first, last)
	}
	for _, key := range []string{"policy/grad_norm", "policy/lr", "perf/tokens_per_s", "time/train", "epoch"} {
		num(t, tr[7], key)
	}
	if _, ok := tr[7]["val/accuracy"]; !ok {
		t.Errorf("the last rollout is not evaluated: %v", tr[7])
	}
	// Checkpoints of rollouts 4 and 8, in Hugging Face layout, that reload.
	for _, cp := range []string{"000003", "000007"} {
		dir := filepath.Join(res.Dir, "checkpoints", cp, "policy")
		m, err := runtime.LoadModel(dir)
		if err != nil {
			t.Fatalf("checkpoint %s: %v", cp, err)
		}
		for _, f := range []string{"optimizer.safetensors", "state.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Error(err)
			}
		}
		be, err := runtime.NewBackend("")
		if err != nil {
			t.Fatal(err)
		}
		sc, err := runtime.NewScorer(be, m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := sc.Score([][]int32{{257, '1', '+', '2', '=', '3', 258}})
		if err != nil {
			t.Fatal(err)
		}
		for _, lp := range out[0].LogProbs {
			if math.IsNaN(float64(lp)) || lp > 0 {
				t.Fatalf("checkpoint %s scores %v", cp, out[0].LogProbs)
			}
		}
	}
	text, err := os.ReadFile(filepath.Join(res.Dir, rundir.ConfigFile))
	if err != nil || !strings.Contains(string(text), "recipes: sft:") && !strings.Contains(string(text), "sft: {") {
		t.Errorf("config.cue: %v\n%s", err, text)
	}
}

func TestRunGRPOMetrics(t *testing.T) {
	cat := runCatalog(t, "grpo", "knobs.num_rollout=2", "knobs.rollout_batch_size=4", "knobs.n_samples_per_prompt=4",
		"knobs.eval_every=0", "knobs.log_episodes_every=1", "knobs.n_val_samples_per_prompt=2", "task.validation_size=8")
	var out bytes.Buffer
	res, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: t.TempDir(), Out: &out, NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := trainRecords(metrics(t, res.Dir))
	if len(tr) != 2 {
		t.Fatalf("%d train records, want 2", len(tr))
	}
	for _, key := range []string{"reward/actor/mean", "reward/actor/std", "reward/actor/min", "reward/actor/max",
		"reward/actor/correct_frac", "advantage/actor/mean", "advantage/actor/std", "advantage/actor/fraction_zero", "actor/kl_loss",
		"actor/entropy", "actor/clipfrac", "actor/grad_norm", "actor/lr", "actor/loss", "perf/tokens_per_s",
		"time/generate", "termination/stop_frac", "response_length/mean"} {
		v := num(t, tr[1], key)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("%s = %g", key, v)
		}
	}
	if n := strings.Count(out.String(), "\nrollout "); n != 2 {
		t.Errorf("%d progress lines, want 2:\n%s", n, out.String())
	}
	eps, err := rundir.ReadEpisodes(filepath.Join(res.Dir, rundir.EpisodesFile))
	if err != nil || len(eps) == 0 {
		t.Fatalf("episodes: %d, %v", len(eps), err)
	}
	if _, ok := eps[0]["completion"].(string); !ok {
		t.Errorf("episode without completion: %v", eps[0])
	}
	if _, ok := eps[0]["advantage"].(float64); !ok {
		t.Errorf("episode without advantage: %v", eps[0])
	}
	// Two validation samples per prompt: pass@2 beside pass@1.
	for _, key := range []string{"val/accuracy", "val/arithmetic/pass@1", "val/arithmetic/pass@2"} {
		num(t, tr[1], key)
	}
}

func TestRunDPODistributedAccuracyRises(t *testing.T) {
	// The same 8 pairs every rollout: the policy must learn to prefer the chosen answers.
	cat := runCatalog(t, "dpo_distributed", "knobs.num_rollout=8", "knobs.rollout_batch_size=8", "knobs.lr=1e-3",
		"knobs.eval_every=0", "task.train_size=8", "task.validation_size=8")
	res, err := Run(context.Background(), cat, "dpo_distributed", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := trainRecords(metrics(t, res.Dir))
	first, last := num(t, tr[0], "policy/accuracy"), num(t, tr[len(tr)-1], "policy/accuracy")
	if !(last > first) || last < 0.75 {
		t.Errorf("preference accuracy %.3f → %.3f, want a rise to ≥ 0.75", first, last)
	}
	if m := num(t, tr[len(tr)-1], "policy/margins"); m <= 0 {
		t.Errorf("final margin %g, want > 0", m)
	}
}

// cancelAfter cancels a context when the console shows the progress line of
// a rollout: the engine's reaction to SIGINT.
type cancelAfter struct {
	mu     sync.Mutex
	line   string
	cancel context.CancelFunc
	buf    bytes.Buffer
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.line) {
		c.cancel()
	}
	return len(p), nil
}

// comparable drops wall-clock metrics, which no two runs share.
func comparable(recs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		c := map[string]any{}
		for k, v := range r {
			if !strings.HasPrefix(k, "time/") && !strings.HasPrefix(k, "perf/") {
				c[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}

func TestResumeEqualsUninterrupted(t *testing.T) {
	checkResumeEqualsUninterrupted(t, "grpo", "knobs.num_rollout=4", "knobs.rollout_batch_size=4",
		"knobs.n_samples_per_prompt=4", "knobs.eval_every=2", "knobs.save_every=0", "knobs.num_train_passes=2",
		"task.validation_size=8")
}

// checkResumeEqualsUninterrupted runs recipe (4 rollouts, with sets) uninterrupted, then again
// stopped after rollout 2 and resumed, and requires the same metrics record for record. It
// returns the uninterrupted run.
func checkResumeEqualsUninterrupted(t *testing.T, recipe string, sets ...string) *Result {
	t.Helper()
	full, err := Run(context.Background(), runCatalog(t, recipe, sets...), recipe, RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelAfter{line: "rollout 2/4", cancel: cancel}
	part, err := Run(ctx, runCatalog(t, recipe, sets...), recipe, RunOptions{RunsDir: t.TempDir(), Out: w})
	if err != nil {
		t.Fatal(err)
	}
	if !part.Interrupted || part.Rollouts != 2 {
		t.Fatalf("interrupted run: %+v", part)
	}
	res, err := Run(context.Background(), runCatalog(t, recipe, sets...), recipe, RunOptions{Resume: part.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 2 || res.Steps != full.Steps {
		t.Fatalf("resumed run: %d rollouts, %d steps; want 2 and %d", res.Rollouts, res.Steps, full.Steps)
	}
	a, b := comparable(metrics(t, full.Dir)), comparable(metrics(t, part.Dir))
	if len(a) != len(b) {
		t.Fatalf("%d records uninterrupted, %d resumed", len(a), len(b))
	}
	for i := range a {
		for k, v := range a[i] {
			if b[i][k] != v {
				t.Errorf("record %d %s: uninterrupted %v, resumed %v", i, k, v, b[i][k])
			}
		}
		if len(a[i]) != len(b[i]) {
			t.Errorf("record %d: keys differ: %v vs %v", i, a[i], b[i])
		}
	}
	return full
}

func TestNonFiniteLossStops(t *testing.T) {
	// A checkpoint whose final norm is finite but huge (a NaN weight is refused at load):
	// the logits overflow and the first step's loss is not finite.
	m, err := runtime.OpenModel("tiny", 3)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.ParamValues("model.norm.weight")
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i] = math.MaxFloat32
	}
	if err := m.SetParam("model.norm.weight", w); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := m.SaveHF(src, 0); err != nil {
		t.Fatal(err)
	}
	cat := runCatalog(t, "sft", "knobs.num_rollout=3", "knobs.rollout_batch_size=8", "knobs.eval_every=0",
		"knobs.save_every=1", "task.validation_size=4", `roles.policy.model.source="`+src+`"`)
	runs := t.TempDir()
	_, err = Run(context.Background(), cat, "sft", RunOptions{RunsDir: runs, NoEvalBefore: true})
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err = %v, want a non-finite stop", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `role "policy"`) || !strings.Contains(msg, "step 1") {
		t.Errorf("message %q does not name the role and step", msg)
	}
	// No checkpoint holds the broken weights.
	cps, _ := filepath.Glob(filepath.Join(runs, "*", "checkpoints", "0*"))
	if len(cps) != 0 {
		t.Errorf("checkpoints written after a NaN: %v", cps)
	}
}

func TestRunUnknownRecipe(t *testing.T) {
	cat := runCatalog(t, "sft")
	if _, err := Run(context.Background(), cat, "nope", RunOptions{RunsDir: t.TempDir()}); err == nil {
		t.Fatal("no error for an unknown recipe")
	}
}

func TestRunPPOTrainsPolicyAndCritic(t *testing.T) {
	if onXLA() {
		t.Skip("checked on the cpu backend; TestEveryCatalogRecipeRuns runs ppo on xla and checks its checkpoint")
	}
	cat := runCatalog(t, "ppo", "knobs.num_rollout=2", "knobs.rollout_batch_size=8", "knobs.eval_every=0",
		"task.validation_size=4")
	res, err := Run(context.Background(), cat, "ppo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := trainRecords(metrics(t, res.Dir))
	for _, key := range []string{"policy/loss", "policy/kl_loss", "value/vf_loss", "value/grad_norm", "advantage/policy/std"} {
		num(t, tr[len(tr)-1], key)
	}
	// Only trainable roles are checkpointed.
	cp := filepath.Join(res.Dir, "checkpoints", "000001")
	for role, want := range map[string]bool{"policy": true, "value": true, "reference": false} {
		_, err := os.Stat(filepath.Join(cp, role, "model.safetensors"))
		if (err == nil) != want {
			t.Errorf("checkpoint of role %s: %v, want present=%t", role, err, want)
		}
	}
}

func TestRunTeacherRecipes(t *testing.T) {
	if onXLA() {
		// Five runs and an SFT of 30 s on xla, compiling mostly.
		t.Skip("checked on the cpu backend; TestEveryCatalogRecipeRuns runs these recipes on xla")
	}
	// The teacher is the policy of a short SFT run.
	sft, err := Run(context.Background(), runCatalog(t, "sft", "knobs.num_rollout=3", "knobs.rollout_batch_size=16",
		"knobs.eval_every=0", "task.validation_size=4"), "sft", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	teacher := filepath.Join(sft.Dir, "checkpoints", "000002", "policy")
	want := map[string]string{"opd": "student/teacher_kl", "gkd": "student/loss", "dagger": "student/nll",
		"aggrevate": "student/loss", "mixed_loss_dagger_opd": "student/beta"}
	for name, key := range want {
		t.Run(name, func(t *testing.T) {
			cat := runCatalog(t, name, "knobs.num_rollout=1", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
				"knobs.num_train_passes=1", "knobs.eval_every=0", "task.validation_size=4",
				`roles.teacher.model.source="`+teacher+`"`)
			res, err := Run(context.Background(), cat, name, RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
			if err != nil {
				t.Fatal(err)
			}
			tr := trainRecords(metrics(t, res.Dir))
			v := num(t, tr[0], key)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s = %g", key, v)
			}
			if name == "opd" && v == 0 {
				t.Errorf("teacher_kl is 0: the teacher is not the SFT checkpoint")
			}
		})
	}
}

func TestRunFlowRecipes(t *testing.T) {
	for _, name := range []string{"flow_matching", "flow_grpo"} {
		t.Run(name, func(t *testing.T) {
			cat := runCatalog(t, name, "knobs.num_rollout=2", "knobs.eval_every=0")
			res, err := Run(context.Background(), cat, name, RunOptions{RunsDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			recs := metrics(t, res.Dir)
			num(t, recs[0], "val/log_density")
			tr := trainRecords(recs)
			role := cat.Recipes[name].Roles[0].Name
			num(t, tr[len(tr)-1], role+"/loss")
			if name == "flow_grpo" {
				num(t, tr[0], "reward/"+role+"/mean")
				num(t, tr[0], "advantage/"+role+"/std")
				num(t, tr[0], role+"/clipfrac")
			}
			if _, err := os.Stat(filepath.Join(res.Dir, "checkpoints", "000001", role, "model.safetensors")); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRunRewardRoleScoresRollouts(t *testing.T) {
	dir := t.TempDir()
	src := `package stx

recipes: rm_grpo: {
	description: "GRPO scored by a frozen reward model"
	roles: [
		{name: "actor", specialization: "actor", sync_to_rollout: true},
		{name: "rm", specialization: "reward_model", trainable: false, init: value_head: true},
	]
	syncs: []
	task: reward_role: "rm"
	knobs: {num_rollout: 1, rollout_batch_size: 2, n_samples_per_prompt: 4, eval_every: 0, estimator: "grpo"}
}
`
	file := filepath.Join(dir, "rm.cue")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := Load([]string{file}, schema.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cat, "rm_grpo", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := trainRecords(metrics(t, res.Dir))
	// A random value head gives distinct real-valued rewards, never the task's 0/1.
	if sd := num(t, tr[0], "reward/actor/std"); sd == 0 {
		t.Errorf("reward/actor/std = 0: the reward role did not score the rollout")
	}
	if mx := num(t, tr[0], "reward/actor/max"); mx == 1 || mx == 0 {
		t.Errorf("reward/actor/max = %g looks like the task reward", mx)
	}
}

func TestRunLimitsAndEvalOnly(t *testing.T) {
	if onXLA() {
		t.Skip("the loop's limits are the engine's, checked on the cpu backend")
	}
	for _, tc := range []struct {
		name        string
		sets        []string
		steps       int
		checkpoints int
	}{
		{"total_batches", []string{"knobs.num_rollout=10", "knobs.total_batches=3"}, 3, 1},
		{"passes", []string{"knobs.num_rollout=2", "knobs.num_train_passes=3"}, 6, 1},
		{"eval_only", []string{"knobs.eval_only=true"}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sets := append([]string{"knobs.rollout_batch_size=8", "knobs.eval_every=0", "knobs.save_every=0",
				"task.validation_size=4"}, tc.sets...)
			res, err := Run(context.Background(), runCatalog(t, "sft", sets...), "sft", RunOptions{RunsDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != tc.steps {
				t.Errorf("%d steps, want %d", res.Steps, tc.steps)
			}
			if n := len(trainRecords(metrics(t, res.Dir))); n != tc.steps {
				t.Errorf("%d train records, want %d", n, tc.steps)
			}
			cps, _ := filepath.Glob(filepath.Join(res.Dir, "checkpoints", "0*"))
			if len(cps) != tc.checkpoints {
				t.Errorf("checkpoints %v, want %d", cps, tc.checkpoints)
			}
		})
	}
}
