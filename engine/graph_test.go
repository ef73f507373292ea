package engine

import (
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func testRole(name, spec string, trainable bool) schema.Role {
	return schema.Role{Name: name, Specialization: spec, Trainable: trainable, Pool: name}
}

func testSync(src, dst string, keys, tkeys []string) schema.Sync {
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
				Roles: []schema.Role{testRole("policy", "dpo", true), testRole("reference", "dpo", false)},
				Syncs: []schema.Sync{testSync("reference", "policy", lp, []string{"ref_log_probs"})},
			},
		},
		{
			name:  "dpo without reference",
			r:     schema.Recipe{Roles: []schema.Role{testRole("policy", "dpo", true)}},
			probs: []string{`requires key "ref_log_probs"`},
		},
		{
			name: "cycle of three",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("a", "dagger", false), testRole("b", "dagger", false), testRole("c", "dagger", true)},
				Syncs: []schema.Sync{
					testSync("a", "b", []string{"actions"}, []string{"teacher_actions"}),
					testSync("b", "c", []string{"actions"}, []string{"teacher_actions"}),
					testSync("c", "a", []string{"actions"}, []string{"teacher_actions"}),
				},
			},
			probs: []string{"cycle: a → b (syncs[0]), b → c (syncs[1]), c → a (syncs[2])"},
		},
		{
			name: "unknown specialization",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("p", "nope", true)},
			},
			probs: []string{`unknown specialization "nope"`},
		},
		{
			name: "gae without critic",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("actor", "actor", true)},
				Knobs: schema.Knobs{Estimator: "gae", NSamplesPerPrompt: 1},
			},
			probs: []string{`requires key "values"`},
		},
		{
			name: "grpo group size",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("actor", "actor", true)},
				Knobs: schema.Knobs{Estimator: "rloo", NSamplesPerPrompt: 1},
			},
			probs: []string{"needs groups"},
		},
		{
			name: "tis_cap on an actor",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("actor", "actor", true)},
				Knobs: schema.Knobs{Estimator: "grpo", NSamplesPerPrompt: 4, TISCap: new(2.0)},
			},
		},
		{
			name: "tis_cap with nothing to correct",
			r: schema.Recipe{
				Roles: []schema.Role{testRole("policy", "sft", true)},
				Knobs: schema.Knobs{TISCap: new(2.0)},
			},
			probs: []string{"no trainable role has one"},
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
		Roles: []schema.Role{testRole("s", "dagger", true), testRole("m", "dagger", false), testRole("t", "dagger", false)},
		Syncs: []schema.Sync{testSync("m", "s", acts, ta), testSync("t", "m", acts, ta)},
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
