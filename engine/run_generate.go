package engine

import (
	"fmt"
	"math/rand/v2"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/rollout"
)

// generator is the loop's generation collaborator (rollout_manager.generate
// in train.py): per rollout it draws the sampling seed from the run's RNG,
// has the rollout generator sample and score the data and, with
// task.reward_role, has that role score it instead. The checkpointer saves
// and restores the RNG's state.
type generator struct {
	*env
	*roleSet
	*rolloutGen
	rng *rand.PCG // draws each rollout's sampling seed
}

// newGenerator wraps rg in the loop's generation collaborator, its RNG
// seeded from the recipe's seed.
func (l *loop) newGenerator(rg *rolloutGen) *generator {
	return &generator{env: l.env, roleSet: l.roleSet, rolloutGen: rg, rng: rand.NewPCG(uint64(l.rec.Knobs.Seed), 0x5a3b1e)}
}

// generate draws rollout id's data with a seed from the run's RNG; with
// task.reward_role, that role scores it instead of the task's reward functions.
func (g *generator) generate(id int) (*batch, error) {
	if b, ok, err := g.ahead(id); ok { // asynchronous rollouts (async.go)
		return b, err
	}
	seed := g.rng.Uint64()
	b, err := g.rolloutGen.generate(id, seed)
	if err != nil {
		return nil, err
	}
	if name := g.env.rec.Task.RewardRole; name != "" && b.data.Len() > 0 {
		rr := g.byName[name]
		if rr == nil || rr.self == nil {
			return nil, fmt.Errorf("task.reward_role %q is not a role that produces rewards", name)
		}
		if err := produceInto(rr.self, b.data, g.batchOptions(rr, id), []string{rollout.KeyRewards}, []string{rollout.KeyRewards}); err != nil {
			return nil, fmt.Errorf("reward role %q: %w", name, err)
		}
	}
	return b, nil
}

// rolloutMetrics are the metrics of rollout id's data that every record of
// its steps carries.
func (g *generator) rolloutMetrics(id int, b *batch) map[string]float64 {
	base := map[string]float64{"rollout": float64(id), "epoch": g.feed.epoch()}
	for name, v := range b.metrics {
		base[name] = v
	}
	if b.wf == nil && kindOf(g.kind).rewarded {
		for name, v := range rewardMetrics(b.data) {
			base[name] = v
		}
	}
	return base
}

// logRetry records a retried generation in events.jsonl and on the console.
func (g *generator) logRetry(id, attempt int, err error) error {
	retries := g.env.rec.Knobs.RolloutRetries
	g.con.printf("rollout %d: generation failed (%v); retry %d of %d\n", id+1, err, attempt, retries)
	g.con.event("rollout_retry", map[string]any{"rollout": id, "attempt": attempt, "error": err.Error()})
	return g.dir.LogEvent(rundir.Event{Type: rundir.EventRolloutRetry, Rollout: id, Message: err.Error(),
		Metrics: map[string]float64{"attempt": float64(attempt)}})
}
