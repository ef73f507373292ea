package engine

import (
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func TestRolloutEngineProblems(t *testing.T) {
	actor := []schema.Role{testRole("actor", "actor", true)}
	dev := 1
	placed := testRole("actor", "actor", true)
	placed.RolloutDevice = &dev
	sglang := func(servers ...string) *schema.Rollout { return &schema.Rollout{Engine: "sglang", Servers: servers} }
	knobs := schema.Knobs{Estimator: "grpo", NSamplesPerPrompt: 4}
	stale := knobs
	stale.MaxStaleness = 2
	for _, tc := range []struct {
		name  string
		r     schema.Recipe
		probs []string // path: message substring
	}{
		{"two servers", schema.Recipe{Roles: actor, Knobs: knobs, Rollout: sglang("http://a:1", "http://b:2")}, nil},
		{"async", schema.Recipe{Roles: actor, Knobs: stale, Rollout: sglang("http://a:1")}, nil},
		{"async with a reward role", schema.Recipe{Roles: actor, Knobs: stale, Rollout: sglang("http://a:1"), Task: schema.Task{RewardRole: "rm"}},
			[]string{"knobs.max_staleness: max_staleness 2 generates the next rollout while this one trains, and task.reward_role \"rm\""}},
		{"staleness without engine", schema.Recipe{Roles: actor, Knobs: stale},
			[]string{"knobs.max_staleness: max_staleness 2 needs a rollout engine"}},
		{"server twice", schema.Recipe{Roles: actor, Knobs: knobs, Rollout: sglang("http://a:1", "http://a:1")},
			[]string{"rollout.servers[1]: server \"http://a:1\" is listed twice"}},
		{"not a URL", schema.Recipe{Roles: actor, Knobs: knobs, Rollout: sglang("a:1")},
			[]string{"rollout.servers[0]: server \"a:1\": want an http:// or https:// URL"}},
		{"rollout_device", schema.Recipe{Roles: []schema.Role{placed}, Knobs: knobs, Rollout: sglang("http://a:1")},
			[]string{"roles[0].rollout_device: role \"actor\" samples on the rollout engine's servers"}},
		{"offline data", schema.Recipe{Roles: []schema.Role{testRole("policy", "sft", true)}, Rollout: sglang("http://a:1")},
			[]string{"rollout: role \"policy\" trains on sft data from the dataset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := BuildGraph(&tc.r)
			probs := rolloutEngineProblems(&tc.r, g)
			if len(probs) != len(tc.probs) {
				t.Fatalf("got %v, want %v", probs, tc.probs)
			}
			for i, want := range tc.probs {
				if got := probs[i].Path + ": " + probs[i].Msg; !strings.HasPrefix(got, want) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got, want)
				}
			}
		})
	}
}
