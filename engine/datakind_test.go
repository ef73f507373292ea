package engine

import (
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/estimators"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// TestDataKinds: every specialization's data kind has a descriptor that provides keys,
// the inputs of the specialization's forward pass when frozen, a row count and a strategy;
// an unregistered kind's rollouts fail with its name.
func TestDataKinds(t *testing.T) {
	k := schema.Knobs{RolloutBatchSize: 4, NSamplesPerPrompt: 2, FlowSteps: 3}
	for _, name := range specializations.Names() {
		c, _ := specializations.Get(name)
		d, ok := dataKinds[c.Data]
		if !ok {
			t.Errorf("%s: data kind %q has no descriptor (known: %s)", name, c.Data, strings.Join(dataKindNames(), ", "))
			continue
		}
		if len(d.keys) == 0 || d.rows == nil || d.drawn == nil || d.strategy == nil || d.unit < 1 {
			t.Errorf("%s: data kind %q: incomplete descriptor %+v", name, c.Data, d)
		}
		frozen := specializations.RoleConfig{Role: schema.Role{Name: "r"}}
		for _, key := range c.Requires(frozen) {
			if !slices.Contains(d.keys, key) {
				t.Errorf("%s: a frozen role requires %q, which its data kind %q does not provide", name, key, c.Data)
			}
		}
		if d.strategy(c, k, estimators.Needs{}).unit() > 1 && d.unit == 1 && !c.CandidateActions {
			t.Errorf("%s: its strategy groups rows but data kind %q says one row per example", name, c.Data)
		}
	}
	u := kindOf("telepathy")
	if _, err := u.strategy(specializations.Contract{}, k, estimators.Needs{}).generate(nil, 0, 0); err == nil ||
		!strings.Contains(err.Error(), `"telepathy"`) {
		t.Errorf("unregistered kind: generate error %v, want one naming it", err)
	}
	// The row counts the schedule is planned from (loop.expectedRows without a workflow).
	for kind, want := range map[specializations.DataKind]int{specializations.DataRL: 8, specializations.DataSFT: 4,
		specializations.DataPreference: 8, specializations.DataKTO: 0, specializations.DataFlowRL: 24} {
		if got := kindOf(kind).rows(k); got != want {
			t.Errorf("%s: %d rows a rollout, want %d", kind, got, want)
		}
	}
}
