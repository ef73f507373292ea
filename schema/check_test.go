package schema

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestCheck: a resolved recipe is validated in memory, reads back the same,
// and its errors cite the line of the user's file that set the value, or
// the rendering when no files are given. The user's file is held in
// memory (Options.Sources), as an editor buffer would be.
func TestCheck(t *testing.T) {
	opts := Options{
		Dir:     t.TempDir(),
		Enums:   Enums{Specializations: []string{"sft"}, Estimators: []string{"grpo"}, Tasks: []string{"arithmetic"}},
		Sources: map[string][]byte{"r.cue": []byte("package x\nrecipes: a: {\n\troles: [{name: \"p\", specialization: \"sft\"}]\n\tknobs: top_k: 5\n}\n")},
	}
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
