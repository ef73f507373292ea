package estimators

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks over a realistic advantage batch: 4,096 groups × 16 samples, binary-ish rewards.
// Each reports ns per trajectory.

const benchGroups, benchSamples = 4096, 16

func benchRewards() [][]float64 {
	rng := rand.New(rand.NewPCG(42, 0))
	groups := make([][]float64, benchGroups)
	for g := range groups {
		groups[g] = make([]float64, benchSamples)
		for i := range groups[g] {
			if rng.IntN(3) == 0 {
				groups[g][i] = rng.Float64()
			} else {
				groups[g][i] = float64(rng.IntN(2))
			}
		}
	}
	return groups
}

func reportPerTraj(b *testing.B, trajectories int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(trajectories), "ns/traj")
}

func BenchmarkEstimators(b *testing.B) {
	rewards := benchRewards()
	baselines := benchRewards()
	for _, name := range []string{GRPO, DrGRPO, Reinforce, ReinforcePPBaseline, RLOO, ReMax} {
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Name = name
			in := Input{Rewards: rewards, Baselines: baselines}
			for b.Loop() {
				if _, err := Estimate(in, cfg); err != nil {
					b.Fatal(err)
				}
			}
			reportPerTraj(b, benchGroups*benchSamples)
		})
	}
}

// BenchmarkGAE runs GAE with whitening on one 256-token response per trajectory.
func BenchmarkGAE(b *testing.B) {
	const T = 256
	rng := rand.New(rand.NewPCG(7, 0))
	n := benchGroups * benchSamples / 16 // 4,096 rows: GAE is per token, keep the batch in memory
	in := Input{}
	for range n {
		m, r, v := make([]float64, T), make([]float64, T), make([]float64, T)
		for t := range T {
			m[t] = 1
			v[t] = rng.NormFloat64()
		}
		r[T-1] = 1
		in.Mask, in.TokenRewards, in.Values = append(in.Mask, m), append(in.TokenRewards, r), append(in.Values, v)
	}
	cfg := DefaultConfig()
	cfg.Name, cfg.Lambda = GAE, 0.95
	for b.Loop() {
		if _, err := Estimate(in, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportPerTraj(b, n)
}

// BenchmarkCollect runs the whole pipeline (GRPO, broadcast to a 2+64-token step, metrics).
func BenchmarkCollect(b *testing.B) {
	rewards := benchRewards()
	groups := make([]Group, len(rewards))
	for g := range groups {
		groups[g] = Group{TaskID: fmt.Sprint(g), Role: "policy"}
		for _, r := range rewards[g] {
			groups[g].Trajectories = append(groups[g].Trajectories, Trajectory{Reward: r, Steps: []Step{{Tokens: make([]int32, 66), PromptLen: 2}}})
		}
	}
	cfg := CollectConfig{Default: DefaultConfig()}
	for b.Loop() {
		if _, err := Collect(groups, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportPerTraj(b, benchGroups*benchSamples)
}
