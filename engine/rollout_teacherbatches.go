package engine

import (
	"fmt"
	"math/rand/v2"
)

// teacherBatches: each rollout is sampled either by the role itself, with
// probability gkd_lambda, or else entirely by its teacher (GKD, Agarwal et
// al., 2024). The off-policy batches are the teacher's samples (trl's
// seq_kd), not the task's reference answers: the built-in tasks' answers
// are bare results in a format the teacher (trained elsewhere) need not
// share, while the teacher's own sequences are where its logits, which the
// loss matches, are most informative; and they exist for every task.
type teacherBatches struct{}

func (teacherBatches) sample(g *rolloutGen, id int, seed uint64, prompts [][]int32) (drawn, error) {
	k := g.rec.Knobs
	sampler, onPolicy := g.sampler, 1.0
	if !gkdOnPolicy(k.Seed, id, k.GKDLambda) {
		if g.teacher == nil {
			return drawn{}, fmt.Errorf("gkd needs a teacher role (init: teacher) for its off-policy batches")
		}
		sampler, onPolicy = g.teacher, 0
	}
	samples, err := sampler.Generate(prompts, g.sampleOptions(seed, false))
	if err != nil {
		return drawn{}, fmt.Errorf("sample: %w", err)
	}
	// 1 when the student generated the batch, 0 when the teacher did;
	// sampler_log_probs are then the teacher's (GKD does not read them).
	return drawn{samples: samples, metrics: map[string]float64{"gkd/on_policy": onPolicy}}, nil
}

// gkdOnPolicy draws whether GKD's rollout id is on-policy: true with
// probability λ (GKD, Agarwal et al., 2024). The draw depends on the run's seed and
// the rollout id only, so a resumed run, a retried generation and a rerun
// all make the same choice; λ = 0 never and λ = 1 always draws true
// (Float64 is in [0, 1)).
func gkdOnPolicy(seed int, id int, lambda float64) bool {
	return rand.New(rand.NewPCG(uint64(seed), uint64(id)^0x96d1a3b)).Float64() < lambda
}
