package engine

import (
	"strings"
	"testing"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// TestChooseStrategy: the contract's data kind and flags, and the
// estimator's needs, pick the rollout strategy.
func TestChooseStrategy(t *testing.T) {
	k := schema.Knobs{AggrevateCandidates: 3}
	cases := []struct {
		spec  string
		needs estimators.Needs
		want  strategy
		unit  int
	}{
		{"sft", estimators.Needs{}, offline{kind: tasks.KindSFT}, 1},
		{"dpo", estimators.Needs{}, offline{kind: tasks.KindPreference}, 2},
		{"reward_model", estimators.Needs{}, offline{kind: tasks.KindPreference}, 2},
		{"kto", estimators.Needs{}, offline{kind: tasks.KindKTO}, 1},
		{"actor", estimators.Needs{}, onPolicy{sampling: studentSamples{}}, 1},
		{"actor", estimators.NeedsOf(estimators.ReMax), onPolicy{sampling: studentSamples{}, greedyBaseline: true}, 1},
		{"opd", estimators.Needs{}, onPolicy{sampling: studentSamples{}}, 1},
		{"gkd", estimators.Needs{}, onPolicy{sampling: teacherBatches{}}, 1},
		{"mixed_loss_dagger_opd", estimators.Needs{}, onPolicy{sampling: teacherRows{}}, 1},
		{"aggrevate", estimators.Needs{}, candidateActions{k: 3}, 3},
		{"flow", estimators.Needs{}, flowPoints{}, 1},
		{"flow_actor", estimators.Needs{}, flowTrajectories{}, 1},
	}
	for _, c := range cases {
		con, err := specializations.Get(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		got := chooseStrategy(con, k, c.needs)
		// The rows that train together: the data kind's unit (pairs) or the strategy's.
		unit := max(kindOf(con.Data).unit, got.unit())
		if got != c.want || unit != c.unit {
			t.Errorf("%s %+v: strategy %#v (unit %d), want %#v (unit %d)", c.spec, c.needs, got, unit, c.want, c.unit)
		}
	}
	// Every registered specialization has a strategy.
	for _, name := range specializations.Names() {
		con, _ := specializations.Get(name)
		if s, ok := chooseStrategy(con, k, estimators.Needs{}).(unsupported); ok {
			t.Errorf("specialization %s: no rollout strategy for data kind %q", name, s.kind)
		}
	}
	_, err := chooseStrategy(specializations.Contract{Data: "audio"}, k, estimators.Needs{}).generate(nil, 0, 0)
	if err == nil || !strings.Contains(err.Error(), `data kind "audio" is not supported`) {
		t.Errorf("unknown data kind: %v", err)
	}
}
