package estimators

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
)

// randomGroups builds groups of multi-step trajectories with masks that skip observation tokens,
// critic values, token-reward shaping, greedy rewards and (every other step) supplied advantages.
func randomGroups(rng *rand.Rand) []Group {
	var gs []Group
	for g := range 1 + rng.IntN(5) {
		greedy := float64(rng.IntN(2))
		grp := Group{TaskID: fmt.Sprint("task", g), Role: "policy", GreedyReward: &greedy}
		for range 1 + rng.IntN(5) {
			tr := Trajectory{Reward: float64(rng.IntN(3)) / 2}
			for s := range 1 + rng.IntN(3) {
				p, n := 1+rng.IntN(3), rng.IntN(6)
				st := Step{Tokens: make([]int32, p+n), PromptLen: p,
					Mask: make([]float32, p+n), Values: make([]float32, p+n), TokenRewards: make([]float32, p+n)}
				for t := p; t < p+n; t++ {
					if rng.IntN(5) > 0 {
						st.Mask[t] = 1
					}
					st.Values[t] = float32(rng.NormFloat64())
					st.TokenRewards[t] = float32(rng.NormFloat64() / 10)
				}
				if s%2 == 0 {
					adv := make([]float64, n)
					for t := range adv {
						adv[t] = float64(rng.IntN(9)-4) / 4
					}
					st.Advantage = PerTokenAdvantage(adv)
				}
				tr.Steps = append(tr.Steps, st)
			}
			grp.Trajectories = append(grp.Trajectories, tr)
		}
		gs = append(gs, grp)
	}
	return gs
}

// RolloutAdvantages on the rows of ToRollout(groups) must give what Collect gives on the groups.
func TestRolloutAdvantagesMatchesCollect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 100 {
		groups := randomGroups(rng)
		for _, name := range []string{GRPO, DrGRPO, RLOO, ReinforcePPBaseline, ReMax, Reinforce, GAE, Precomputed} {
			cfg := DefaultConfig()
			cfg.Name, cfg.Gamma, cfg.Lambda, cfg.StdDDOF = name, 0.9, 0.8, trial%2
			res, err := Collect(groups, CollectConfig{Default: cfg})
			if err != nil {
				t.Fatal(err)
			}
			want, err := ToRollout(groups, res)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ToRollout(groups, nil)
			if err != nil {
				t.Fatal(err)
			}
			if name == Precomputed {
				// On rows, supplied advantages live in the advantages column (0 where none).
				sup := make([][]float32, got.Len())
				row := 0
				for _, g := range groups {
					for _, tr := range g.Trajectories {
						for _, st := range tr.Steps {
							sup[row] = make([]float32, len(st.Tokens))
							if st.Advantage != nil {
								for i, v := range st.Advantage.PerToken {
									sup[row][st.PromptLen+i] = float32(v)
								}
							}
							row++
						}
					}
				}
				if err := got.SetTok(rollout.KeyAdvantages, sup); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := RolloutAdvantages(got, cfg); err != nil {
				t.Fatalf("trial %d %s: %v", trial, name, err)
			}
			for _, key := range []string{rollout.KeyAdvantages, rollout.KeyReturns} {
				w, g := want.Tok[key], got.Tok[key]
				if (w == nil) != (g == nil) {
					t.Fatalf("trial %d %s: column %s present in Collect %v, in RolloutAdvantages %v", trial, name, key, w != nil, g != nil)
				}
				for b := range w {
					for i := range w[b] {
						if d := w[b][i] - g[b][i]; d > 1e-6 || d < -1e-6 {
							t.Fatalf("trial %d %s %s row %d token %d: Collect %v, RolloutAdvantages %v", trial, name, key, b, i, w[b][i], g[b][i])
						}
					}
				}
			}
		}
	}
}

func TestRolloutAdvantagesShuffledRows(t *testing.T) {
	groups := randomGroups(rand.New(rand.NewPCG(9, 9)))
	r, err := ToRollout(groups, nil)
	if err != nil {
		t.Fatal(err)
	}
	perm := r.Permutation(3)
	shuffled := r.Shuffle(3)
	cfg := DefaultConfig()
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
