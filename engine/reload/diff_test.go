package reload

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func ptr[T any](x T) *T { return &x }

// base is a small resolved recipe; every test case edits a fresh copy.
func base() *schema.Recipe {
	return &schema.Recipe{
		Name:        "r",
		Description: "a recipe",
		Roles: []schema.Role{
			{Name: "policy", Specialization: "actor", Trainable: true, Pool: "policy",
				Model: schema.Model{Source: "tiny", DType: "float32"}, Init: map[string]any{"with_ref": true}},
			{Name: "reference", Specialization: "actor", Trainable: true, Pool: "policy",
				Model: schema.Model{Source: "tiny", DType: "float32"}},
		},
		Syncs: []schema.Sync{{Source: "reference", Target: "policy", Keys: []string{"log_probs"},
			TargetKeys: []string{"ref_log_probs"}, Stage: "inject"}},
		Task: schema.Task{Name: "arithmetic", TrainSize: 2000, Reward: []schema.Reward{{Fn: "exact", Weight: 1}}},
		Knobs: schema.Knobs{Seed: 1, NumRollout: 20, LR: 1e-3, LRSchedule: "constant", Temperature: 1,
			TopP: 1, RolloutBatchSize: 8, MaxNewTokens: 32, ClipRatioLow: 0.2, KLCoef: 0.001},
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name       string
		edit       func(r *schema.Recipe)
		hot        []KnobChange
		structural []string
	}{
		{name: "identical", edit: func(*schema.Recipe) {}},
		{name: "description only", edit: func(r *schema.Recipe) { r.Description = "edited" }},
		{name: "lr", edit: func(r *schema.Recipe) { r.Knobs.LR = 2e-3 },
			hot: []KnobChange{{"lr", 1e-3, 2e-3}}},
		{name: "num_rollout extends the run", edit: func(r *schema.Recipe) { r.Knobs.NumRollout = 40 },
			hot: []KnobChange{{"num_rollout", 20, 40}}},
		{name: "schedule string", edit: func(r *schema.Recipe) { r.Knobs.LRSchedule = "cosine" },
			hot: []KnobChange{{"lr_schedule", "constant", "cosine"}}},
		{name: "hot knobs in schema order", edit: func(r *schema.Recipe) {
			r.Knobs.KLCoef = 0.01
			r.Knobs.LR = 5e-4
			r.Knobs.Temperature = 0.7
		}, hot: []KnobChange{{"temperature", 1.0, 0.7}, {"lr", 1e-3, 5e-4}, {"kl_coef", 0.001, 0.01}}},
		{name: "seed is cold", edit: func(r *schema.Recipe) { r.Knobs.Seed = 2 },
			structural: []string{"knobs.seed: 1 → 2 (cold knob)"}},
		{name: "shape knob is cold", edit: func(r *schema.Recipe) { r.Knobs.MaxNewTokens = 64 },
			structural: []string{"knobs.max_new_tokens: 32 → 64 (cold knob)"}},
		{name: "optional hot knob set", edit: func(r *schema.Recipe) { r.Knobs.WarmupSteps = ptr(3) },
			hot: []KnobChange{{"warmup_steps", nil, 3}}},
		{name: "optional cold knob set", edit: func(r *schema.Recipe) { r.Knobs.LossScaleFactor = ptr(2.0) },
			structural: []string{"knobs.loss_scale_factor: unset → 2 (cold knob)"}},
		{name: "map knob", edit: func(r *schema.Recipe) { r.Knobs.EstimatorMap = map[string]string{"policy": "rloo"} },
			structural: []string{`knobs.estimator_map: {} → {"policy":"rloo"} (cold knob)`}},
		{name: "empty map equals nil map", edit: func(r *schema.Recipe) { r.Knobs.EstimatorMap = map[string]string{} }},
		{name: "trainable", edit: func(r *schema.Recipe) { r.Roles[1].Trainable = false },
			structural: []string{"roles[1].trainable: true → false"}},
		{name: "model source", edit: func(r *schema.Recipe) { r.Roles[0].Model.Source = "hf:gpt2" },
			structural: []string{`roles[0].model.source: "tiny" → "hf:gpt2"`}},
		{name: "init argument", edit: func(r *schema.Recipe) {
			r.Roles[0].Init["with_ref"] = false
			r.Roles[1].Init = map[string]any{"k": "v"}
		}, structural: []string{"roles[0].init.with_ref: true → false", `roles[1].init.k: added "v"`}},
		{name: "role removed", edit: func(r *schema.Recipe) { r.Roles = r.Roles[:1] },
			structural: []string{`roles[1]: removed {"name":"reference","specialization":"actor","trainable":true,"sync_to_rollout":false,"pool":"policy","model":{"source":"tiny","dtype":"float32"},"init":null}`}},
		{name: "sync key", edit: func(r *schema.Recipe) { r.Syncs[0].Keys[0] = "values" },
			structural: []string{`syncs[0].keys[0]: "log_probs" → "values"`}},
		{name: "task", edit: func(r *schema.Recipe) { r.Task.Name = "sorting"; r.Task.Reward[0].Weight = 2 },
			structural: []string{`task.name: "arithmetic" → "sorting"`, "task.reward[0].weight: 1 → 2"}},
		{name: "name", edit: func(r *schema.Recipe) { r.Name = "s" },
			structural: []string{`name: "r" → "s"`}},
		{name: "hot and structural together", edit: func(r *schema.Recipe) {
			r.Knobs.LR = 3e-3
			r.Knobs.RolloutBatchSize = 16
			r.Roles[0].Specialization = "sft"
		}, hot: []KnobChange{{"lr", 1e-3, 3e-3}},
			structural: []string{`roles[0].specialization: "actor" → "sft"`, "knobs.rollout_batch_size: 8 → 16 (cold knob)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, new := base(), base()
			tc.edit(new)
			ch, err := Diff(old, new)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ch.Hot, tc.hot) {
				t.Errorf("hot = %v, want %v", ch.Hot, tc.hot)
			}
			if !slices.Equal(ch.Structural, tc.structural) {
				t.Errorf("structural = %q, want %q", ch.Structural, tc.structural)
			}
			// The reverse edit is the same set of changes, mirrored.
			back, err := Diff(new, old)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Hot) != len(ch.Hot) || len(back.Structural) != len(ch.Structural) {
				t.Errorf("reverse diff has %d hot, %d structural; want %d, %d",
					len(back.Hot), len(back.Structural), len(ch.Hot), len(ch.Structural))
			}
		})
	}
}

func TestDiffNil(t *testing.T) {
	if _, err := Diff(nil, base()); err == nil {
		t.Error("Diff(nil, r) succeeded")
	}
}

// TestDiffEveryKnob changes each knob of schema.Knobs in turn: it must show
// up exactly once, as hot or cold as its schema doc says.
func TestDiffEveryKnob(t *testing.T) {
	docs, err := schema.KnobDocs()
	if err != nil {
		t.Fatal(err)
	}
	hot := map[string]bool{}
	for _, d := range docs {
		hot[d.Name] = d.Hot
	}
	typ := reflect.TypeFor[schema.Knobs]()
	nHot := 0
	for i := range typ.NumField() {
		name := fieldName(typ.Field(i))
		if name == "" {
			continue
		}
		if _, ok := hot[name]; !ok {
			t.Errorf("knob %s has no schema doc", name)
		}
		old, new := base(), base()
		perturb(t, reflect.ValueOf(&new.Knobs).Elem().Field(i))
		ch, err := Diff(old, new)
		if err != nil {
			t.Fatal(err)
		}
		if hot[name] {
			nHot++
			if len(ch.Hot) != 1 || ch.Hot[0].Knob != name || len(ch.Structural) != 0 {
				t.Errorf("%s (hot): got %+v", name, ch)
			}
			continue
		}
		if len(ch.Hot) != 0 || len(ch.Structural) != 1 || !strings.HasPrefix(ch.Structural[0], "knobs."+name+": ") ||
			!strings.HasSuffix(ch.Structural[0], "(cold knob)") {
			t.Errorf("%s (cold): got %+v", name, ch)
		}
	}
	// Most loop, sampler, optimizer and loss-coefficient knobs are hot; a
	// schema that lost its attributes would make every knob cold.
	if nHot < 20 {
		t.Errorf("only %d hot knobs", nHot)
	}
}

// perturb changes a knob field to a different value of its type.
func perturb(t *testing.T, f reflect.Value) {
	t.Helper()
	switch f.Kind() {
	case reflect.Int:
		f.SetInt(f.Int() + 1)
	case reflect.Float64:
		f.SetFloat(f.Float()*2 + 1)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Pointer:
		p := reflect.New(f.Type().Elem())
		perturb(t, p.Elem())
		f.Set(p)
	case reflect.Slice: // a list knob (dpo_loss_type's terms, dpo_loss_weights) gains an element
		e := reflect.New(f.Type().Elem()).Elem()
		perturb(t, e)
		f.Set(reflect.Append(f, e))
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		m.SetMapIndex(reflect.ValueOf("policy"), reflect.ValueOf("rloo"))
		f.Set(m)
	default:
		t.Fatalf("knob of kind %s: teach perturb about it", f.Kind())
	}
}

func TestApply(t *testing.T) {
	running, edited := base(), base()
	edited.Knobs.LR = 2e-3
	edited.Knobs.Temperature = 0.5
	edited.Knobs.WarmupSteps = ptr(3)
	edited.Knobs.Seed = 9                 // cold: refused
	edited.Roles[1].Trainable = false     // structural: refused
	edited.Description = "not a run knob" // ignored
	ch, err := Diff(running, edited)
	if err != nil {
		t.Fatal(err)
	}
	keep := Apply(base(), Changes{}) // a deep copy of the running recipe, to check it is not modified
	got := Apply(running, ch)

	if !reflect.DeepEqual(running, keep) {
		t.Fatal("Apply modified the running recipe")
	}
	want := base()
	want.Knobs.LR = 2e-3
	want.Knobs.Temperature = 0.5
	want.Knobs.WarmupSteps = ptr(3)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Apply = %+v\nwant %+v", got, want)
	}
	rest, err := Diff(got, edited)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Hot) != 0 || len(rest.Structural) != 2 {
		t.Errorf("after Apply the diff is %+v, want the 2 refused changes only", rest)
	}

	// The result shares nothing with the running recipe.
	got.Roles[0].Init["with_ref"] = false
	got.Syncs[0].Keys[0] = "changed"
	*got.Knobs.WarmupSteps = 5
	got.Task.Reward[0].Weight = 7
	if !reflect.DeepEqual(running, keep) {
		t.Error("the applied recipe aliases the running one")
	}
	// Nor with the change it took its value from.
	if ch.Hot[len(ch.Hot)-1].New != 3 {
		t.Error("the applied recipe aliases the change")
	}
}

func TestApplyUnset(t *testing.T) {
	running := base()
	running.Knobs.TISCap = ptr(2.0)
	got := Apply(running, Changes{Hot: []KnobChange{{Knob: "tis_cap", Old: 2.0, New: nil},
		{Knob: "no_such_knob", New: 1}, {Knob: "lr", New: "not a number"}, {Knob: "num_rollout", New: 30.0}}})
	if got.Knobs.TISCap != nil {
		t.Errorf("tis_cap = %v, want unset", *got.Knobs.TISCap)
	}
	if running.Knobs.TISCap == nil || *running.Knobs.TISCap != 2 {
		t.Error("Apply modified the running recipe")
	}
	if got.Knobs.LR != 1e-3 {
		t.Errorf("a change of the wrong type was applied: lr = %v", got.Knobs.LR)
	}
	if got.Knobs.NumRollout != 30 {
		t.Errorf("num_rollout = %d, want 30", got.Knobs.NumRollout)
	}
	if Apply(nil, Changes{}) != nil {
		t.Error("Apply(nil) != nil")
	}
}
