package schema

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCheck: a resolved recipe is validated in memory, reads back the same,
// and its errors cite the line of the user's file that set the value, or
// the rendering when no files are given.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	src := `package x
recipes: a: {
	roles: [{name: "p", specialization: "sft"}]
	knobs: top_k: 5
}
`
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	enums := Enums{Specializations: []string{"sft"}, Estimators: []string{"grpo"}, Tasks: []string{"arithmetic"}}
	opts := Options{Dir: dir, Enums: enums}
	cat, err := Load([]string{"r.cue"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := cat.Recipes["a"]
	back, err := Check(r, []string{"r.cue"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Recipes["a"], r) {
		t.Errorf("read back as\n%+v\nwant\n%+v", back.Recipes["a"], r)
	}

	bad := *r
	bad.Knobs.Temperature = 0
	for _, c := range []struct {
		files []string
		want  string
	}{
		{[]string{"r.cue"}, "r.cue:4:16: recipes.a.knobs.top_k: top_k has no effect with temperature 0 (greedy)"},
		{nil, "a.resolved.cue:"},
	} {
		_, err := Check(&bad, c.files, opts)
		var l List
		if !errors.As(err, &l) || len(l) != 1 {
			t.Fatalf("files %v: got %v, want one error", c.files, err)
		}
		if !strings.HasPrefix(l.Error(), c.want) {
			t.Errorf("files %v: got %q, want %q…", c.files, l.Error(), c.want)
		}
	}
}
