package engine

import (
	"fmt"
	"time"
)

// Asynchronous rollouts (max_staleness k > 0, with a rollout engine): while rollout i
// trains, the servers already generate rollout i+1 with the weights they hold (version i),
// so rollout i+1 trains one weight version behind the trainer (staleness 1 ≤ k), corrected
// by tis_cap when it is set. The generation runs in a goroutine between the return of
// rollout i's generate and rollout i's updateWeights, which waits for it before the
// servers load the new weights: nothing else of the loop (evaluation, checkpoints, hot
// reloads) runs meanwhile, and the generation's console lines wait until then.
//
// The rollout generated ahead draws from copies of the data position and of the seed RNG,
// so that the loop's own stay where they were (a checkpoint saved at rollout i's end
// resumes by drawing rollout i+1 again: the same prompts and seed, sampled on the resumed
// weights); they move to the copies' place when its batch is taken.

// ahead is one rollout generated ahead.
type ahead struct {
	id   int
	done chan struct{}
	b    *batch
	err  error
	busy time.Duration // the generation's wall time
	// after is the data position and the RNG's state after its draw.
	after genPosition
	// retries are the failed generations retried meanwhile, told to the loop at the join.
	retries []retry
	joined  bool
}

type retry struct {
	id, attempt int
	err         error
}

// genPosition is where the generator is: the data cursor and the seed RNG's state.
type genPosition struct {
	cursor int
	rng    []byte
}

func (g *generator) setPosition(p genPosition) error {
	g.feed.Cursor = p.cursor
	return g.rng.UnmarshalBinary(p.rng)
}

// ahead returns rollout id's batch when asynchronous rollouts are on (ok true): the one
// generated during the previous rollout's training, else one generated now; and starts
// generating rollout id+1. It returns ok false, doing nothing, when they are off.
func (g *generator) ahead(id int) (b *batch, ok bool, err error) {
	r, isRemote := g.sampler.(*remoteGen)
	if !isRemote {
		return nil, false, nil
	}
	r.flush()
	k := g.env.rec.Knobs
	if p := r.ahead; p != nil {
		if _, err := g.join(r); err != nil {
			return nil, true, err
		}
		r.ahead = nil
		if p.id == id { // else it is dropped: the loop's position never moved
			if err := g.setPosition(p.after); err != nil {
				return nil, true, fmt.Errorf("async rollout: %w", err)
			}
			b, err = p.b, p.err
			if b != nil {
				b.metrics["time/generate_busy"] = p.busy.Seconds()
			}
		}
	}
	if b == nil && err == nil {
		if k.MaxStaleness == 0 {
			return nil, false, nil
		}
		t := time.Now()
		if b, err = g.rolloutGen.generate(id, g.rng.Uint64()); err == nil {
			b.metrics["time/generate_busy"] = time.Since(t).Seconds()
		}
	}
	if err != nil {
		return nil, true, err
	}
	b.metrics["rollout/staleness"] = float64(r.version) - b.metrics["rollout/weight_version"]
	if k.MaxStaleness > 0 && id+1 < k.NumRollout {
		if err := g.startAhead(r, id+1); err != nil {
			return nil, true, err
		}
	}
	return b, true, nil
}

// startAhead starts generating rollout id in a goroutine, on a copy of the rollout
// generator with its own data position, RNG state and retry log.
func (g *generator) startAhead(r *remoteGen, id int) error {
	p := &ahead{id: id, done: make(chan struct{})}
	rng := *g.rng
	seed := rng.Uint64()
	gen := *g.rolloutGen
	feed := *g.feed
	gen.feed = &feed
	// The loop's retry log prints to the console, which only the loop's goroutine uses.
	gen.retried = func(id, attempt int, err error) error {
		p.retries = append(p.retries, retry{id, attempt, err})
		return nil
	}
	var err error
	if p.after.rng, err = rng.MarshalBinary(); err != nil {
		return fmt.Errorf("async rollout: %w", err)
	}
	r.ahead = p
	go func() {
		defer close(p.done)
		t := time.Now()
		p.b, p.err = gen.generate(id, seed)
		p.busy = time.Since(t)
		p.after.cursor = feed.Cursor
	}()
	return nil
}

// join waits for the rollout generated ahead, if any, and tells the loop's retry log of
// its retries. It returns the seconds it waited.
func (g *generator) join(r *remoteGen) (float64, error) {
	p := r.ahead
	if p == nil || p.joined {
		return 0, nil
	}
	t := time.Now()
	<-p.done
	wait := time.Since(t).Seconds()
	p.joined = true
	if p.b != nil {
		p.b.metrics["time/generate_wait"] = wait
	}
	var first error
	for _, x := range p.retries {
		if err := g.retried(x.id, x.attempt, x.err); err != nil && first == nil {
			first = err
		}
	}
	return wait, first
}
