package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// loraSets turns on LoRA (rank 4 on every projection) for every trainable language-model role of
// the recipe, as `--set roles.NAME.model.lora...` does.
func loraSets(rec *schema.Recipe) (sets []string, lmRoles int) {
	for _, r := range rec.Roles {
		if !r.Trainable || r.Model.Source == "flow_mlp" {
			continue
		}
		sets = append(sets, fmt.Sprintf("roles.%s.model.lora.rank=4", r.Name),
			fmt.Sprintf("roles.%s.model.lora.targets=[%q]", r.Name, runtime.LoRAAllLinear))
		lmRoles++
	}
	return sets, lmRoles
}

// TestLoRAEveryFamilyRuns runs every catalog recipe that trains a language-model role (RL,
// preference, distillation, SFT, reward model) with LoRA on those roles, for 2 short rollouts:
// each must finish with finite metrics and checkpoint its LoRA roles as PEFT adapter
// directories (adapters and optimizer state, no full model).
func TestLoRAEveryFamilyRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every language-model recipe of the catalog")
	}
	base, err := Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, name := range base.Names {
		rec := base.Recipes[name]
		lsets, n := loraSets(rec)
		if n == 0 {
			continue // the flow recipes train a velocity model
		}
		ran++
		t.Run(name, func(t *testing.T) {
			sets := append([]string{
				"knobs.num_rollout=2", "knobs.rollout_batch_size=2", "knobs.eval_every=0",
				"knobs.save_every=0", "task.validation_size=4",
				fmt.Sprintf("knobs.n_samples_per_prompt=%d", min(rec.Knobs.NSamplesPerPrompt, 2)),
			}, lsets...)
			if onSimpleGo() {
				for _, role := range rec.Roles {
					if role.Model.Source == "tiny-teacher" {
						sets = append(sets, fmt.Sprintf("roles.%s.model.source=%q", role.Name, "tiny-sft"))
					}
				}
			}
			cat, err := Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir(), Only: name, Sets: sets})
			if err != nil {
				t.Fatalf("load %s with %v: %v", name, sets, err)
			}
			res, err := Run(context.Background(), cat, name, RunOptions{RunsDir: t.TempDir(), Quiet: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Rollouts != 2 || res.Steps < 2 {
				t.Errorf("%d rollouts, %d steps; want 2 rollouts of at least one step each", res.Rollouts, res.Steps)
			}
			if len(trainRecords(metrics(t, res.Dir))) == 0 {
				t.Fatal("no optimizer step recorded")
			}
			for _, role := range cat.Recipes[name].Roles {
				if role.Model.LoRA == nil {
					continue
				}
				dir := filepath.Join(res.Dir, "checkpoints", "000001", role.Name)
				if _, _, err := runtime.ReadAdapterConfig(dir); err != nil {
					t.Errorf("role %s: %v", role.Name, err)
				}
				if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
					t.Errorf("role %s: a LoRA checkpoint holds a full model", role.Name)
				}
			}
		})
	}
	if ran < 10 {
		t.Errorf("only %d recipes train a language model: the catalog test lost its families", ran)
	}
}

// TestLoRAResumeEqualsUninterrupted: a GRPO run with LoRA (and its with_ref reference, the base
// with adapters off) resumed from a checkpoint records what the uninterrupted run does.
func TestLoRAResumeEqualsUninterrupted(t *testing.T) {
	checkResumeEqualsUninterrupted(t, "grpo", "knobs.num_rollout=4", "knobs.rollout_batch_size=4",
		"knobs.n_samples_per_prompt=2", "knobs.eval_every=0", "knobs.save_every=0",
		"task.validation_size=4", "roles.actor.model.lora.rank=4", "knobs.kl_loss_coef=0.1")
}

// TestLoRADPODistributedResumes: the same with a frozen reference role that computes with the
// policy's base (dpo_distributed).
func TestLoRADPODistributedResumes(t *testing.T) {
	checkResumeEqualsUninterrupted(t, "dpo_distributed", "knobs.num_rollout=4", "knobs.rollout_batch_size=4",
		"knobs.eval_every=0", "knobs.save_every=0", "task.validation_size=4", "roles.policy.model.lora.rank=4")
}

// TestLoRAReferenceIsTheBase: with LoRA, the in-role reference (with_ref) and a frozen reference
// role on the same source compute with the policy's own variables, adapters off: no second copy
// of the weights; and their log-probs are the base model's.
func TestLoRAReferenceIsTheBase(t *testing.T) {
	b, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ recipe, policy, ref string }{
		{"dpo", "policy", ""},
		{"dpo_distributed", "policy", "reference"},
	} {
		cat := runCatalog(t, tc.recipe, fmt.Sprintf("roles.%s.model.lora.rank=2", tc.policy))
		rec := cat.Recipes[tc.recipe]
		g, probs := BuildGraph(rec)
		if len(probs) > 0 {
			t.Fatal(probs)
		}
		roles, err := buildRoles(b, g, 1, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var pol, ref *role
		for _, r := range roles {
			switch r.name() {
			case tc.policy:
				pol = r
			case tc.ref:
				ref = r
			}
		}
		if pol == nil || pol.model.LoRA() == nil {
			t.Fatalf("%s: the policy has no adapters", tc.recipe)
		}
		if tc.ref != "" {
			if ref == nil || ref.model.Context() != pol.model.Context() {
				t.Errorf("%s: the frozen reference role holds weights of its own", tc.recipe)
			}
			if ref != nil && ref.model.LoRA() == nil {
				t.Errorf("%s: the reference shares the policy's model but does not know its adapters", tc.recipe)
			}
		}
		// The base, computed with adapters off, scores as a model of the same source without
		// adapters does, whatever the adapters hold.
		for _, p := range pol.model.AdapterParams() {
			v := make([]float32, shapeSizeOf(p.Shape))
			for i := range v {
				v[i] = 0.01 * float32(i%7+1)
			}
			if err := pol.model.SetAdapter(p.Name, v); err != nil {
				t.Fatal(err)
			}
		}
		plain, err := runtime.OpenModel("tiny", sourceSeed(rec.Knobs))
		if err != nil {
			t.Fatal(err)
		}
		seq := [][]int32{{1, 5, 9, 77, 3, 8}}
		score := func(m *runtime.Model) []float32 {
			sc, err := runtime.NewScorer(b, m)
			if err != nil {
				t.Fatal(err)
			}
			out, err := sc.Score(seq)
			if err != nil {
				t.Fatal(err)
			}
			return out[0].LogProbs
		}
		want, off, on := score(plain), score(pol.model.WithoutAdapters()), score(pol.model)
		for i := range want {
			if want[i] != off[i] {
				t.Fatalf("%s: base log-prob %d: %v with adapters off, %v without adapters", tc.recipe, i, off[i], want[i])
			}
		}
		if on[0] == off[0] && on[1] == off[1] {
			t.Errorf("%s: the adapters change nothing", tc.recipe)
		}
	}
}

func shapeSizeOf(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// TestLoRARefusals: what a run cannot do with model.lora is an error naming the field before
// anything trains.
func TestLoRARefusals(t *testing.T) {
	b, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		recipe string
		sets   []string
		want   string
	}{
		{"flow_grpo", []string{"roles.policy.model.lora.rank=4"}, "model.lora: LoRA adapts the projections of language models"},
		{"sft", []string{`roles.policy.model.lora.adapter="no/such/dir"`}, "model.lora.adapter"},
	} {
		rec := runCatalog(t, tc.recipe, tc.sets...).Recipes[tc.recipe]
		g, probs := BuildGraph(rec)
		if len(probs) > 0 {
			t.Fatal(probs)
		}
		_, err := buildRoles(b, g, 1, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want an error containing %q", tc.recipe, tc.sets, err, tc.want)
		}
	}
}
