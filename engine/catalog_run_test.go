package engine

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"stx.dev/stx"
	"stx.dev/stx/schema"
)

// TestEveryCatalogRecipeRuns runs every recipe of the built-in catalog as `stx run -a NAME`
// does (the embedded catalog, engine.Run), on the backend the tests run on, for 2 rollouts of
// small batches: each must finish, checkpoint its trainable roles and record only finite
// metrics, and checkpoint no frozen role. TestEveryFamilyLearnsOnItsDefaults checks that the
// families learn; this one that no recipe of the catalog is left that does not run end to end
// (on xla, with the sampler decoding in graphs, as on the host-decoding cpu backends).
//
// Each run evaluates before and after training, as `stx run` does. Cost on 2 cores: about 8 s
// on the cpu backend once the package's tests have built tiny-sft and tiny-teacher (11 s when
// this test builds them); on XLA's CPU plugin about 2 minutes, nearly all of it XLA compiling
// each run's sampler, scorer and train step (2–5 s a recipe; XLA_FLAGS=
// --xla_backend_optimization_level=0 halves that).
func TestEveryCatalogRecipeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every recipe of the catalog")
	}
	base, err := Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// The recipes run are the catalog's own (TestCatalogVets checks that none went missing).
	if len(base.Names) == 0 {
		t.Fatal("the built-in catalog has no recipes")
	}
	for _, name := range base.Names {
		t.Run(name, func(t *testing.T) {
			k := base.Recipes[name].Knobs
			sets := []string{
				"knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.eval_every=0",
				"knobs.save_every=0", "task.validation_size=4",
				// Groups of two keep GRPO-style advantages meaningful at the smallest size.
				fmt.Sprintf("knobs.n_samples_per_prompt=%d", min(k.NSamplesPerPrompt, 2)),
			}
			if onSimpleGo() {
				// Building tiny-teacher takes two minutes on SimpleGo (TestEveryFamilyLearnsOnItsDefaults
				// skips it there too): the distillation recipes are taught by tiny-sft instead.
				for _, role := range base.Recipes[name].Roles {
					if role.Model.Source == "tiny-teacher" {
						sets = append(sets, fmt.Sprintf("roles.%s.model.source=%q", role.Name, "tiny-sft"))
					}
				}
			}
			cat, err := Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir(), Only: name, Sets: sets})
			if err != nil {
				t.Fatalf("load %s with %v: %v", name, sets, err)
			}
			res, err := Run(context.Background(), cat, name, RunOptions{RunsDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if res.Rollouts != 2 || res.Steps < 2 || res.Interrupted {
				t.Errorf("%d rollouts, %d steps, interrupted %t; want 2 rollouts of at least one step each",
					res.Rollouts, res.Steps, res.Interrupted)
			}
			recs := metrics(t, res.Dir)
			if len(trainRecords(recs)) == 0 {
				t.Fatal("no optimizer step recorded")
			}
			for i, rec := range recs {
				for key, v := range rec {
					if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
						t.Errorf("record %d (step %v): %s = %v", i, rec["step"], key, f)
					}
				}
			}
			// The final checkpoint (rollout index 1) holds every trainable role, and no frozen one.
			trained := 0
			for _, role := range cat.Recipes[name].Roles {
				f := filepath.Join(res.Dir, "checkpoints", "000001", role.Name, "model.safetensors")
				_, err := os.Stat(f)
				switch {
				case role.Trainable && err != nil:
					t.Errorf("trainable role %s: %v", role.Name, err)
				case !role.Trainable && err == nil:
					t.Errorf("frozen role %s checkpointed", role.Name)
				}
				if role.Trainable {
					trained++
				}
			}
			if trained == 0 {
				t.Errorf("recipe %s has no trainable role", name)
			}
		})
	}
}
