package estimators

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
)

// randomRollout builds the rows of groups of multi-step trajectories (one row per step) with
// masks that skip observation tokens, critic values, token-reward shaping and greedy rewards.
func randomRollout(rng *rand.Rand) *rollout.Rollout {
	r := &rollout.Rollout{Row: map[string][]float64{rollout.KeyGreedyReward: nil},
		Tok: map[string][][]float32{rollout.KeyValues: nil, rollout.KeyTokenRewards: nil}}
	traj := 0
	for g := range 1 + rng.IntN(5) {
		greedy := float64(rng.IntN(2))
		for range 1 + rng.IntN(5) {
			reward := float64(rng.IntN(3)) / 2
			for range 1 + rng.IntN(3) {
				p, n := 1+rng.IntN(3), rng.IntN(6)
				mask, values, shaping := make([]float32, p+n), make([]float32, p+n), make([]float32, p+n)
				for t := p; t < p+n; t++ {
					if rng.IntN(5) > 0 {
						mask[t] = 1
					}
					values[t] = float32(rng.NormFloat64())
					shaping[t] = float32(rng.NormFloat64() / 10)
				}
				r.Tokens = append(r.Tokens, make([]int32, p+n))
				r.PromptLen = append(r.PromptLen, p)
				r.Mask = append(r.Mask, mask)
				r.Reward = append(r.Reward, reward)
				r.GroupID = append(r.GroupID, fmt.Sprint("task", g))
				r.Traj = append(r.Traj, traj)
				r.Row[rollout.KeyGreedyReward] = append(r.Row[rollout.KeyGreedyReward], greedy)
				r.Tok[rollout.KeyValues] = append(r.Tok[rollout.KeyValues], values)
				r.Tok[rollout.KeyTokenRewards] = append(r.Tok[rollout.KeyTokenRewards], shaping)
			}
			traj++
		}
	}
	return r
}

func TestRolloutAdvantagesShuffledRows(t *testing.T) {
	r := randomRollout(rand.New(rand.NewPCG(9, 9)))
	perm := r.Permutation(3)
	shuffled := r.Shuffle(3)
	cfg := defaultConfig()
	// Outcome estimators group by GroupID and Traj: row order does not matter.
	if _, err := RolloutAdvantages(r, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := RolloutAdvantages(shuffled, cfg); err != nil {
		t.Fatal(err)
	}
	for j, i := range perm {
		if !slices.Equal(shuffled.Tok[rollout.KeyAdvantages][j], r.Tok[rollout.KeyAdvantages][i]) {
			t.Fatalf("shuffled row %d (row %d) differs", j, i)
		}
	}
	// GAE needs the rows of a trajectory together and in order.
	cfg.Name = GAE
	split := &rollout.Rollout{
		Tokens: [][]int32{{1, 2}, {3, 4}, {5, 6}},
		Reward: []float64{1, 0, 1},
		Traj:   []int{0, 1, 0},
		Tok:    map[string][][]float32{rollout.KeyValues: {{0, 0}, {0, 0}, {0, 0}}},
	}
	if _, err := RolloutAdvantages(split, cfg); err == nil || !strings.Contains(err.Error(), "not consecutive") {
		t.Errorf("split trajectory: err = %v", err)
	}
	split.Traj = []int{0, 1, 2}
	if _, err := RolloutAdvantages(split, cfg); err != nil {
		t.Errorf("separate trajectories: %v", err)
	}
	split.Reward = nil
	if _, err := RolloutAdvantages(split, cfg); err == nil {
		t.Error("rollout without rewards: no error")
	}
}

// GAE runs over the rows of a trajectory as one sequence: the reward lands on the last
// trainable token of the trajectory's last row, and observation tokens are skipped.
func TestRolloutAdvantagesGAEChainsRows(t *testing.T) {
	r := &rollout.Rollout{
		Tokens:    [][]int32{{1, 2, 3}, {1, 2, 3, 7, 4}},
		PromptLen: []int{1, 3},
		Mask:      [][]float32{{0, 1, 1}, {0, 0, 0, 0, 1}},
		Reward:    []float64{1, 1},
		Traj:      []int{0, 0},
		Tok:       map[string][][]float32{rollout.KeyValues: {{0, 0.5, 0.25}, {0, 0, 0, 9, 0.75}}},
	}
	cfg := defaultConfig()
	cfg.Name, cfg.Whiten = GAE, false
	if _, err := RolloutAdvantages(r, cfg); err != nil {
		t.Fatal(err)
	}
	// γ = λ = 1, reward 1 on the last valid token: A_t = 1 − V_t on valid tokens.
	want := [][]float32{{0, 0.5, 0.75}, {0, 0, 0, 0, 0.25}}
	for b := range want {
		if got := r.Tok[rollout.KeyAdvantages][b]; !slices.Equal(got, want[b]) {
			t.Errorf("row %d: %v, want %v", b, got, want[b])
		}
		for i, m := range r.Mask[b] {
			if ret := r.Tok[rollout.KeyReturns][b][i]; (m != 0 && ret != 1) || (m == 0 && ret != 0) {
				t.Errorf("row %d token %d: return %v", b, i, ret)
			}
		}
	}
	// Without values GAE is an error that names the missing input.
	delete(r.Tok, rollout.KeyValues)
	if _, err := RolloutAdvantages(r, cfg); err == nil || !strings.Contains(err.Error(), "missing critic values") {
		t.Errorf("missing values: err = %v", err)
	}
}

// rows returns a rollout of single-row trajectories in one group, 2 prompt + 3 response tokens each.
func rows(rewards ...float64) *rollout.Rollout {
	r := &rollout.Rollout{}
	for _, x := range rewards {
		r.Tokens = append(r.Tokens, make([]int32, 5))
		r.PromptLen = append(r.PromptLen, 2)
		r.Reward = append(r.Reward, x)
		r.GroupID = append(r.GroupID, "t")
	}
	return r
}

func TestRolloutAdvantagesErrors(t *testing.T) {
	cfg := defaultConfig()
	cfg.Name = "gpro"
	_, err := RolloutAdvantages(rows(1, 0), cfg)
	if err == nil || !strings.Contains(err.Error(), `unknown advantage estimator "gpro"`) || !strings.Contains(err.Error(), "grpo, ") {
		t.Errorf("unknown estimator: err = %v", err)
	}
	cfg.Name = ReMax
	if _, err := RolloutAdvantages(rows(1, 0), cfg); err == nil || !strings.Contains(err.Error(), "missing greedy baseline") {
		t.Errorf("remax without greedy reward: err = %v", err)
	}
	cfg = defaultConfig()
	cfg.StdDDOF = -1
	if _, err := RolloutAdvantages(rows(1, 0), cfg); err == nil || !strings.Contains(err.Error(), "std_ddof") {
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
	cfg := defaultConfig()
	cfg.Name = name
	r := rows(1, 0.25)
	if _, err := RolloutAdvantages(r, cfg); err != nil {
		t.Fatal(err)
	}
	if got := r.Tok[rollout.KeyAdvantages][1][2]; got != -0.75 {
		t.Errorf("custom estimator advantage %v, want -0.75", got)
	}
	// An estimator that returns the wrong shape is caught.
	broken := "test_broken_shape"
	MustRegister(NewOutcome(broken, func(r, _ [][]float64, _ Config) ([][]float64, error) {
		return [][]float64{{1}}, nil
	}))
	cfg.Name = broken
	if _, err := RolloutAdvantages(rows(1, 0), cfg); err == nil {
		t.Error("wrong-shaped output: no error")
	}
	// Errors of a custom estimator are wrapped with its name.
	failing := "test_failing"
	sentinel := errors.New("boom")
	MustRegister(NewOutcome(failing, func(_, _ [][]float64, _ Config) ([][]float64, error) { return nil, sentinel }))
	cfg.Name = failing
	if _, err := RolloutAdvantages(rows(1), cfg); !errors.Is(err, sentinel) || !strings.Contains(err.Error(), failing) {
		t.Errorf("failing estimator: err = %v", err)
	}
}
