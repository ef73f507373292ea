package engine

import (
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func role(name, spec string, trainable bool) schema.Role {
	return schema.Role{Name: name, Specialization: spec, Trainable: trainable, Pool: name}
}

func sync(src, dst string, keys, tkeys []string) schema.Sync {
	return schema.Sync{Source: src, Target: dst, Keys: keys, TargetKeys: tkeys, Stage: "inject"}
}

func TestBuildGraph(t *testing.T) {
	lp := []string{"log_probs"}
	tests := []struct {
		name  string
		r     schema.Recipe
		probs []string // substrings, in order
	}{
		{
			name: "dpo with synced reference",
			r: schema.Recipe{
				Roles: []schema.Role{role("policy", "dpo", true), role("reference", "dpo", false)},
				Syncs: []schema.Sync{sync("reference", "policy", lp, []string{"ref_log_probs"})},
			},
		},
		{
			name:  "dpo without reference",
			r:     schema.Recipe{Roles: []schema.Role{role("policy", "dpo", true)}},
			probs: []string{`requires key "ref_log_probs"`},
		},
		{
			name: "cycle of three",
			r: schema.Recipe{
				Roles: []schema.Role{role("a", "dagger", false), role("b", "dagger", false), role("c", "dagger", true)},
				Syncs: []schema.Sync{
					sync("a", "b", []string{"actions"}, []string{"teacher_actions"}),
					sync("b", "c", []string{"actions"}, []string{"teacher_actions"}),
					sync("c", "a", []string{"actions"}, []string{"teacher_actions"}),
				},
			},
			probs: []string{"cycle: a → b (syncs[0]), b → c (syncs[1]), c → a (syncs[2])"},
		},
		{
			name: "unknown specialization",
			r: schema.Recipe{
				Roles: []schema.Role{role("p", "nope", true)},
			},
			probs: []string{`unknown specialization "nope"`},
		},
		{
			name: "gae without critic",
			r: schema.Recipe{
				Roles: []schema.Role{role("actor", "actor", true)},
				Knobs: schema.Knobs{Estimator: "gae", NSamplesPerPrompt: 1},
			},
			probs: []string{`requires key "values"`},
		},
		{
			name: "grpo group size",
			r: schema.Recipe{
				Roles: []schema.Role{role("actor", "actor", true)},
				Knobs: schema.Knobs{Estimator: "rloo", NSamplesPerPrompt: 1},
			},
			probs: []string{"needs groups"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := BuildGraph(&tc.r)
			if len(probs) != len(tc.probs) {
				t.Fatalf("got %d problems %v, want %d", len(probs), probs, len(tc.probs))
			}
			for i, want := range tc.probs {
				if !strings.Contains(probs[i].Msg, want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, probs[i].Msg, want)
				}
			}
		})
	}
}

func TestSyncOrderRunsInputsFirst(t *testing.T) {
	acts := []string{"actions"}
	ta := []string{"teacher_actions"}
	r := &schema.Recipe{
		Roles: []schema.Role{role("s", "dagger", true), role("m", "dagger", false), role("t", "dagger", false)},
		Syncs: []schema.Sync{sync("m", "s", acts, ta), sync("t", "m", acts, ta)},
		Knobs: schema.Knobs{Estimator: "grpo", NSamplesPerPrompt: 2},
	}
	g, probs := BuildGraph(r)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	if g.Syncs[0].Source != "t" || g.Syncs[1].Source != "m" {
		t.Fatalf("order = %+v", g.Syncs)
	}
}
