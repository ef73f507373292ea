package serve

import (
	"context"
	"errors"
	"slices"
	"sync"

	"stx.dev/stx/runtime"
)

// generator samples one continuation of one prompt; concurrent calls are batched by the
// implementation.
type generator interface {
	Generate(ctx context.Context, prompt []int32, opt runtime.SampleOptions) (runtime.Sample, error)
}

// newGenerator returns the generator over s and the function that stops it: runtime.Batcher
// (continuous batching: a request joins the decode loop at its next step, with its own random
// stream) where the sampler decodes on the host; elsewhere (XLA, or SimpleGo computing in
// bfloat16), where the Batcher would run requests one after another, the queue below, which
// batches them through Sampler.Generate's compiled decode graphs.
func newGenerator(s *runtime.Sampler, maxRows int) (generator, func()) {
	if !s.DecodesOnHost() {
		q := &queue{s: s, maxRows: maxRows}
		return q, q.Close
	}
	b := runtime.NewBatcher(s, maxRows)
	return b, func() { _ = b.Close() } // Close always returns nil
}

// queue batches concurrent Generate calls through runtime.Sampler.Generate: a call that arrives
// while a batch decodes waits; when the batch ends, the waiting calls whose options equal the
// first waiting call's (the seed aside), up to maxRows, decode together. Greedy samples are
// those of Sampler.Generate on each prompt alone; sampled ones depend on which calls share a
// batch (one random stream per batch, from its first call's seed).
type queue struct {
	s       *runtime.Sampler
	maxRows int

	mu      sync.Mutex
	waiting []*pending
	running bool // a goroutine is draining the queue
	closed  bool
}

type pending struct {
	ctx    context.Context
	prompt []int32
	opt    runtime.SampleOptions
	done   chan result // buffered: the loop never blocks on a caller that left
}

type result struct {
	sample runtime.Sample
	err    error
}

var errClosed = errors.New("the generator is closed")

func (q *queue) Generate(ctx context.Context, prompt []int32, opt runtime.SampleOptions) (runtime.Sample, error) {
	p := &pending{ctx: ctx, prompt: prompt, opt: opt, done: make(chan result, 1)}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return runtime.Sample{}, errClosed
	}
	q.waiting = append(q.waiting, p)
	if !q.running {
		q.running = true
		go q.loop()
	}
	q.mu.Unlock()
	select {
	case r := <-p.done:
		return r.sample, r.err
	case <-ctx.Done():
		return runtime.Sample{}, ctx.Err() // the loop skips it if it has not started
	}
}

// Close fails the calls still waiting; a batch that is decoding finishes.
func (q *queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, p := range q.waiting {
		p.done <- result{err: errClosed}
	}
	q.waiting = nil
}

// loop decodes batches until no call waits.
func (q *queue) loop() {
	for {
		batch := q.next()
		if batch == nil {
			return
		}
		prompts := make([][]int32, len(batch))
		for i, p := range batch {
			prompts[i] = p.prompt
		}
		samples, err := q.s.Generate(prompts, batch[0].opt)
		for i, p := range batch {
			if err != nil {
				p.done <- result{err: err}
			} else {
				p.done <- result{sample: samples[i]}
			}
		}
	}
}

// next takes the next batch off the queue (nil when empty, which ends the loop).
func (q *queue) next() []*pending {
	q.mu.Lock()
	defer q.mu.Unlock()
	live := q.waiting[:0]
	for _, p := range q.waiting {
		if p.ctx.Err() == nil {
			live = append(live, p)
		}
	}
	q.waiting = live
	if len(q.waiting) == 0 {
		q.running = false
		return nil
	}
	first := q.waiting[0]
	var batch, rest []*pending
	for _, p := range q.waiting {
		if len(batch) < q.maxRows && sameOptions(first.opt, p.opt) {
			batch = append(batch, p)
		} else {
			rest = append(rest, p)
		}
	}
	q.waiting = rest
	return batch
}

// sameOptions says whether two calls can share one Sampler.Generate call: equal options but
// the seed.
func sameOptions(a, b runtime.SampleOptions) bool {
	return a.MaxNewTokens == b.MaxNewTokens && a.Temperature == b.Temperature && a.TopP == b.TopP &&
		a.TopK == b.TopK && slices.Equal(a.StopTokens, b.StopTokens)
}
