package estimators

import "testing"

func TestNeedsOf(t *testing.T) {
	cases := []struct {
		name string
		want Needs
	}{
		{GRPO, Needs{Groups: true}},
		{DrGRPO, Needs{Groups: true}},
		{RLOO, Needs{Groups: true}},
		{ReinforcePPBaseline, Needs{Groups: true}},
		{Reinforce, Needs{}},
		{ReMax, Needs{GreedyBaseline: true}},
		{GAE, Needs{Values: true}},
		{Precomputed, Needs{}},
		{"no_such_estimator", Needs{}},
	}
	for _, c := range cases {
		if got := NeedsOf(c.name); got != c.want {
			t.Errorf("NeedsOf(%q) = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestWithNeedsKeepsTheEstimator(t *testing.T) {
	e := WithNeeds(NewOutcome("needs_probe", func(r, _ [][]float64, _ Config) ([][]float64, error) {
		return ReinforceAdvantages(r), nil
	}), Needs{Groups: true})
	if e.Name() != "needs_probe" || e.Level() != Outcome {
		t.Fatalf("WithNeeds changed the estimator: name %q, level %v", e.Name(), e.Level())
	}
	out, err := e.Estimate(Input{OutcomeInput: OutcomeInput{Rewards: [][]float64{{1, 0}}}}, defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if out.Advantages[0][0] != 1 || out.Advantages[0][1] != 0 {
		t.Fatalf("advantages %v, want REINFORCE's [[1 0]]", out.Advantages)
	}
	if n, ok := e.(Needer); !ok || !n.Needs().Groups {
		t.Fatalf("WithNeeds estimator does not report its needs")
	}
}
