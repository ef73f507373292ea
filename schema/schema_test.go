package schema

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
)

// jsonNames lists the json tags of a struct type.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		if tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	sort.Strings(names)
	return names
}

// TestStructsMatchSchema: every field of a schema definition has a Go field
// with its name and the reverse, so decoding cannot silently drop a value.
func TestStructsMatchSchema(t *testing.T) {
	v := cuecontext.New().CompileString(schemaSource)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	for def, typ := range map[string]reflect.Type{
		"#Recipe": reflect.TypeOf(Recipe{}),
		"#Role":   reflect.TypeOf(Role{}),
		"#Model":  reflect.TypeOf(Model{}),
		"#Sync":   reflect.TypeOf(Sync{}),
		"#Task":   reflect.TypeOf(Task{}),
		"#Reward": reflect.TypeOf(Reward{}),
		"#Knobs":  reflect.TypeOf(Knobs{}),
	} {
		got := fieldNames(v.LookupPath(cue.ParsePath(def)))
		got = slices.DeleteFunc(got, func(s string) bool { return def == "#Recipe" && s == "defaults" })
		sort.Strings(got)
		want := jsonNames(typ)
		if !slices.Equal(got, want) {
			t.Errorf("%s fields %v\n%s json tags %v", def, got, typ.Name(), want)
		}
	}
}

func TestKnobDocs(t *testing.T) {
	docs, err := KnobDocs()
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != len(jsonNames(reflect.TypeOf(Knobs{}))) {
		t.Errorf("%d knob docs for %d knobs", len(docs), len(jsonNames(reflect.TypeOf(Knobs{}))))
	}
	byName := map[string]KnobDoc{}
	for _, k := range docs {
		byName[k.Name] = k
		if k.Doc == "" || k.Constraint == "" || k.Group == "" {
			t.Errorf("knob %s is not fully documented: %+v", k.Name, k)
		}
	}
	for name, want := range map[string]KnobDoc{
		"lr":          {Constraint: "number & >0 & <=1", Default: "1e-6", Hot: true},
		"seed":        {Constraint: "int & >=0", Default: "1234", Hot: false},
		"lr_schedule": {Constraint: `"constant" | "linear" | "cosine"`, Default: `"constant"`, Hot: true},
		"std_ddof":    {Constraint: "0 | 1", Default: "0", Hot: true},
		"dual_clip_c": {Constraint: "number & >1", Default: "", Hot: false, Optional: true},
	} {
		got := byName[name]
		if got.Constraint != want.Constraint || got.Default != want.Default || got.Hot != want.Hot || got.Optional != want.Optional {
			t.Errorf("knob %s = %+v, want %+v", name, got, want)
		}
	}
	for name, group := range map[string]string{"seed": "loop", "lr": "optimizer (AdamW, Loshchilov & Hutter, 2019)", "loss_agg_mode": "losses (policy and value)", "log_episodes_every": "evaluation, checkpoints, logging"} {
		if byName[name].Group != group {
			t.Errorf("knob %s in group %q, want %q", name, byName[name].Group, group)
		}
	}
	if byName["lr"].Env() != "STX_LR" || byName["estimator_map"].Env() != "" {
		t.Errorf("env names: %q %q", byName["lr"].Env(), byName["estimator_map"].Env())
	}
}

// TestSplitSchemaKeepsDefaults: the defaults stx fills in are the schema's.
func TestSplitSchemaKeepsDefaults(t *testing.T) {
	text, defaults, err := splitSchema()
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := KnobDocs()
	for _, k := range docs {
		if k.Default != defaults[k.Name] {
			t.Errorf("knob %s: split default %q, documented %q", k.Name, defaults[k.Name], k.Default)
		}
	}
	v := cuecontext.New().CompileString(text)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.LookupPath(cue.ParsePath("#Knobs.lr")).Default(); ok {
		t.Error("stripped schema still has a default for lr")
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"constant", "linear", "cosine"}
	for in, want := range map[string]string{
		"linaer": "linear", "cosin": "cosine", "constnat": "constant", "exponential": "", "lin": "",
	} {
		if got := Suggest(in, cands); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance = %d", d)
	}
}

func TestLoadAppliesOverridesAndDefaults(t *testing.T) {
	dir := t.TempDir()
	src := `package x
recipes: a: {
	roles: [{name: "p", specialization: "sft"}]
	defaults: {lr: 1e-4, seed: 7}
	knobs: top_k: 5
}
recipes: b: recipes.a & {knobs: lr: 2e-4}
`
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	enums := Enums{Specializations: []string{"sft"}, Estimators: []string{"grpo"}, Tasks: []string{"arithmetic"}}
	cat, err := Load([]string{"r.cue"}, Options{Dir: dir, Enums: enums, Sets: []string{"recipes.a.knobs.seed=9"}, Env: []string{"STX_WARMUP_RATIO=0.1", "STX_LR="}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := cat.Recipes["a"].Knobs, cat.Recipes["b"].Knobs
	if a.LR != 1e-4 || b.LR != 2e-4 {
		t.Errorf("lr: a %g b %g; want 1e-4 and 2e-4 (recipe defaults stay open)", a.LR, b.LR)
	}
	if a.Seed != 9 || b.Seed != 7 {
		t.Errorf("seed: a %d b %d; want 9 (--set recipes.a) and 7", a.Seed, b.Seed)
	}
	if a.WarmupRatio != 0.1 || b.WarmupRatio != 0.1 {
		t.Errorf("warmup_ratio from STX_WARMUP_RATIO: %g %g", a.WarmupRatio, b.WarmupRatio)
	}
	if a.TopK != 5 || a.LRSchedule != "constant" || a.MaxGradNorm != 1.0 || a.AdamBeta2 != 0.999 {
		t.Errorf("schema defaults not applied: %+v", a)
	}
	if cat.Recipes["a"].Name != "a" {
		t.Errorf("name = %q", cat.Recipes["a"].Name)
	}
}

func TestFinalKnobCannotBeOverriddenByUnification(t *testing.T) {
	dir := t.TempDir()
	src := `package x
recipes: a: {
	roles: [{name: "p", specialization: "sft"}]
	knobs: lr: 1e-4
}
recipes: b: recipes.a & {knobs: lr: 2e-4}
`
	if err := os.WriteFile(filepath.Join(dir, "r.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"r.cue"}, Options{Dir: dir, Enums: Enums{Specializations: []string{"sft"}}})
	l, ok := err.(List)
	if !ok || len(l) != 1 || !strings.Contains(l[0].Msg, "conflicting values") || !strings.Contains(l[0].Error(), "r.cue:6:") {
		t.Fatalf("want one conflict naming line 6, got %v", err)
	}
}
