package estimators

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"stx.dev/stx/rollout"
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
			cfg := defaultConfig()
			cfg.Name = name
			in := Input{OutcomeInput: OutcomeInput{Rewards: rewards, Baselines: baselines}}
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
	cfg := defaultConfig()
	cfg.Name, cfg.Lambda = GAE, 0.95
	for b.Loop() {
		if _, err := Estimate(in, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportPerTraj(b, n)
}

// BenchmarkRolloutAdvantages runs GRPO over rows and broadcasts to a 2+64-token row.
func BenchmarkRolloutAdvantages(b *testing.B) {
	rewards := benchRewards()
	r := &rollout.Rollout{}
	for g := range rewards {
		for _, x := range rewards[g] {
			r.Tokens = append(r.Tokens, make([]int32, 66))
			r.PromptLen = append(r.PromptLen, 2)
			r.Reward = append(r.Reward, x)
			r.GroupID = append(r.GroupID, fmt.Sprint(g))
		}
	}
	cfg := defaultConfig()
	for b.Loop() {
		if _, err := RolloutAdvantages(r, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportPerTraj(b, benchGroups*benchSamples)
}
