package estimators

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
)

// opoReference is OPO in plain float64: b = Σ l r / Σ l per group, A = r − b, with the group
// rules (singleton A = r, all equal 0).
func opoReference(groups [][]float64, lengths [][]int) [][]float64 {
	out := make([][]float64, len(groups))
	for g, r := range groups {
		out[g] = make([]float64, len(r))
		if len(r) == 1 {
			out[g][0] = r[0]
			continue
		}
		var num, den float64
		for i, x := range r {
			num += float64(lengths[g][i]) * x
			den += float64(lengths[g][i])
		}
		for i, x := range r {
			out[g][i] = x - num/den
		}
	}
	return out
}

func TestOPOHandComputed(t *testing.T) {
	// Group 0: rewards 1,0,0,0 with lengths 1,1,1,5: b = 1/8, A = 0.875, −0.125 ×3 (GRPO's mean
	// would be 1/4). Group 1: 1,0,1 with lengths 2,6,2: b = 4/10. Group 2: a singleton keeps its
	// reward. Group 3: all equal gives exact zeros. Group 4: all lengths 0 falls back to the mean.
	groups := [][]float64{{1, 0, 0, 0}, {1, 0, 1}, {0.5}, {0.1, 0.1, 0.1}, {1, 0}}
	lengths := [][]int{{1, 1, 1, 5}, {2, 6, 2}, {7}, {3, 4, 5}, {0, 0}}
	want := [][]float64{{0.875, -0.125, -0.125, -0.125}, {0.6, -0.4, 0.6}, {0.5}, {0, 0, 0}, {0.5, -0.5}}
	cfg := defaultConfig()
	cfg.Name = OPO
	out, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: groups, Lengths: lengths}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for g := range want {
		for i := range want[g] {
			if got := out.Advantages[g][i]; math.Abs(got-want[g][i]) > 1e-15 {
				t.Errorf("group %d trajectory %d: A = %v, want %v", g, i, got, want[g][i])
			}
		}
	}
	for i, a := range out.Advantages[0] {
		if a != want[0][i] {
			t.Errorf("dyadic group: A[%d] = %v, want exactly %v", i, a, want[0][i])
		}
	}
	for _, a := range out.Advantages[3] {
		if a != 0 {
			t.Errorf("all-equal group: A = %v, want exactly 0", a)
		}
	}
}

func TestOPOMatchesFloat64Reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 30))
	cfg := defaultConfig()
	cfg.Name = OPO
	for trial := range 200 {
		groups := make([][]float64, 1+rng.IntN(4))
		lengths := make([][]int, len(groups))
		for g := range groups {
			n := 2 + rng.IntN(7)
			for range n {
				groups[g] = append(groups[g], math.Round(rng.NormFloat64()*100)/100)
				lengths[g] = append(lengths[g], 1+rng.IntN(4096))
			}
		}
		out, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: groups, Lengths: lengths}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := opoReference(groups, lengths)
		for g := range want {
			for i := range want[g] {
				if d := math.Abs(out.Advantages[g][i] - want[g][i]); d > 1e-12*(1+math.Abs(want[g][i])) {
					t.Fatalf("trial %d group %d trajectory %d: A = %v, reference %v", trial, g, i, out.Advantages[g][i], want[g][i])
				}
			}
		}
		// With unit lengths OPO is Dr.GRPO, bit for bit.
		unit := make([][]int, len(groups))
		for g := range groups {
			unit[g] = make([]int, len(groups[g]))
			for i := range unit[g] {
				unit[g][i] = 1
			}
		}
		opo, err := OPOAdvantages(groups, unit)
		if err != nil {
			t.Fatal(err)
		}
		dr := GRPOAdvantages(groups, false, DefaultEpsilon, 0)
		for g := range dr {
			for i := range dr[g] {
				if opo[g][i] != dr[g][i] {
					t.Fatalf("trial %d: unit-length OPO %v != Dr.GRPO %v", trial, opo[g][i], dr[g][i])
				}
			}
		}
	}
}

func TestOPOExtremesAndErrors(t *testing.T) {
	out, err := OPOAdvantages([][]float64{{math.MaxFloat64, -math.MaxFloat64}}, [][]int{{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range out[0] {
		if math.IsNaN(a) || math.IsInf(a, 0) {
			t.Errorf("extreme rewards: advantage %v is not finite", a)
		}
	}
	cfg := defaultConfig()
	cfg.Name = OPO
	if _, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: [][]float64{{1, 0}}}}, cfg); err == nil || !strings.Contains(err.Error(), "lengths") {
		t.Errorf("no lengths: err = %v", err)
	}
	if _, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: [][]float64{{1, 0}}, Lengths: [][]int{{1}}}}, cfg); err == nil {
		t.Error("misshaped lengths: no error")
	}
	if _, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: [][]float64{{1, 0}}, Lengths: [][]int{{1, -2}}}}, cfg); err == nil {
		t.Error("negative length: no error")
	}
	if n := NeedsOf(OPO); !n.Groups || n.GreedyBaseline || n.Values {
		t.Errorf("NeedsOf(opo) = %+v, want Groups only", n)
	}
}

// TestOPOThroughRollout checks the generic plumbing: RolloutAdvantages counts each trajectory's
// trainable tokens over all its rows (multi-turn) and OPO weights by them.
func TestOPOThroughRollout(t *testing.T) {
	r := &rollout.Rollout{}
	add := func(traj int, group string, reward float64, mask []float32) {
		toks := make([]int32, len(mask))
		r.Tokens = append(r.Tokens, toks)
		r.Mask = append(r.Mask, mask)
		r.Reward = append(r.Reward, reward)
		r.GroupID = append(r.GroupID, group)
		r.Traj = append(r.Traj, traj)
	}
	// Trajectory 0: two steps with 1 + 2 trainable tokens (length 3), reward 1.
	add(0, "a", 1, []float32{0, 1, 0})
	add(0, "a", 1, []float32{0, 1, 1})
	// Trajectory 1: one step with 1 trainable token, reward 0 → b = 3/4.
	add(1, "a", 0, []float32{0, 0, 1})
	cfg := defaultConfig()
	cfg.Name = OPO
	if _, err := RolloutAdvantages(r, cfg); err != nil {
		t.Fatal(err)
	}
	adv := r.Tok[rollout.KeyAdvantages]
	if adv[0][1] != 0.25 || adv[1][2] != 0.25 || adv[2][2] != -0.75 || adv[0][0] != 0 {
		t.Errorf("advantages %v, want 0.25 on trajectory 0's and -0.75 on trajectory 1's trainable tokens", adv)
	}
}

// TestRolloutFillsOutcomeInput checks that an outcome estimator sees every trajectory fact.
func TestRolloutFillsOutcomeInput(t *testing.T) {
	var seen OutcomeInput
	name := "test_outcome_input_probe"
	MustRegister(NewOutcomeEstimator(name, func(in OutcomeInput, _ Config) ([][]float64, error) {
		seen = in
		return ReinforceAdvantages(in.Rewards), nil
	}))
	r := &rollout.Rollout{
		Tokens:     [][]int32{{1, 2, 3}, {1, 2, 3, 4}, {1, 2}},
		PromptLen:  []int{1, 1, 1},
		Reward:     []float64{1, 1, 0},
		GroupID:    []string{"g", "g", "h"},
		TaskID:     []string{"t0", "t0", "t1"},
		DataSource: []string{"d", "d", "e"},
		Traj:       []int{0, 0, 1},
		Row:        map[string][]float64{rollout.KeyIsCorrect: {1, 1, 0}},
	}
	cfg := defaultConfig()
	cfg.Name = name
	if _, err := RolloutAdvantages(r, cfg); err != nil {
		t.Fatal(err)
	}
	if len(seen.Rewards) != 2 || seen.Lengths[0][0] != 5 || seen.Lengths[1][0] != 1 || seen.Steps[0][0] != 2 ||
		seen.GroupIDs[1] != "h" || seen.TaskIDs[1][0] != "t1" || seen.DataSources[0][0] != "d" ||
		seen.RowColumns[rollout.KeyIsCorrect][1][0] != 0 {
		t.Errorf("outcome input %+v", seen)
	}
}
