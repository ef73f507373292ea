package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/runtime"
)

// tinySFT are the knobs of a run of a few seconds with a checkpoint per rollout.
var tinySFT = []string{"knobs.num_rollout=3", "knobs.rollout_batch_size=4", "knobs.micro_batch_size=4",
	"knobs.eval_every=0", "knobs.save_every=1", "knobs.keep_checkpoints=0", "task.validation_size=4"}

func lastEvent(t *testing.T, dir string) rundir.Event {
	t.Helper()
	evs, err := rundir.ReadEvents(filepath.Join(dir, rundir.EventsFile))
	if err != nil || len(evs) == 0 {
		t.Fatalf("events: %v (%d)", err, len(evs))
	}
	return evs[len(evs)-1]
}

// TestRunEndAfterFailedFirstRollout: a run that fails in its very first
// rollout still ends events.jsonl with run_end and the error.
func TestRunEndAfterFailedFirstRollout(t *testing.T) {
	boom := errors.New("injected sampler failure")
	runs := t.TempDir()
	cat := runCatalog(t, "grpo", "knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2",
		"knobs.max_new_tokens=4", "knobs.eval_every=0", "task.validation_size=4", "knobs.rollout_retries=0")
	_, err := Run(context.Background(), cat, "grpo", RunOptions{RunsDir: runs, NoEvalBefore: true,
		hooks: &runHooks{rolloutFault: func(int, int) error { return boom }}})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the injected failure", err)
	}
	dirs, _ := filepath.Glob(filepath.Join(runs, "grpo-*"))
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	if e := lastEvent(t, dirs[0]); e.Type != rundir.EventRunEnd || !strings.Contains(e.Message, boom.Error()) {
		t.Errorf("last event %+v, want run_end with the error", e)
	}
}

// TestResumeRejectsCorruptLatest: a latest checkpoint whose weights were
// damaged is moved aside (never deleted), reported on the console and in
// events.jsonl, and the run resumes from the previous complete one.
func TestResumeRejectsCorruptLatest(t *testing.T) {
	res, err := Run(context.Background(), runCatalog(t, "sft", tinySFT...), "sft", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	latest := filepath.Join(res.Dir, rundir.CheckpointsDir, "000002")
	weights := filepath.Join(latest, "policy", "model.safetensors")
	data, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff // same size: only the checksum sees it
	if err := os.WriteFile(weights, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cat := runCatalog(t, "sft", append(tinySFT, "knobs.num_rollout=4")...)
	res2, err := Run(context.Background(), cat, "sft", RunOptions{Resume: res.Dir, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Rollouts != 2 {
		t.Errorf("resumed run did %d rollouts, want 2 (rollouts 3 and 4 after the checkpoint of rollout 2)", res2.Rollouts)
	}
	aside, _ := filepath.Glob(latest + rundir.RejectedInfix + "*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v", aside)
	}
	if got, err := os.ReadFile(filepath.Join(aside[0], "policy", "model.safetensors")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the rejected checkpoint's files were not kept as they were: %v", err)
	}
	if !strings.Contains(out.String(), "checkpoint 000002 rejected") || !strings.Contains(out.String(), "CRC-32C") {
		t.Errorf("console does not report the rejection:\n%s", out.String())
	}
	evs, err := rundir.ReadEvents(filepath.Join(res.Dir, rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Type == rundir.EventCheckpointRejected && e.Rollout == 2 && e.Checkpoint == aside[0] {
			found = true
		}
		if e.Type == rundir.EventRunResume && e.Rollout != 1 {
			t.Errorf("resumed from rollout %d, want 1", e.Rollout)
		}
	}
	if !found {
		t.Errorf("no checkpoint_rejected event for rollout 2 in %+v", evs)
	}
}

// TestResumeNoUsableCheckpoint: when every checkpoint fails, resuming
// fails, naming each, and still deletes none.
func TestResumeNoUsableCheckpoint(t *testing.T) {
	res, err := Run(context.Background(), runCatalog(t, "sft", append(tinySFT, "knobs.num_rollout=2")...), "sft",
		RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	cps, _ := filepath.Glob(filepath.Join(res.Dir, rundir.CheckpointsDir, "00000[0-9]"))
	if len(cps) != 2 {
		t.Fatalf("checkpoints %v", cps)
	}
	for _, cp := range cps {
		if err := os.WriteFile(filepath.Join(cp, engineFile), []byte(`{"rollout": -7}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Run(context.Background(), runCatalog(t, "sft", tinySFT...), "sft", RunOptions{Resume: res.Dir})
	// engine.json's new size no longer matches COMPLETE: both are incomplete.
	if err == nil || !strings.Contains(err.Error(), "no complete checkpoint") || !strings.Contains(err.Error(), "000000") ||
		!strings.Contains(err.Error(), "000001") {
		t.Fatalf("err = %v", err)
	}
	aside, _ := filepath.Glob(filepath.Join(res.Dir, rundir.CheckpointsDir, "*"+rundir.RejectedInfix+"*"))
	if len(aside) != 2 {
		t.Errorf("moved aside: %v, want both checkpoints", aside)
	}
}

// TestLoopStateCheck: engine.json values out of range are refused.
func TestLoopStateCheck(t *testing.T) {
	rng, err := rand.NewPCG(1, 2).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	good := loopState{Rollout: 4, Step: 10, Cursor: 40, RNG: rng, Version: 2}
	if err := good.check(4); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(*loopState)
		want string
	}{
		"other rollout":   {func(s *loopState) { s.Rollout = 3 }, "rollout 3 in the checkpoint of rollout 4"},
		"negative step":   {func(s *loopState) { s.Step = -1 }, "negative step"},
		"huge step":       {func(s *loopState) { s.Step = 1 << 50 }, "beyond any run"},
		"negative cursor": {func(s *loopState) { s.Cursor = -3 }, "negative data cursor"},
		"huge cursor":     {func(s *loopState) { s.Cursor = 1 << 62 }, "beyond any run"},
		"bad version":     {func(s *loopState) { s.Version = -2 }, "negative recipe version"},
		"no rng":          {func(s *loopState) { s.RNG = nil }, "rng"},
		"short rng":       {func(s *loopState) { s.RNG = rng[:5] }, "rng"},
	} {
		s := good
		tc.edit(&s)
		if err := s.check(4); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestResumeAfterSourceRemoved: a run whose roles came from a model
// directory resumes after that directory is gone, with the metrics of an
// uninterrupted run: trained roles from the checkpoint's own weights,
// frozen ones (a reference role, a with_ref role's reference) from the
// initial weights the run kept.
func TestResumeAfterSourceRemoved(t *testing.T) {
	for _, tc := range []struct {
		recipe string
		sets   []string
	}{
		{"sft", []string{`roles.policy.model.source="SRC"`}},
		{"dpo", []string{`roles.policy.model.source="SRC"`}},
		{"dpo_distributed", []string{`roles.policy.model.source="SRC"`, `roles.reference.model.source="SRC"`}},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			if onXLA() && tc.recipe != "dpo_distributed" {
				// Which weights a resumed run loads is the engine's choice, checked here on
				// the cpu backend; on xla (15 s a recipe) the recipe with both a trained and
				// a separate frozen role shows the resumed run bit-exact.
				t.Skip("checked on the cpu backend; dpo_distributed runs on xla")
			}
			checkResumeWithoutSource(t, tc.recipe, tc.sets)
		})
	}
}

func checkResumeWithoutSource(t *testing.T, recipe string, srcSets []string) {
	m, err := runtime.OpenModel("tiny", 5)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "base")
	if err := m.SaveHF(src, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "generation_config.json"), []byte(`{"max_length": 64}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sets []string
	for _, s := range srcSets {
		sets = append(sets, strings.Replace(s, "SRC", src, 1))
	}
	sets = append(sets, append(tinySFT, "knobs.num_rollout=4", "knobs.keep_checkpoints=1")...)
	full, err := Run(context.Background(), runCatalog(t, recipe, sets...), recipe, RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	part, err := Run(ctx, runCatalog(t, recipe, sets...), recipe, RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true,
		Out: &cancelAfter{line: "rollout 2/4", cancel: cancel}})
	if err != nil || !part.Interrupted {
		t.Fatalf("interrupted run: %+v, %v", part, err)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), runCatalog(t, recipe, sets...), recipe, RunOptions{Resume: part.Dir})
	if err != nil {
		t.Fatalf("resume without the source directory: %v", err)
	}
	if res.Steps != full.Steps {
		t.Errorf("resumed run ends at step %d, uninterrupted at %d", res.Steps, full.Steps)
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
	}
	// The side files still reach the last checkpoint, although the one
	// resumed from was pruned (keep_checkpoints 1).
	last := filepath.Join(part.Dir, rundir.CheckpointsDir, "000003", "policy", "generation_config.json")
	if data, err := os.ReadFile(last); err != nil || !strings.Contains(string(data), "max_length") {
		t.Errorf("%s: %q, %v", last, data, err)
	}
}

// TestSourceLinkOutsideModelRefused: a model directory whose tokenizer file
// links outside it is refused before training; nothing of the link's
// target reaches the run directory.
func TestSourceLinkOutsideModelRefused(t *testing.T) {
	m, err := runtime.OpenModel("tiny", 5)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	src := filepath.Join(root, "base")
	if err := m.SaveHF(src, 0); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(root, "id_rsa")
	if err := os.WriteFile(secret, []byte("PRIVATE KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(src, "tokenizer.json")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	runs := t.TempDir()
	sets := append([]string{`roles.policy.model.source="` + src + `"`}, tinySFT...)
	_, err = Run(context.Background(), runCatalog(t, "sft", sets...), "sft", RunOptions{RunsDir: runs, NoEvalBefore: true})
	if err == nil || !strings.Contains(err.Error(), "outside the model directory") {
		t.Fatalf("err = %v, want the link refused", err)
	}
	filepath.Walk(runs, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte("PRIVATE KEY")) {
				t.Errorf("%s holds the link's target", p)
			}
		}
		return nil
	})
}
