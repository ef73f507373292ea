package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecipeVersions(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	v1 := []byte("recipes: grpo: knobs: lr: 1e-6\n")
	v2 := []byte("recipes: grpo: knobs: lr: 3e-6\n")
	steps := []struct {
		version  int
		text     []byte
		err      string
		config   []byte
		versions string
	}{
		{1, v1, "", v1, "[1]"},
		{2, v2, "", v2, "[1 2]"},
		{1, v1, "", v1, "[1 2]"}, // a resumed run re-records v1 unchanged
		{2, v1, "already recorded", v1, "[1 2]"},
		{0, v1, "version 0", v1, "[1 2]"},
		{3, []byte(" \n"), "empty recipe", v1, "[1 2]"},
	}
	for i, s := range steps {
		err := d.WriteRecipe(s.version, s.text)
		if (s.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), s.err)) {
			t.Errorf("step %d: WriteRecipe(%d): %v, want %q", i, s.version, err, s.err)
		}
		if cfg, err := d.Config(); err != nil || string(cfg) != string(s.config) {
			t.Errorf("step %d: config.cue %q, %v", i, cfg, err)
		}
		if vs, err := d.RecipeVersions(); err != nil || fmt.Sprint(vs) != s.versions {
			t.Errorf("step %d: versions %v, %v; want %s", i, vs, err, s.versions)
		}
	}
	if got, err := d.ReadRecipe(2); err != nil || string(got) != string(v2) {
		t.Errorf("ReadRecipe(2) = %q, %v", got, err)
	}
	if _, err := d.ReadRecipe(7); err == nil {
		t.Error("ReadRecipe(7) succeeded")
	}
	// Files that are not versions are ignored; no temporary files remain.
	for _, name := range []string{"v01.cue", "v-1.cue", "vx.cue", "notes.txt"} {
		os.WriteFile(filepath.Join(d.Path(), RecipesDir, name), nil, 0o644)
	}
	if vs, _ := d.RecipeVersions(); fmt.Sprint(vs) != "[1 2]" {
		t.Errorf("versions with junk beside them: %v", vs)
	}
	for _, dir := range []string{d.Path(), filepath.Join(d.Path(), RecipesDir)} {
		matches, _ := filepath.Glob(filepath.Join(dir, tmpPrefix+"*"))
		if len(matches) > 0 {
			t.Errorf("temporary files left: %v", matches)
		}
	}
}
