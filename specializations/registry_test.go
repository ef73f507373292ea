package specializations

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
)

func TestRegistry(t *testing.T) {
	if _, err := Get("nope"); err == nil || !strings.Contains(err.Error(), "actor") {
		t.Errorf("Get(unknown) = %v; want an error listing the known names", err)
	}
	if err := Register(Contract{Name: "actor", Requires: func(RoleConfig) []string { return nil }, Produces: func(RoleConfig) []string { return nil }}); err == nil {
		t.Error("registering a taken name succeeded")
	}
	if err := Register(Contract{Name: "x"}); err == nil {
		t.Error("registering a contract without Requires/Produces succeeded")
	}
	// That the catalog runs every built-in is engine's TestCatalogUsesEverySpecialization.
	if names := Names(); len(names) == 0 || !slices.IsSorted(names) {
		t.Errorf("built-in specializations: %v, want them sorted", names)
	}
}

// citation matches a source cited in parentheses: an author and a year.
var citation = regexp.MustCompile(`\([^)]*\b(19|20)\d\d\b[^)]*\)`)

// TestContracts: every built-in's doc cites where its loss comes from and
// produces something (engine's TestDataKinds checks their keys against their
// data kind's).
func TestContracts(t *testing.T) {
	for _, name := range Names() {
		c, _ := Get(name)
		if !citation.MatchString(c.Doc) {
			t.Errorf("%s: doc %q cites no source", name, c.Doc)
		}
		trained := RoleConfig{Role: schema.Role{Name: "r", Trainable: true, Init: map[string]any{"with_ref": true}}}
		if len(c.Produces(trained)) == 0 {
			t.Errorf("%s produces nothing", name)
		}
	}
}

func TestActorRequirementsFollowKnobs(t *testing.T) {
	c, _ := Get("actor")
	role := schema.Role{Name: "actor", Trainable: true}
	base := c.Requires(RoleConfig{Role: role, Knobs: schema.Knobs{Estimator: "grpo"}})
	if slices.Contains(base, rollout.KeyRefLogProbs) || slices.Contains(base, rollout.KeyValues) {
		t.Errorf("plain GRPO actor requires %v", base)
	}
	kl := c.Requires(RoleConfig{Role: role, Knobs: schema.Knobs{Estimator: "grpo", UseKLLoss: true}})
	if !slices.Contains(kl, rollout.KeyRefLogProbs) {
		t.Errorf("KL actor requires %v, want ref_log_probs", kl)
	}
	gae := c.Requires(RoleConfig{Role: role, Knobs: schema.Knobs{Estimator: "grpo", EstimatorMap: map[string]string{"actor": "gae"}}})
	if !slices.Contains(gae, rollout.KeyValues) {
		t.Errorf("GAE actor (estimator_map) requires %v, want values", gae)
	}
}
