package estimators

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
)

func step(prompt, response int) Step {
	return Step{Tokens: make([]int32, prompt+response), PromptLen: prompt}
}

func trajs(rewards ...float64) []Trajectory {
	var out []Trajectory
	for _, r := range rewards {
		out = append(out, Trajectory{Reward: r, Steps: []Step{step(2, 3)}})
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*(1+math.Abs(b)) }

func TestCollectPerRoleEstimatorsAndMetrics(t *testing.T) {
	groups := []Group{
		{TaskID: "q1", Role: "solver", Trajectories: trajs(1, 0, 0, 1)},
		{TaskID: "q1", Role: "judge", Trajectories: trajs(1, 0, 0.5)},
		{TaskID: "q2", Role: "solver", Trajectories: trajs(1, 1)},
	}
	grpo := DefaultConfig()
	rloo := DefaultConfig()
	rloo.Name = RLOO
	res, err := Collect(groups, CollectConfig{Default: grpo, PerRole: map[string]Config{"judge": rloo}})
	if err != nil {
		t.Fatal(err)
	}
	// solver: GRPO ddof 0 → ±1/(1+2e-6); the all-equal group → 0.
	a := 0.5 / (0.5 + DefaultEpsilon)
	wantSolver := [][]float64{{a, -a, -a, a}, {0, 0}}
	for j, g := range []int{0, 2} {
		for i, w := range wantSolver[j] {
			got := res.Advantages[g][i][0]
			if want := []float32{0, 0, float32(w), float32(w), float32(w)}; !slices.Equal(got, want) {
				t.Errorf("solver group %d traj %d: %v, want %v", g, i, got, want)
			}
		}
	}
	// judge: RLOO: 3/2·(r − 0.5) = {0.75, −0.75, 0}.
	for i, w := range []float64{0.75, -0.75, 0} {
		if got := res.Advantages[1][i][0][4]; !near(float64(got), w) {
			t.Errorf("judge traj %d: %g, want %g", i, got, w)
		}
	}
	want := map[string]float64{
		"reward/solver/mean":             4.0 / 6,
		"reward/solver/std":              math.Sqrt(2.0 / 9), // population std of {1,0,0,1,1,1}
		"reward/solver/max":              1,
		"reward/solver/min":              0,
		"advantage/solver/mean":          0,
		"advantage/solver/max":           a,
		"advantage/solver/min":           -a,
		"advantage/solver/fraction_zero": 2.0 / 6,
		"advantage/solver/std":           a * math.Sqrt(4.0/6),
		"reward/judge/mean":              0.5,
		"advantage/judge/fraction_zero":  1.0 / 3,
		"advantage/judge/max":            0.75,
		"advantage/judge/min":            -0.75,
		"advantage/judge/std":            math.Sqrt(2 * 0.75 * 0.75 / 3),
		"reward/judge/std":               math.Sqrt(0.5 / 3),
		"advantage/judge/mean":           0,
		"reward/judge/max":               1,
		"reward/judge/min":               0,
	}
	for k, w := range want {
		got, ok := res.Metrics[k]
		if !ok || !near(got, w) {
			t.Errorf("metric %s = %v (present %v), want %v", k, got, ok, w)
		}
	}
	if len(res.Metrics) != len(want) {
		t.Errorf("got %d metrics, want %d: %v", len(res.Metrics), len(want), res.Metrics)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("unexpected warnings %q", res.Warnings)
	}
}

func TestCollectBroadcastsOverStepsAndSkipsObservations(t *testing.T) {
	// Two steps; the second step's prompt repeats the first exchange plus an observation.
	s1 := Step{Tokens: []int32{1, 2, 3, 4}, PromptLen: 2}
	s2 := Step{Tokens: []int32{1, 2, 3, 4, 9, 9, 5, 6}, PromptLen: 4, Mask: []float32{0, 0, 0, 0, 0, 0, 1, 1}}
	groups := []Group{{TaskID: "t", Role: "agent", Trajectories: []Trajectory{
		{Reward: 2, Steps: []Step{s1, s2}},
		{Reward: -1, Steps: []Step{s1}},
	}}}
	cfg := DefaultConfig()
	cfg.Name = Reinforce
	res, err := Collect(groups, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Advantages[0][0]
	if !slices.Equal(got[0], []float32{0, 0, 2, 2}) || !slices.Equal(got[1], []float32{0, 0, 0, 0, 0, 0, 2, 2}) {
		t.Errorf("trajectory 0: %v", got)
	}
	if !slices.Equal(res.Advantages[0][1][0], []float32{0, 0, -1, -1}) {
		t.Errorf("trajectory 1: %v", res.Advantages[0][1])
	}
	// Outcome estimators report one advantage per trajectory.
	if res.Metrics["advantage/agent/mean"] != 0.5 {
		t.Errorf("advantage mean %v, want 0.5", res.Metrics["advantage/agent/mean"])
	}
}

func TestCollectPrecomputedModes(t *testing.T) {
	withAdv := func(a *Advantage) []Trajectory {
		st := step(1, 2)
		st.Advantage = a
		return []Trajectory{{Reward: 1, Steps: []Step{st}}, {Reward: 0, Steps: []Step{step(1, 2)}}}
	}
	groups := []Group{
		{TaskID: "a", Role: "student", Trajectories: withAdv(PerTokenAdvantage([]float64{0.25, -0.5}))},
		{TaskID: "b", Role: "student", Trajectories: trajs(1, 0)},
	}
	// UsePrecomputed: group a keeps its supplied advantages (the step without one gets zeros,
	// with a warning); group b has none and goes through GRPO.
	cfg := DefaultConfig()
	cfg.UsePrecomputed = true
	res, err := Collect(groups, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Advantages[0][0][0]; !slices.Equal(got, []float32{0, 0.25, -0.5}) {
		t.Errorf("supplied: %v", got)
	}
	if got := res.Advantages[0][1][0]; !slices.Equal(got, []float32{0, 0, 0}) {
		t.Errorf("missing: %v", got)
	}
	if got := res.Advantages[1][0][0][4]; !near(float64(got), 0.5/(0.5+DefaultEpsilon)) {
		t.Errorf("estimated group: %v", res.Advantages[1][0][0])
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "1 of 2 steps had none") {
		t.Errorf("warnings %q", res.Warnings)
	}
	// Without UsePrecomputed the supplied advantages are overwritten, with a warning.
	cfg.UsePrecomputed = false
	res, err = Collect(groups, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Advantages[0][0][0][1]; !near(float64(got), 0.5/(0.5+DefaultEpsilon)) {
		t.Errorf("overwritten: %v", res.Advantages[0][0][0])
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "overwriting them with \"grpo\"") {
		t.Errorf("warnings %q", res.Warnings)
	}
}

func TestCollectGAEChainsStepsAndPlacesReward(t *testing.T) {
	s1 := Step{Tokens: []int32{1, 2, 3}, PromptLen: 1, Values: []float32{0, 0.5, 0.25}}
	s2 := Step{Tokens: []int32{1, 2, 3, 7, 4}, PromptLen: 3, Mask: []float32{0, 0, 0, 0, 1}, Values: []float32{0, 0, 0, 9, 0.75}}
	groups := []Group{{TaskID: "t", Role: "actor", Trajectories: []Trajectory{{Reward: 1, Steps: []Step{s1, s2}}}}}
	cfg := DefaultConfig()
	cfg.Name, cfg.Whiten = GAE, false
	res, err := Collect(groups, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	// γ = λ = 1, reward 1 on the last valid token: A_t = 1 − V_t on valid tokens.
	want := [][]float32{{0, 0.5, 0.75}, {0, 0, 0, 0, 0.25}}
	for s := range want {
		if !slices.Equal(res.Advantages[0][0][s], want[s]) {
			t.Errorf("step %d: %v, want %v", s, res.Advantages[0][0][s], want[s])
		}
		for i, m := range groups[0].Trajectories[0].Steps[s].mask() {
			if r := res.Returns[0][0][s][i]; (m != 0 && r != 1) || (m == 0 && r != 0) {
				t.Errorf("step %d token %d: return %v", s, i, r)
			}
		}
	}
	// Without values GAE is an error that names the missing input.
	groups[0].Trajectories[0].Steps[1].Values = nil
	if _, err := Collect(groups, CollectConfig{Default: cfg}); err == nil || !strings.Contains(err.Error(), "missing critic values") {
		t.Errorf("missing values: err = %v", err)
	}
}

func TestCollectErrors(t *testing.T) {
	g := []Group{{TaskID: "t", Role: "policy", Trajectories: trajs(1, 0)}}
	cfg := DefaultConfig()
	cfg.Name = "gpro"
	_, err := Collect(g, CollectConfig{Default: cfg})
	if err == nil || !strings.Contains(err.Error(), `unknown advantage estimator "gpro"`) || !strings.Contains(err.Error(), "grpo, ") {
		t.Errorf("unknown estimator: err = %v", err)
	}
	cfg.Name = ReMax
	if _, err := Collect(g, CollectConfig{Default: cfg}); err == nil || !strings.Contains(err.Error(), "missing greedy baseline") {
		t.Errorf("remax without greedy reward: err = %v", err)
	}
	cfg = DefaultConfig()
	bad := []Group{{TaskID: "t", Role: "p", Trajectories: []Trajectory{{Reward: 1, Steps: []Step{{Tokens: []int32{1, 2}, PromptLen: 3}}}}}}
	if _, err := Collect(bad, CollectConfig{Default: cfg}); err == nil || !strings.Contains(err.Error(), "prompt length 3") {
		t.Errorf("bad prompt length: err = %v", err)
	}
	nan := []Group{{TaskID: "t", Role: "p", Trajectories: []Trajectory{{Reward: math.NaN()}}}}
	if _, err := Collect(nan, CollectConfig{Default: cfg}); err == nil || !strings.Contains(err.Error(), "not finite") {
		t.Errorf("NaN reward: err = %v", err)
	}
	cfg.StdDDOF = -1
	if _, err := Collect(g, CollectConfig{Default: cfg}); err == nil || !strings.Contains(err.Error(), "std_ddof") {
		t.Errorf("bad config: err = %v", err)
	}
}

func TestRegistryCustomEstimator(t *testing.T) {
	// A custom estimator: advantage = reward minus the group maximum.
	name := "test_minus_max"
	err := Register(NewOutcome(name, func(r, _ [][]float64, _ Config) ([][]float64, error) {
		out := make([][]float64, len(r))
		for g := range r {
			for _, v := range r[g] {
				out[g] = append(out[g], v-slices.Max(r[g]))
			}
		}
		return out, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := Register(NewOutcome(name, nil)); err == nil {
		t.Error("duplicate registration: no error")
	}
	if err := Register(NewOutcome(" ", nil)); err == nil {
		t.Error("empty name: no error")
	}
	if !slices.Contains(Names(), name) {
		t.Errorf("Names() = %v lacks %q", Names(), name)
	}
	cfg := DefaultConfig()
	cfg.Name = name
	res, err := Collect([]Group{{TaskID: "t", Role: "p", Trajectories: trajs(1, 0.25)}}, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Advantages[0][1][0][2]; got != -0.75 {
		t.Errorf("custom estimator advantage %v, want -0.75", got)
	}
	// An estimator that returns the wrong shape is caught.
	broken := "test_broken_shape"
	MustRegister(NewOutcome(broken, func(r, _ [][]float64, _ Config) ([][]float64, error) {
		return [][]float64{{1}}, nil
	}))
	cfg.Name = broken
	if _, err := Collect([]Group{{TaskID: "t", Role: "p", Trajectories: trajs(1, 0)}}, CollectConfig{Default: cfg}); err == nil {
		t.Error("wrong-shaped output: no error")
	}
	// Errors of a custom estimator are wrapped with its name.
	failing := "test_failing"
	sentinel := errors.New("boom")
	MustRegister(NewOutcome(failing, func(_, _ [][]float64, _ Config) ([][]float64, error) { return nil, sentinel }))
	cfg.Name = failing
	if _, err := Collect([]Group{{TaskID: "t", Role: "p", Trajectories: trajs(1)}}, CollectConfig{Default: cfg}); !errors.Is(err, sentinel) || !strings.Contains(err.Error(), failing) {
		t.Errorf("failing estimator: err = %v", err)
	}
}

func TestToRollout(t *testing.T) {
	s1 := Step{Tokens: []int32{1, 2, 3}, PromptLen: 1}
	s2 := Step{Tokens: []int32{1, 2, 3, 4}, PromptLen: 3}
	greedy := 0.5
	groups := []Group{
		{TaskID: "q1", Role: "policy", DataSource: "gsm8k", GreedyReward: &greedy, Trajectories: []Trajectory{
			{Reward: 1, IsCorrect: true, Steps: []Step{s1, s2}},
			{Reward: 0, Steps: []Step{s1}},
		}},
		{TaskID: "q2", Role: "policy", DataSource: "math", GreedyReward: &greedy, Trajectories: []Trajectory{{Reward: 0.25, Steps: []Step{s2}}}},
	}
	cfg := DefaultConfig()
	cfg.Name = ReMax
	res, err := Collect(groups, CollectConfig{Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ToRollout(groups, res)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 4 {
		t.Fatalf("rows %d, want 4", r.Len())
	}
	if !slices.Equal(r.Traj, []int{0, 0, 1, 2}) || !slices.Equal(r.Reward, []float64{1, 1, 0, 0.25}) ||
		!slices.Equal(r.GroupID, []string{"q1/policy", "q1/policy", "q1/policy", "q2/policy"}) ||
		!slices.Equal(r.Row[rollout.KeyIsCorrect], []float64{1, 1, 0, 0}) ||
		!slices.Equal(r.DataSource, []string{"gsm8k", "gsm8k", "gsm8k", "math"}) {
		t.Errorf("columns: traj %v reward %v group %v correct %v source %v", r.Traj, r.Reward, r.GroupID, r.Row[rollout.KeyIsCorrect], r.DataSource)
	}
	wantAdv := [][]float32{{0, 0.5, 0.5}, {0, 0, 0, 0.5}, {0, -0.5, -0.5}, {0, 0, 0, -0.25}}
	for i, w := range wantAdv {
		if !slices.Equal(r.Tok[rollout.KeyAdvantages][i], w) {
			t.Errorf("row %d advantages %v, want %v", i, r.Tok[rollout.KeyAdvantages][i], w)
		}
	}
	if _, ok := r.Tok[rollout.KeyReturns]; ok {
		t.Error("returns column without a GAE role")
	}
	if _, ok := r.Tok[rollout.KeyValues]; ok {
		t.Error("values column without values")
	}
	// The rollout does not alias the groups.
	r.Tokens[0][0] = 99
	if groups[0].Trajectories[0].Steps[0].Tokens[0] == 99 {
		t.Error("rollout tokens alias the step tokens")
	}
	if _, err := ToRollout(groups[:1], res); err == nil {
		t.Error("result of other groups: no error")
	}
}
