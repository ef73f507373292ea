package engine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"stx.dev/stx"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// The recipes the catalog promises (the README lists them): every one must
// exist and pass vet.
var wantRecipes = []string{
	"sft", "grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce", "reinforce_pp",
	"remax", "ppo", "dpo", "dpo_distributed", "ipo", "rpo", "simpo", "orpo", "kto", "reward_model",
	"opd", "gkd", "dagger", "aggrevate", "mixed_loss_dagger_opd", "flow_matching", "flow_grpo",
	"grpo_calculator",
}

func loadCatalog(t testing.TB) *schema.Catalog {
	t.Helper()
	cat, err := Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: "."})
	if err != nil {
		t.Fatalf("recipes.cue does not vet:\n%v", err)
	}
	return cat
}

// TestCatalogVets is the torchtune-style test: every shipped recipe is
// valid, binds to registered specializations and has a sound role graph.
func TestCatalogVets(t *testing.T) {
	cat := loadCatalog(t)
	for _, name := range wantRecipes {
		if !slices.Contains(cat.Names, name) {
			t.Errorf("recipe %q missing from recipes.cue", name)
		}
	}
	for _, name := range cat.Names {
		r := cat.Recipes[name]
		if r.Description == "" {
			t.Errorf("recipe %q has no description", name)
		}
		g, probs := BuildGraph(r)
		if len(probs) > 0 {
			t.Errorf("recipe %q: %v", name, probs)
		}
		if len(g.Nodes) != len(r.Roles) {
			t.Errorf("recipe %q: %d nodes for %d roles", name, len(g.Nodes), len(r.Roles))
		}
		// The seeds' three passes per rollout for OPD (its PPO-clipped ratio to
		// the rollout policy keeps them stable), DAgger and AggreVaTe; one elsewhere.
		want := 1
		if name == "opd" || name == "dagger" || name == "aggrevate" {
			want = 3
		}
		if r.Knobs.NumTrainPasses != want {
			t.Errorf("recipe %q: num_train_passes %d, want %d", name, r.Knobs.NumTrainPasses, want)
		}
	}
}

// TestCatalogUsesEverySpecialization: each registered specialization has a
// recipe in the catalog that runs it, so `stx run` and the tests that train
// every recipe reach all of them.
func TestCatalogUsesEverySpecialization(t *testing.T) {
	cat := loadCatalog(t)
	used := map[string]bool{}
	for _, name := range cat.Names {
		for _, role := range cat.Recipes[name].Roles {
			used[role.Specialization] = true
		}
	}
	for _, name := range specializations.Names() {
		if !used[name] {
			t.Errorf("no recipe of the catalog runs specialization %q", name)
		}
	}
}

// TestBuiltinCatalogIsRecipesCue: the embedded catalog is the file.
func TestBuiltinCatalogIsRecipesCue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "recipes.cue"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(stx.Catalog) {
		t.Fatal("embedded catalog differs from recipes.cue")
	}
}

func TestGRPOAndDPODistributedShapes(t *testing.T) {
	cat := loadCatalog(t)
	g := cat.Recipes["grpo"]
	if len(g.Roles) != 1 || len(g.Syncs) != 0 {
		t.Fatalf("grpo: %d roles, %d syncs; want 1 and 0", len(g.Roles), len(g.Syncs))
	}
	a := g.Roles[0]
	if a.Name != "actor" || a.Specialization != "actor" || !a.SyncToRollout || !a.InitBool("with_ref") || !a.Trainable {
		t.Errorf("grpo role = %+v", a)
	}

	d := cat.Recipes["dpo_distributed"]
	if len(d.Roles) != 2 || len(d.Syncs) != 1 {
		t.Fatalf("dpo_distributed: %d roles, %d syncs; want 2 and 1", len(d.Roles), len(d.Syncs))
	}
	p, ok1 := d.Role("policy")
	ref, ok2 := d.Role("reference")
	if !ok1 || !ok2 || p.Specialization != "dpo" || ref.Specialization != "dpo" || !p.Trainable || ref.Trainable {
		t.Errorf("dpo_distributed roles = %+v", d.Roles)
	}
	s := d.Syncs[0]
	if s.Source != "reference" || s.Target != "policy" || !slices.Equal(s.Keys, []string{"log_probs"}) ||
		!slices.Equal(s.TargetKeys, []string{"ref_log_probs"}) || s.Stage != "inject" {
		t.Errorf("dpo_distributed sync = %+v", s)
	}
}

// TestEnumsFollowRegistries: the names a recipe may use are exactly the
// registered ones (the registries are the source of truth).
func TestEnumsFollowRegistries(t *testing.T) {
	dir := t.TempDir()
	write := func(spec string) string {
		f := filepath.Join(dir, spec+".cue")
		src := "package x\nrecipes: r: roles: [{name: \"p\", specialization: \"" + spec + "\"}]\n"
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, name := range Enums().Specializations {
		_, err := Load([]string{write(name)}, schema.Options{Dir: dir})
		if l, ok := err.(schema.List); ok {
			for _, e := range l {
				if e.Path == "recipes.r.roles[0].specialization" {
					t.Errorf("registered specialization %q rejected: %v", name, e)
				}
			}
		}
	}
	_, err := Load([]string{write("not_registered")}, schema.Options{Dir: dir})
	if err == nil {
		t.Fatal("unregistered specialization accepted")
	}
}

func BenchmarkVetCatalog(b *testing.B) {
	for b.Loop() {
		if _, err := Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: "."}); err != nil {
			b.Fatal(err)
		}
	}
}
