package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/cpu"
)

// SampleOptions configures generation.
type SampleOptions struct {
	MaxNewTokens int     // upper bound on generated tokens per sequence (> 0)
	Temperature  float64 // 0 means greedy decoding
	TopP         float64 // nucleus sampling threshold in (0, 1]; 0 or 1 turns it off
	TopK         int     // keep the k most likely tokens; 0 turns it off
	StopTokens   []int32 // a sequence ends after emitting any of these (it is included): EOS, end-of-turn, ...
	Seed         uint64  // same seed, prompts and options → same samples
}

// Sample is one generated continuation.
type Sample struct {
	Tokens []int32 // new tokens (the prompt excluded)
	// LogProbs[i] is the log-probability of Tokens[i] under the distribution it was drawn
	// from before top-k/top-p truncation: log_softmax(logits/Temperature), or log_softmax(logits)
	// when greedy. With temperature 1 it equals the model's log-prob of the token.
	LogProbs []float32
	Stopped  bool // ended with a stop token (false: hit MaxNewTokens)
}

// Sampler generates continuations with a key/value cache kept on the host (measured
// faster than an in-graph cache on SimpleGo). On the CPU backends (SimpleGo, cpu), prompt and
// decode steps run in plain Go (hostdecode.go; products through rowMatMul's C kernels), several
// times faster than a graph launch per token, each row's sample independent of the others in
// its batch (hostgenerate.go; Batcher batches concurrent requests that way); on other backends
// a prompt is one compiled forward and each decode step one compiled graph with the cache as a
// fixed-capacity input, so one graph serves every step. The host decoder keeps
// its copy of the weights between Generate calls and takes it again when any weight has
// changed since (hostDecoder.current), so it always samples from the latest trained policy.
type Sampler struct {
	m    *Model
	mu   sync.Mutex
	exec *context.Exec
	// hostDecode runs prompt and decode steps in plain Go (CPU backends).
	hostDecode bool
	// simpleGo: the backend is GoMLX's SimpleGo, whose bfloat16 conversions truncate where the
	// host decoder rounds to nearest even (as the cpu backend and XLA do): a model computing in
	// bfloat16 then decodes in graphs, which compute what its training graphs compute.
	simpleGo bool
	// prefillTokens bounds the token rows of one host prefill call (hostPrefillTokens).
	prefillTokens int
	// host is the host decoder with its snapshot of the weights, kept between calls.
	host *hostDecoder
	// kCache and vCache hold each layer's keys and values during a call, kept between calls
	// up to keptCacheBytes (maxKeptCacheBytes): a rollout loop samples after every train step,
	// and freshly allocated caches (megabytes per call) cost page faults each time the heap has
	// no freed memory to hand out (at the bench model's GRPO shape, a quarter of the sampling
	// time).
	kCache, vCache [][]float32
	keptCacheBytes int
}

// maxKeptCacheBytes bounds the KV caches a sampler keeps between calls: larger ones (a big
// model's long generations) are memory the train step between two rollouts needs more.
const maxKeptCacheBytes = 256 << 20

// NewSampler prepares generation with m on backend.
func NewSampler(backend backends.Backend, m *Model) (*Sampler, error) {
	exec, err := context.NewExec(backend, m.Context(), m.decodeGraph)
	if err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	return &Sampler{m: m, exec: anyShapes(exec), hostDecode: decodesOnHost(backend), simpleGo: isSimpleGo(backend),
		prefillTokens: hostPrefillTokens, keptCacheBytes: maxKeptCacheBytes}, nil
}

// hostPrefillTokens is the most token rows (prompt positions of all prompts) the host decoder
// prefills in one call: enough for products that reuse each weight many times, few enough that
// the scratch (about 4·(4·hidden + 3·intermediate) bytes per token row) stays small.
const hostPrefillTokens = 1024

// caches returns the per-layer key and value caches of n values each, in the storage of the
// previous call's where it is large enough, zeroed when zero is set. The graph decode needs
// zeros: slots a call never writes are masked out of attention, and a zero (unlike a stale
// value, which may be non-finite) keeps a masked slot's zero weight from contributing anything.
// The host decoder reads only the slots it wrote.
func (s *Sampler) caches(layers, n int, zero bool) (k, v [][]float32) {
	for len(s.kCache) < layers {
		s.kCache, s.vCache = append(s.kCache, nil), append(s.vCache, nil)
	}
	for l := range layers {
		s.kCache[l], s.vCache[l] = grow(s.kCache[l], n), grow(s.vCache[l], n)
		if zero {
			clear(s.kCache[l])
			clear(s.vCache[l])
		}
	}
	return s.kCache[:layers], s.vCache[:layers]
}

// isSimpleGo says whether the backend (possibly wrapped in a *Backend) is GoMLX's SimpleGo.
func isSimpleGo(b backends.Backend) bool {
	if w, ok := b.(*Backend); ok {
		b = w.Backend
	}
	_, ok := b.(*simplego.Backend)
	return ok
}

// decodesOnHost says whether the backend (possibly wrapped in a *Backend) computes on this
// CPU: SimpleGo or stx's cpu backend.
func decodesOnHost(b backends.Backend) bool {
	if w, ok := b.(*Backend); ok {
		b = w.Backend
	}
	_, ok := b.(*simplego.Backend)
	return ok || b.Name() == "cpu"
}

// decodeGraph inputs: tokens [B,T], positions [B,T], the bias among the new tokens [B,T,T] and
// towards the cached ones [B,T,S], then per layer the cached keys [B,kvh,S,hd] and, per layer,
// the cached values transposed [B,kvh,hd,S]. Outputs: logits of the last position [B,V], then
// per layer the new keys [B,kvh,T,hd] and the new transposed values [B,kvh,hd,T]. Layers are
// separate inputs and outputs so that no per-step Slice or Concatenate copies the cache.
func (m *Model) decodeGraph(ctx *context.Context, in []*Node) []*Node {
	layers := m.Config.Layers
	tokens, positions, bias := in[0], in[1], in[2]
	past := &kvCache{k: in[4 : 4+layers], vT: in[4+layers : 4+2*layers], bias: in[3]}
	hidden, present := m.forward(ctx, tokens, positions, bias, past)
	t := tokens.Shape().Dimensions[1]
	last := Squeeze(Slice(hidden, AxisRange(), AxisElem(t-1)), 1)
	out := []*Node{m.Logits(ctx, last)}
	out = append(out, present.k...)
	return append(out, present.vT...)
}

// stopSet is a bitset over the vocabulary of the ids that end a sequence: one
// test per generated token, whatever the number of stop ids.
type stopSet []uint64

// newStopSet builds the set; ids were validated to lie in [0, vocab).
func newStopSet(ids []int32, vocab int) stopSet {
	s := make(stopSet, (vocab+63)/64)
	for _, id := range ids {
		s[id>>6] |= 1 << (id & 63)
	}
	return s
}

func (s stopSet) has(id int32) bool {
	return id >= 0 && int(id>>6) < len(s) && s[id>>6]&(1<<(id&63)) != 0
}

func (o SampleOptions) validate(vocab int) error {
	switch {
	case o.MaxNewTokens <= 0:
		return fmt.Errorf("sample: max new tokens must be positive, got %d", o.MaxNewTokens)
	case o.Temperature < 0 || math.IsNaN(o.Temperature):
		return fmt.Errorf("sample: temperature must be ≥ 0, got %g", o.Temperature)
	case o.TopP < 0 || o.TopP > 1:
		return fmt.Errorf("sample: top-p must be in [0, 1], got %g", o.TopP)
	case o.TopK < 0:
		return fmt.Errorf("sample: top-k must be ≥ 0, got %d", o.TopK)
	}
	for _, s := range o.StopTokens {
		if s < 0 || int(s) >= vocab {
			return fmt.Errorf("sample: stop token %d outside the vocabulary [0, %d)", s, vocab)
		}
	}
	return nil
}

// Generate continues each prompt (all non-empty). On the host decoder each row's sample is the
// one it would get alone (see generateHost); in graphs, prompts are left-padded to a common
// length, padding masked out of attention and not shifting positions.
func (s *Sampler) Generate(prompts [][]int32, opt SampleOptions) ([]Sample, error) {
	if len(prompts) == 0 {
		if err := opt.validate(s.m.Config.VocabSize); err != nil {
			return nil, err
		}
		return nil, nil
	}
	maxPrompt, err := s.check(prompts, opt)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.decodesOnHost() {
		return s.generateHost(prompts, opt)
	}
	return s.generateGraph(prompts, opt, maxPrompt)
}

// decodesOnHost says whether generation runs on the host decoder: on the CPU backends, except
// for a model computing in bfloat16 on SimpleGo (see Sampler.simpleGo). A LoRA model whose
// frozen base is held in bfloat16 decodes there too: the decoder widens the base as it reads it.
func (s *Sampler) decodesOnHost() bool {
	return s.hostDecode && !(s.simpleGo && s.m.MixedPrecision())
}

// DecodesOnHost says whether generation runs on the host decoder, where a Batcher decodes
// concurrent requests together; elsewhere it runs them one after another.
func (s *Sampler) DecodesOnHost() bool { return s.decodesOnHost() }

// check validates the options and prompts and returns the longest prompt's length.
func (s *Sampler) check(prompts [][]int32, opt SampleOptions) (int, error) {
	c := s.m.Config
	if err := opt.validate(c.VocabSize); err != nil {
		return 0, err
	}
	maxPrompt := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return 0, fmt.Errorf("sample: prompt %d is empty", i)
		}
		for _, tok := range p {
			if tok < 0 || int(tok) >= c.VocabSize {
				return 0, fmt.Errorf("sample: prompt %d has token %d outside the vocabulary [0, %d)", i, tok, c.VocabSize)
			}
		}
		maxPrompt = max(maxPrompt, len(p))
	}
	if c.MaxPositions > 0 && maxPrompt+opt.MaxNewTokens > c.MaxPositions {
		return 0, fmt.Errorf("sample: %d prompt + %d new tokens exceed the model's %d positions", maxPrompt, opt.MaxNewTokens, c.MaxPositions)
	}
	if c.SlidingWindow > 0 && maxPrompt+opt.MaxNewTokens > c.SlidingWindow {
		// Within the window, sliding-window attention is full causal attention, which is what
		// the decoders compute; a longer generation would need the window in their caches.
		return 0, fmt.Errorf("sample: %d prompt + %d new tokens exceed the model's sliding attention window of %d (not supported in generation)",
			maxPrompt, opt.MaxNewTokens, c.SlidingWindow)
	}
	return maxPrompt, nil
}

// generateGraph is Generate with a compiled graph per prefill and decode step (s.mu held).
func (s *Sampler) generateGraph(prompts [][]int32, opt SampleOptions, maxPrompt int) ([]Sample, error) {
	g := s.newGraphDecode(prompts, opt, maxPrompt)
	if 2*g.layers*g.rows*g.kvh*g.capacity*g.hd*4 > s.keptCacheBytes {
		defer func() { s.kCache, s.vCache = nil, nil }()
	}
	if err := g.prefill(prompts); err != nil {
		return nil, err
	}
	c := s.m.Config
	stops := newStopSet(opt.StopTokens, c.VocabSize)
	rng := rand.New(rand.NewPCG(opt.Seed, samplerSeed))
	res := make([]Sample, g.rows)
	done := make([]bool, g.rows)
	next := make([]int32, g.rows)
	scratch := make([]*sampleScratch, g.rows)
	for r := range scratch {
		scratch[r] = newSampleScratch(c.VocabSize)
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	for step := 0; ; step++ {
		// The log-softmax of each row's logits, in parallel; then the draws, in row order, so
		// that the random stream is used as with one row at a time.
		parallelFor(workers, g.rows, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				if !done[r] {
					scratch[r].prepare(g.logits[r*c.VocabSize:(r+1)*c.VocabSize], opt)
				}
			}
		})
		active := 0
		for r := range g.rows {
			if done[r] {
				continue
			}
			tok, lp := scratch[r].choose(opt, rng)
			res[r].Tokens = append(res[r].Tokens, tok)
			res[r].LogProbs = append(res[r].LogProbs, lp)
			next[r] = tok
			if stops.has(tok) {
				res[r].Stopped = true
				done[r] = true
			} else if len(res[r].Tokens) >= opt.MaxNewTokens {
				done[r] = true
			} else {
				active++
			}
		}
		if active == 0 {
			return res, nil
		}
		if err := g.decode(step, next, done); err != nil {
			return nil, err
		}
	}
}

// graphDecode is the state of one Generate call on the compiled prompt and decode graphs: the
// rows left-padded to a common prompt bucket p, the host key/value caches of capacity slots that
// every step passes to the decode graph, and the last logits of every row.
type graphDecode struct {
	s                                  *Sampler
	rows, p, capacity, kvh, hd, layers int
	pad                                int32
	padCount                           []int // each row's left padding
	// Host cache per layer: keys [B,kvh,capacity,hd], values transposed [B,kvh,hd,capacity].
	kCache, vCache [][]float32
	logits         []float32 // [rows, vocab]: the logits of each row's last position
	out            []*tensors.Tensor
	// The decode step's inputs, reused from step to step.
	stepTok, stepPos []int32
	stepBias         []float32
	selfBias         *tensors.Tensor
}

func (s *Sampler) newGraphDecode(prompts [][]int32, opt SampleOptions, maxPrompt int) *graphDecode {
	c := s.m.Config
	rows := len(prompts)
	p := BucketLength(maxPrompt)
	g := &graphDecode{s: s, rows: rows, p: p, capacity: BucketLength(p + opt.MaxNewTokens),
		kvh: c.KVHeads, hd: c.HeadDim(), layers: c.Layers, pad: int32(max(c.PAD, 0)), padCount: make([]int, rows)}
	for r, pr := range prompts {
		g.padCount[r] = p - len(pr)
	}
	g.kCache, g.vCache = s.caches(g.layers, rows*g.kvh*g.capacity*g.hd, true)
	g.logits = make([]float32, rows*c.VocabSize)
	g.stepTok = make([]int32, rows)
	g.stepPos = make([]int32, rows)
	g.stepBias = make([]float32, rows*g.capacity)
	g.selfBias = tensors.FromFlatDataAndDimensions(make([]float32, rows), rows, 1, 1) // a token sees itself
	return g
}

// prefill runs the prompts through the prompt graph: each attends to itself causally, pads
// masked; a one-slot dummy past is fully masked (a zero-length axis is avoided).
func (g *graphDecode) prefill(prompts [][]int32) error {
	rows, p := g.rows, g.p
	tokens := make([]int32, rows*p)
	positions := make([]int32, rows*p)
	for r, pr := range prompts {
		for t := range p {
			tokens[r*p+t] = g.pad
			if t >= g.padCount[r] {
				tokens[r*p+t] = pr[t-g.padCount[r]]
				positions[r*p+t] = int32(t - g.padCount[r])
			}
		}
	}
	bias := make([]float32, rows*p*p)
	dummyBias := make([]float32, rows*p)
	for r := range rows {
		for t := range p {
			dummyBias[r*p+t] = maskValue
			row := bias[(r*p+t)*p:]
			for k := range p {
				if k > t || k < g.padCount[r] {
					row[k] = maskValue
				}
			}
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(tokens, rows, p), tensors.FromFlatDataAndDimensions(positions, rows, p),
		tensors.FromFlatDataAndDimensions(bias, rows, p, p), tensors.FromFlatDataAndDimensions(dummyBias, rows, p, 1)}
	for range g.layers {
		args = append(args, tensors.FromShape(shapes.Make(dtypes.Float32, rows, g.kvh, 1, g.hd)))
	}
	for range g.layers {
		args = append(args, tensors.FromShape(shapes.Make(dtypes.Float32, rows, g.kvh, g.hd, 1)))
	}
	var err error
	if g.out, err = g.s.exec.Exec(args...); err != nil {
		return fmt.Errorf("sample: prefill: %w", err)
	}
	return g.take(0, p)
}

// decode runs one decode step: each row's token next[r] (pad for finished rows) at cache slot
// p+step.
func (g *graphDecode) decode(step int, next []int32, done []bool) error {
	rows, capacity := g.rows, g.capacity
	slot := g.p + step
	for r := range rows {
		g.stepTok[r] = g.pad
		if !done[r] {
			g.stepTok[r] = next[r]
		}
		g.stepPos[r] = int32(slot - g.padCount[r])
	}
	for r := range rows {
		row := g.stepBias[r*capacity : (r+1)*capacity]
		for k := range capacity {
			row[k] = 0
			if k < g.padCount[r] || k >= slot {
				row[k] = maskValue
			}
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(g.stepTok, rows, 1), tensors.FromFlatDataAndDimensions(g.stepPos, rows, 1),
		g.selfBias, tensors.FromFlatDataAndDimensions(g.stepBias, rows, 1, capacity)}
	for l := range g.layers {
		args = append(args, tensors.FromFlatDataAndDimensions(g.kCache[l], rows, g.kvh, capacity, g.hd))
	}
	for l := range g.layers {
		args = append(args, tensors.FromFlatDataAndDimensions(g.vCache[l], rows, g.kvh, g.hd, capacity))
	}
	var err error
	if g.out, err = g.s.exec.Exec(args...); err != nil {
		return fmt.Errorf("sample: decode step %d: %w", step, err)
	}
	return g.take(slot, 1)
}

// take copies the n new positions of the last graph's outputs, starting at cache slot at, into
// the host caches, and its logits.
func (g *graphDecode) take(at, n int) error {
	hd, capacity := g.hd, g.capacity
	for l := range g.layers {
		err := tensors.ConstFlatData(g.out[1+l], func(src []float32) {
			for blk := range g.rows * g.kvh {
				copy(g.kCache[l][(blk*capacity+at)*hd:(blk*capacity+at+n)*hd], src[blk*n*hd:(blk+1)*n*hd])
			}
		})
		if err != nil {
			return fmt.Errorf("sample: %w", err)
		}
		err = tensors.ConstFlatData(g.out[1+g.layers+l], func(src []float32) {
			for row := range g.rows * g.kvh * hd { // one (batch, head, dim) row of n positions
				copy(g.vCache[l][row*capacity+at:row*capacity+at+n], src[row*n:(row+1)*n])
			}
		})
		if err != nil {
			return fmt.Errorf("sample: %w", err)
		}
	}
	if err := tensors.ConstFlatData(g.out[0], func(src []float32) { copy(g.logits, src) }); err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	return nil
}

// sampleScratch holds the buffers of one row's token choice. The distribution is computed in
// float32, as the logits are: each token's e^(logit/T − max) rounded to float32, their sums in
// float64 (exact to float32 rounding; float64 exponentials over a 151,936-token vocabulary
// cost about 2.4 ms a row and step, more than the decode step's own work at small batches).
type sampleScratch struct {
	logits []float32 // the row's logits (prepare's argument, read by choose)
	temp   float32   // the temperature the logits are divided by (1 when greedy)
	exps   []float32 // e^(logit/T − mx)
	blocks []float64 // blocks[b]: Σ exps over block b of sampleBlock tokens, summed in order
	sum    float64   // Σ blocks
	mx     float32   // max logit/T
	logSum float64   // log(sum)
	best   int       // the most likely token (the first of equals)
	order  []int
}

// sampleBlock is the number of tokens per partial sum of the draw's search: a draw walks the
// block sums, then one block, instead of the whole vocabulary.
const sampleBlock = 256

func newSampleScratch(vocab int) *sampleScratch {
	return &sampleScratch{exps: make([]float32, vocab), blocks: make([]float64, (vocab+sampleBlock-1)/sampleBlock)}
}

// prepare computes the softmax of logits/temperature (of logits when greedy) in float32,
// unnormalised (exps, with their block sums and total), for choose.
func (sc *sampleScratch) prepare(logits []float32, opt SampleOptions) {
	sc.logits, sc.temp = logits, 1
	if opt.Temperature != 0 {
		sc.temp = float32(opt.Temperature)
	}
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	// Division by a positive temperature is monotone, so the largest logit gives the
	// largest scaled value.
	sc.best, sc.mx = best, logits[best]/sc.temp
	exps := sc.exps[:len(logits)]
	softmaxExps(exps, logits, sc.temp, sc.mx)
	sum := 0.0
	for b := range sc.blocks {
		part := 0.0
		for _, e := range exps[b*sampleBlock : min((b+1)*sampleBlock, len(exps))] {
			part += float64(e)
		}
		sc.blocks[b] = part
		sum += part
	}
	sc.sum, sc.logSum = sum, math.Log(sum)
}

// softmaxExps sets exps[i] = e^(logits[i]/temp − mx) in float32 (mx ≥ every logits[i]/temp),
// four at a time through the exponential's polynomial (see expPoly4); values below −87 (all
// but nothing of the probability mass) through cpu.Exp32.
func softmaxExps(exps, logits []float32, temp, mx float32) {
	exps, n := exps[:len(logits)], len(logits)
	i := 0
	for ; i+4 <= n; i += 4 {
		x0, x1, x2, x3 := logits[i]/temp-mx, logits[i+1]/temp-mx, logits[i+2]/temp-mx, logits[i+3]/temp-mx
		if !(x0 >= -87 && x1 >= -87 && x2 >= -87 && x3 >= -87) {
			exps[i], exps[i+1], exps[i+2], exps[i+3] = cpu.Exp32(x0), cpu.Exp32(x1), cpu.Exp32(x2), cpu.Exp32(x3)
			continue
		}
		exps[i], exps[i+1], exps[i+2], exps[i+3] = expPoly4(x0, x1, x2, x3)
	}
	for ; i < n; i++ {
		exps[i] = cpu.Exp32(logits[i]/temp - mx)
	}
}

// logProb is the log-probability of token id under the untruncated distribution.
func (sc *sampleScratch) logProb(id int) float32 {
	return float32(float64(sc.logits[id]/sc.temp) - float64(sc.mx) - sc.logSum)
}

// choose draws the token from the distribution prepare computed, truncated by top-k and
// top-p: probabilities are exps/sum, compared without the division.
func (sc *sampleScratch) choose(opt SampleOptions, rng *rand.Rand) (int32, float32) {
	best := sc.best
	if opt.Temperature == 0 {
		return int32(best), sc.logProb(best)
	}
	truncate := (opt.TopK > 0 && opt.TopK < len(sc.logits)) || (opt.TopP > 0 && opt.TopP < 1)
	if !truncate {
		// The first token whose cumulative sum exceeds u: whole blocks first, then the
		// block's tokens summed in the order their block sum was, so that the search always
		// ends in the block it entered.
		u := rng.Float64() * sc.sum
		for b, part := range sc.blocks {
			if u >= part {
				u -= part
				continue
			}
			lo := b * sampleBlock
			acc := 0.0
			for id, e := range sc.exps[lo:min(lo+sampleBlock, len(sc.logits))] {
				if acc += float64(e); u < acc {
					return int32(lo + id), sc.logProb(lo + id)
				}
			}
		}
		return int32(best), sc.logProb(best) // rounding left u ≥ sum: take the mode
	}
	// Candidates sorted by probability (ties by id, for determinism), truncated by top-k and top-p.
	if len(sc.order) != len(sc.logits) {
		sc.order = make([]int, len(sc.logits))
	}
	for i := range sc.order {
		sc.order[i] = i
	}
	slices.SortFunc(sc.order, func(a, b int) int {
		if la, lb := sc.logits[a], sc.logits[b]; la != lb {
			if la > lb {
				return -1
			}
			return 1
		}
		return a - b
	})
	n := len(sc.order)
	if opt.TopK > 0 && opt.TopK < n {
		n = opt.TopK
	}
	if opt.TopP > 0 && opt.TopP < 1 {
		cum, target := 0.0, opt.TopP*sc.sum
		for i := range n {
			cum += float64(sc.exps[sc.order[i]])
			if cum >= target {
				n = i + 1
				break
			}
		}
	}
	total := 0.0
	for _, id := range sc.order[:n] {
		total += float64(sc.exps[id])
	}
	u := rng.Float64() * total
	chosen := sc.order[n-1]
	for _, id := range sc.order[:n] {
		u -= float64(sc.exps[id])
		if u < 0 {
			chosen = id
			break
		}
	}
	return int32(chosen), sc.logProb(chosen)
}
