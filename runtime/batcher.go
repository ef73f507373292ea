package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
)

// ErrBatcherClosed is returned by Batcher.Generate after Close.
var ErrBatcherClosed = errors.New("sample: batcher closed")

// Batcher decodes concurrent requests together on one sampler (continuous batching): a request
// joins the decode batch at the next step, after its prompt is prefilled on its own, and leaves
// it at its stop token, its length limit or the cancellation of its context, freeing its row for
// the next request. Every request has its own options and random stream (seeded by its
// SampleOptions.Seed), and the host decoder computes each row independently of the others (see
// generateHost), so a request's sample is the one Sampler.Generate gives its prompt alone with
// the same options, whichever requests it overlapped with.
//
// Only the host decoder (the CPU backends) batches this way; on other backends each request
// runs alone through Sampler.Generate, one after the other. The batch steps hold the sampler's
// lock between them only, so Sampler.Generate calls interleave with them; weights changed
// while a request is decoding take effect at the next step (its sample then comes from both).
type Batcher struct {
	s       *Sampler
	maxRows int
	host    bool

	mu      sync.Mutex
	wake    *sync.Cond // signalled when a request arrives or on Close
	pending []*batchRequest
	closed  bool
	stopped chan struct{} // closed when the decode loop has returned
}

// batchRequest is one request waiting for a row or decoding.
type batchRequest struct {
	ctx     context.Context
	prompt  []int32
	opt     SampleOptions
	stops   stopSet
	rng     *rand.Rand
	row     hostRow
	scratch *sampleScratch
	done    chan batchResult // buffered: the loop never waits on a caller that left
}

type batchResult struct {
	sample Sample
	err    error
}

// NewBatcher decodes concurrent requests together on s: a request joins the batch at the next
// decode step and leaves it when it stops. At most maxRows requests (at least 1) decode at
// once; the others wait in arrival order.
func NewBatcher(s *Sampler, maxRows int) *Batcher {
	b := &Batcher{s: s, maxRows: max(1, maxRows), host: s.decodesOnHost(), stopped: make(chan struct{})}
	b.wake = sync.NewCond(&b.mu)
	if b.host {
		go b.loop()
	} else {
		close(b.stopped)
	}
	return b
}

// Generate blocks until the request's sample is complete (or ctx is cancelled: its row leaves
// the batch).
func (b *Batcher) Generate(ctx context.Context, prompt []int32, opt SampleOptions) (Sample, error) {
	if _, err := b.s.check([][]int32{prompt}, opt); err != nil {
		return Sample{}, err
	}
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	if !b.host {
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return Sample{}, ErrBatcherClosed
		}
		out, err := b.s.Generate([][]int32{prompt}, opt)
		if err != nil {
			return Sample{}, err
		}
		return out[0], nil
	}
	req := &batchRequest{ctx: ctx, prompt: prompt, opt: opt, stops: newStopSet(opt.StopTokens, b.s.m.Config.VocabSize),
		rng: rand.New(rand.NewPCG(opt.Seed, samplerSeed)), done: make(chan batchResult, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Sample{}, ErrBatcherClosed
	}
	b.pending = append(b.pending, req)
	b.wake.Signal()
	b.mu.Unlock()
	select {
	case r := <-req.done:
		return r.sample, r.err
	case <-ctx.Done():
		return Sample{}, ctx.Err() // the loop drops the row at its next step
	}
}

// Close stops the batcher: requests still waiting or decoding fail with ErrBatcherClosed, later
// ones too.
func (b *Batcher) Close() error {
	b.mu.Lock()
	b.closed = true
	b.wake.Broadcast()
	b.mu.Unlock()
	<-b.stopped
	return nil
}

// loop is the decode loop: admit waiting requests into free rows (prefilling each), draw every
// row's next token, retire the rows that finished or were cancelled, and run one decode step
// for the others.
func (b *Batcher) loop() {
	defer close(b.stopped)
	s := b.s
	V := s.m.Config.VocabSize
	workers := max(1, runtime.GOMAXPROCS(0))
	var active []*batchRequest // the rows decoding; row i's logits at logits[i·V:]
	var logits []float32
	var free []*sampleScratch // scratches of retired rows, for the next ones
	var seqs []*hostSeq
	var tokens []int32
	fail := func(reqs []*batchRequest, err error) {
		for _, r := range reqs {
			r.done <- batchResult{err: err}
		}
	}
	for {
		b.mu.Lock()
		for len(active) == 0 && len(b.pending) == 0 && !b.closed {
			b.wake.Wait()
		}
		if b.closed {
			pending := b.pending
			b.pending = nil
			b.mu.Unlock()
			fail(pending, ErrBatcherClosed)
			fail(active, ErrBatcherClosed)
			return
		}
		var admit []*batchRequest
		for len(b.pending) > 0 && len(active)+len(admit) < b.maxRows {
			r := b.pending[0]
			b.pending = b.pending[1:]
			if r.ctx.Err() == nil {
				admit = append(admit, r)
			}
		}
		b.mu.Unlock()

		s.mu.Lock()
		if err := s.ensureHost(); err != nil {
			s.mu.Unlock()
			fail(admit, err)
			fail(active, err)
			active = active[:0]
			continue
		}
		n := len(active) + len(admit)
		if cap(logits) < n*V { // the active rows' logits move along
			logits = append(make([]float32, 0, b.maxRows*V), logits...)
		}
		logits = logits[:n*V]
		// The new rows' prompts prefilled together, each row's logits after the active ones'.
		pseqs, pprompts, pdst := make([]*hostSeq, len(admit)), make([][]int32, len(admit)), make([][]float32, len(admit))
		for j, r := range admit {
			i := len(active) + j
			r.row.seq = newHostSeq(s.m.Config, len(r.prompt)+r.opt.MaxNewTokens)
			pseqs[j], pprompts[j], pdst[j] = r.row.seq, r.prompt, logits[i*V:(i+1)*V]
		}
		s.prefillHost(pseqs, pprompts, pdst)
		for _, r := range admit {
			if len(free) > 0 {
				r.scratch, free = free[len(free)-1], free[:len(free)-1]
			} else {
				r.scratch = newSampleScratch(V)
			}
			active = append(active, r)
		}
		// Each row draws from its own stream: the rows' draws are independent and run in
		// parallel.
		finished := make([]bool, len(active))
		parallelFor(workers, len(active), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				r := active[i]
				if r.ctx.Err() != nil {
					finished[i] = true
					continue
				}
				r.scratch.prepare(logits[i*V:(i+1)*V], r.opt)
				tok, lp := r.scratch.choose(r.opt, r.rng)
				finished[i] = r.row.take(tok, lp, &r.opt, r.stops)
			}
		})
		kept := active[:0]
		seqs, tokens = seqs[:0], tokens[:0]
		for i, r := range active {
			if !finished[i] {
				kept = append(kept, r)
				seqs, tokens = append(seqs, r.row.seq), append(tokens, r.row.res.Tokens[len(r.row.res.Tokens)-1])
				continue
			}
			free = append(free, r.scratch)
			if err := r.ctx.Err(); err != nil {
				r.done <- batchResult{err: fmt.Errorf("sample: %w", err)}
			} else {
				r.done <- batchResult{sample: r.row.res}
			}
			r.row, r.scratch = hostRow{}, nil
		}
		clear(active[len(kept):])
		active = kept
		if len(active) > 0 {
			s.host.step(seqs, nil, tokens, logits[:len(active)*V])
		}
		s.mu.Unlock()
	}
}
