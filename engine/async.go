package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Asynchronous rollouts (max_staleness k > 0, with a rollout engine): a pipeline of up to
// k rollouts generated ahead of the one training. Weight version v is the trainer's
// weights after v rollouts' training, so rollout j trains on version j; while rollout i
// trains, the servers hold version i and a goroutine generates, one after another, the
// rollouts after those already generated up to i+k: each trains at most k versions after
// the one it was sampled with. At the boundary (syncRemote) the goroutine is told to stop:
// the generation in flight ends (the servers must not change weights within a rollout),
// the servers load version i+1, and the next rollout is taken from the head of the queue.
// The goroutine runs only while the loop trains: evaluation, checkpoints and hot reloads,
// which the loop does between the boundary and the next rollout, never see it, and its
// console lines wait for the loop's goroutine (remoteGen.flush).
//
// Each rollout generated ahead draws from copies of the data position and of the seed
// RNG, chained from the one before it, so that the loop's own stay where they were until
// its batch is taken: a checkpoint saved at a boundary, with rollouts in the queue,
// resumes by drawing them again (the same prompts and seeds, sampled on the resumed
// weights). The queue is checked against max_staleness when a rollout is taken, with the
// knob in force then: after a hot change that lowers k, the rollouts that would train
// more than k versions behind are dropped (with every one after them, whose draws follow
// theirs) and drawn again from the loop's position; raising k lets the goroutine run
// further ahead from the next rollout on.

// ahead is one rollout generated ahead.
type ahead struct {
	id   int
	b    *batch
	err  error
	busy time.Duration // the generation's wall time
	// after is the data position and the RNG's state after its draw.
	after genPosition
}

// pipeline is one run of the goroutine that generates ahead, during one rollout's
// training.
type pipeline struct {
	stop atomic.Bool   // set at the boundary: finish the generation in flight, start no other
	done chan struct{} // closed when the goroutine ends

	mu      sync.Mutex
	out     []*ahead // the rollouts it generated, in order
	retries []retry  // the failed generations it retried, told to the loop at the join
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

func (g *generator) position() (genPosition, error) {
	b, err := g.rng.MarshalBinary()
	return genPosition{cursor: g.feed.Cursor, rng: b}, err
}

func (g *generator) setPosition(p genPosition) error {
	g.feed.Cursor = p.cursor
	return g.rng.UnmarshalBinary(p.rng)
}

// ahead returns rollout id's batch when asynchronous rollouts are on (ok true): the head
// of the queue, else one generated now; then it starts generating the rollouts after the
// queue's, up to id+max_staleness. It returns ok false, doing nothing, when they are off
// and the queue is empty.
func (g *generator) ahead(id int) (b *batch, ok bool, err error) {
	r, isRemote := g.sampler.(*remoteGen)
	if !isRemote {
		return nil, false, nil
	}
	r.flush()
	if err := g.join(r); err != nil {
		return nil, true, err
	}
	if hk := g.opts.hooks; hk != nil && hk.staleness != nil {
		g.env.rec.Knobs.MaxStaleness = hk.staleness(id, g.env.rec.Knobs.MaxStaleness)
	}
	k := g.env.rec.Knobs
	dropped := g.dropStale(r, id, k.MaxStaleness)
	var busy time.Duration
	if len(r.queue) > 0 {
		p := r.queue[0]
		r.queue = r.queue[1:]
		if err := g.setPosition(p.after); err != nil {
			return nil, true, fmt.Errorf("async rollout: %w", err)
		}
		b, err, busy = p.b, p.err, p.busy
	} else {
		if k.MaxStaleness == 0 && dropped == 0 {
			r.waited = 0
			return nil, false, nil
		}
		t := time.Now()
		b, err = g.rolloutGen.generate(id, g.rng.Uint64())
		busy = time.Since(t)
	}
	if err != nil {
		r.queue = nil // their draws followed this one's
		return nil, true, err
	}
	b.metrics["time/generate_busy"] = busy.Seconds()
	b.metrics["time/generate_wait"] = r.waited
	r.waited = 0
	b.metrics["rollout/staleness"] = float64(r.version) - b.metrics["rollout/weight_version"]
	b.metrics["rollout/queued"] = float64(len(r.queue))
	b.metrics["rollout/dropped"] = float64(dropped)
	if last := min(id+k.MaxStaleness, k.NumRollout-1); k.MaxStaleness > 0 && id+len(r.queue) < last {
		if err := g.startAhead(r, id+len(r.queue)+1, last); err != nil {
			return nil, true, err
		}
		if hk := g.opts.hooks; hk != nil && hk.fillAhead {
			// Tests: the queue fills before training, which makes the staleness of
			// every rollout known in advance.
			if err := g.wait(r, false); err != nil {
				return nil, true, err
			}
		}
	}
	return b, true, nil
}

// dropStale drops the queue from its first rollout that is not the next one due or that
// would train more than k versions after the one it was sampled with (rollout id trains
// on the servers' current version, id+n on n versions later). It returns how many it
// dropped.
func (g *generator) dropStale(r *remoteGen, id, k int) int {
	for i, p := range r.queue {
		stale := p.b != nil && float64(r.version+i)-p.b.metrics["rollout/weight_version"] > float64(k)
		if p.id != id+i || stale {
			n := len(r.queue) - i
			r.queue = r.queue[:i]
			return n
		}
	}
	return 0
}

// startAhead starts generating rollouts from to last, one after another, in a goroutine,
// on a copy of the rollout generator whose data position and RNG follow the queue's last
// rollout (the loop's own when the queue is empty).
func (g *generator) startAhead(r *remoteGen, from, last int) error {
	pos, err := g.position()
	if n := len(r.queue); n > 0 {
		pos = r.queue[n-1].after
	}
	if err != nil {
		return fmt.Errorf("async rollout: %w", err)
	}
	var rng rand.PCG
	if err := rng.UnmarshalBinary(pos.rng); err != nil {
		return fmt.Errorf("async rollout: %w", err)
	}
	p := &pipeline{done: make(chan struct{})}
	gen := *g.rolloutGen
	feed := *g.feed
	feed.Cursor = pos.cursor
	gen.feed = &feed
	// The loop's retry log prints to the console, which only the loop's goroutine uses.
	gen.retried = func(id, attempt int, err error) error {
		p.mu.Lock()
		p.retries = append(p.retries, retry{id, attempt, err})
		p.mu.Unlock()
		return nil
	}
	r.pipe = p
	go func() {
		defer close(p.done)
		for id := from; id <= last && !p.stop.Load(); id++ {
			a := &ahead{id: id}
			seed := rng.Uint64()
			t := time.Now()
			a.b, a.err = gen.generate(id, seed)
			a.busy = time.Since(t)
			a.after.cursor = feed.Cursor
			st, merr := rng.MarshalBinary()
			if a.after.rng = st; merr != nil && a.err == nil {
				a.err = fmt.Errorf("async rollout: %w", merr)
			}
			p.mu.Lock()
			p.out = append(p.out, a)
			p.mu.Unlock()
			if a.err != nil {
				return // the rollouts after it would draw from its position
			}
		}
	}()
	return nil
}

// join stops the goroutine generating ahead, if one runs, once its generation in flight
// ends, and queues what it generated (wait).
func (g *generator) join(r *remoteGen) error { return g.wait(r, true) }

// wait waits for the goroutine generating ahead (told to stop after its generation in
// flight when stop is set), queues the rollouts it generated, tells the loop's retry log
// of its retries and adds the time waited to r.waited.
func (g *generator) wait(r *remoteGen, stop bool) error {
	p := r.pipe
	if p == nil {
		return nil
	}
	if stop {
		p.stop.Store(true)
	}
	t := time.Now()
	<-p.done
	r.waited += time.Since(t).Seconds()
	r.pipe = nil
	r.queue = append(r.queue, p.out...)
	var first error
	for _, x := range p.retries {
		if err := g.retried(x.id, x.attempt, x.err); err != nil && first == nil {
			first = err
		}
	}
	return first
}
