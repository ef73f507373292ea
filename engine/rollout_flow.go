package engine

// flowPoints lays out rollout_batch_size × n_samples_per_prompt dataset
// points for a velocity-model role (flow matching): nothing is sampled.
type flowPoints struct{}

func (flowPoints) unit() int { return 1 }

func (flowPoints) generate(g *rolloutGen, _ int, _ uint64) (*batch, error) {
	k := g.rec.Knobs
	return flowSamples(g.feed.next(k.RolloutBatchSize*max(k.NSamplesPerPrompt, 1)), g.role)
}

// flowTrajectories samples SDE trajectories of the rollout's velocity
// model and scores their end points (Flow-GRPO).
type flowTrajectories struct{}

func (flowTrajectories) unit() int { return 1 }

func (flowTrajectories) generate(g *rolloutGen, _ int, seed uint64) (*batch, error) {
	return g.flow.flowRollout(g.rec.Knobs, g.reward, g.role, seed)
}
