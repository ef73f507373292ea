package schema

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testEnums = Enums{Specializations: []string{"sft"}, Estimators: []string{"grpo"}, Tasks: []string{"arithmetic"}}

// TestNumbersFloat64CannotHold: CUE's exact decimals accept values that are
// 0 or ±Inf as float64; they are refused at their position, from a file, a
// --set and the environment alike.
func TestNumbersFloat64CannotHold(t *testing.T) {
	dir := t.TempDir()
	src := "package x\nrecipes: a: {\n\troles: [{name: \"p\", specialization: \"sft\"}]\n\tknobs: lr: 1e-400\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"r.cue"}, Options{Dir: dir, Enums: testEnums})
	if err == nil || err.Error() != "r.cue:4:13: recipes.a.knobs.lr: 1e-400 is too small for a float64: it would be 0 (smallest 5e-324)" {
		t.Errorf("file: %v", err)
	}
	src = "package x\nrecipes: a: {\n\troles: [{name: \"p\", specialization: \"sft\"}]\n\tknobs: lr: 1e-400000\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load([]string{"r.cue"}, Options{Dir: dir, Enums: testEnums})
	if err == nil || err.Error() != "r.cue:4:13: recipes.a.knobs.lr: 1e-400000 is too small for a float64: it would be 0 (smallest 5e-324)" {
		t.Errorf("file, exponent past CUE's range: %v", err)
	}
	ok := "package x\nrecipes: a: roles: [{name: \"p\", specialization: \"sft\"}]\n"
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(ok), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Sets: []string{"knobs.lr=1e-400"}}, "--set:1:10: knobs.lr: 1e-400 is too small"},
		{Options{Sets: []string{"knobs.entropy_coef=0.0000e-999"}}, ""}, // a zero written oddly is still 0
		{Options{Sets: []string{"knobs.max_grad_norm=2e308"}}, "--set:1:21: knobs.max_grad_norm: 2e308 is too large"},
		{Options{Env: []string{"STX_LR=1e-330"}}, "$STX_LR:1:8: knobs.lr: 1e-330 is too small"},
		{Options{Sets: []string{"knobs.lr=5e-324"}}, ""}, // the smallest float64 is kept
		// CUE itself reads exponents past its range as another number (1e-400000 as 1).
		{Options{Sets: []string{"knobs.lr=1e-400000"}}, "--set:1:10: knobs.lr: 1e-400000 is too small"},
		{Options{Sets: []string{"knobs.max_grad_norm=1e400000"}}, "--set:1:21: knobs.max_grad_norm: 1e400000 is too large"},
	} {
		tc.opts.Dir, tc.opts.Enums = dir, testEnums
		_, err := Load([]string{"r.cue"}, tc.opts)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.opts.Sets, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v %v: %v, want %q", tc.opts.Sets, tc.opts.Env, err, tc.want)
		}
	}
}

func TestNumberProblem(t *testing.T) {
	for lit, bad := range map[string]bool{
		"1e-400": true, "1E-400": true, "-1e-400": true, "0.0": false, "0e-999": false, "-0.000": false,
		"1e308": false, "1e309": true, "-1e309": true, "5e-324": false, "2e-324": true,
		"9223372036854775807": false, "9223372036854775808": true, "-9223372036854775809": true, "12": false,
	} {
		if got := numberProblem(lit) != ""; got != bad {
			t.Errorf("numberProblem(%s) = %q, want a problem: %v", lit, numberProblem(lit), bad)
		}
	}
}

// TestSizeProducts: knobs within their ranges whose product is absurd are
// refused, at the factor the user set.
func TestSizeProducts(t *testing.T) {
	dir := t.TempDir()
	ok := "package x\nrecipes: a: roles: [{name: \"p\", specialization: \"sft\"}]\n"
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(ok), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"r.cue"}, Options{Dir: dir, Enums: testEnums,
		Sets: []string{"knobs.rollout_batch_size=65536", "knobs.n_samples_per_prompt=32"}})
	want := "--set:1:26: recipes.a.knobs.rollout_batch_size: a rollout of rollout_batch_size 65536 × n_samples_per_prompt 32 = 2097152 sequences exceeds the limit of 1048576"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	_, err = Load([]string{"r.cue"}, Options{Dir: dir, Enums: testEnums, Sets: []string{"knobs.rollout_batch_size=65537"}})
	if err == nil || !strings.Contains(err.Error(), "must be <=65536") {
		t.Errorf("rollout_batch_size over its range: %v", err)
	}
}

// TestSpecialRecipeFiles: a FIFO, a device or a huge file named as a recipe
// is refused at once, never read.
func TestSpecialRecipeFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.cue")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxRecipeFile + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	_, err = Load([]string{"big.cue"}, Options{Dir: dir, Enums: testEnums})
	if err == nil || !strings.Contains(err.Error(), "big.cue:1:1: ") || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("huge file: %v", err)
	}
	if st, err := os.Stat("/dev/zero"); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		if err := os.Symlink("/dev/zero", filepath.Join(dir, "dev.cue")); err != nil {
			t.Fatal(err)
		}
		_, err = Load([]string{"dev.cue"}, Options{Dir: dir, Enums: testEnums})
		if err == nil || !strings.Contains(err.Error(), "dev.cue:1:1: ") || !strings.Contains(err.Error(), "character device") {
			t.Errorf("device: %v", err)
		}
	}
	if err := mkfifo(filepath.Join(dir, "pipe.cue")); err != nil {
		if errors.Is(err, errNoFIFO) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	_, err = Load([]string{"pipe.cue"}, Options{Dir: dir, Enums: testEnums})
	if err == nil || err.Error() != "pipe.cue:1:1: a named pipe (FIFO), not a regular file" {
		t.Errorf("FIFO: %v", err)
	}
}

// TestTooManyRecipes: a load stops with a clear error past maxRecipes
// instead of growing without bound.
func TestTooManyRecipes(t *testing.T) {
	var b strings.Builder
	b.WriteString("package x\n")
	for i := range 12 {
		fmt.Fprintf(&b, "recipes: r%d: roles: p: specialization: \"sft\"\n", i)
	}
	_, err := Load([]string{"r.cue"}, Options{Dir: t.TempDir(), Sources: map[string][]byte{"r.cue": []byte(b.String())},
		Enums: Enums{Specializations: []string{"sft"}}, maxRecipes: 10})
	if err == nil || !strings.Contains(err.Error(), "r.cue:12:15: recipes.r10: more than 10 recipes in one load") {
		t.Fatalf("got %v", err)
	}
}
