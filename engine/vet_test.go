package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

// TestReloaderVet: a running recipe with hot changes applied is vetted in
// memory, and its errors cite the user's file, or the --set, that set the
// value, not the rendering that was checked.
func TestReloaderVet(t *testing.T) {
	dir := t.TempDir()
	src := `package mine

recipes: sft: {
	roles: [{name: "policy", specialization: "sft"}]
	knobs: {
		top_k: 3
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "mine.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{nil, "mine.cue:6:10: recipes.sft.knobs.top_k: top_k has no effect with temperature 0 (greedy)"},
		{[]string{"knobs.top_k=5"}, "--set:1:13: recipes.sft.knobs.top_k: "},
	} {
		w := &reloader{files: []string{"mine.cue"}, opts: schema.Options{Dir: dir, Sets: c.sets}}
		cat, err := Load(w.files, w.opts)
		if err != nil {
			t.Fatal(err)
		}
		r := cat.Recipes["sft"]
		if err := w.vet(r); err != nil {
			t.Errorf("sets %v: the loaded recipe fails vet: %v", c.sets, err)
		}
		greedy := *r
		greedy.Knobs.Temperature = 0
		err = w.vet(&greedy)
		var l schema.List
		if !errors.As(err, &l) || len(l) != 1 || !strings.HasPrefix(l.Error(), c.want) {
			t.Errorf("sets %v: got %v, want one error %q…", c.sets, err, c.want)
		}
	}
}
