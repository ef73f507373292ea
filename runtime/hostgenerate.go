package runtime

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"unsafe"
)

// Generation on the host decoder (the CPU backends). Each sequence has its own cache, unpadded;
// a prompt is prefilled once however many rows repeat it (a GRPO group's n samples of one
// prompt), and its keys and values copied to the others; a row leaves the decode batch at its
// stop token or length limit. Every row's numbers depend only on its own tokens (the decode
// products go through rowMatMul, a prompt is prefilled on its own), so its sample is the one it
// would get alone with the same draws.

// samplerSeed is the second word of the PCG seed of every sampling stream ("STXSAMPL").
const samplerSeed = 0x53545853414d504c

// hostRow is one sequence being sampled on the host.
type hostRow struct {
	seq *hostSeq
	res Sample
}

// take records the token drawn and says whether the row is finished: it drew a stop token or
// reached max new tokens.
func (r *hostRow) take(tok int32, lp float32, opt *SampleOptions, stops stopSet) bool {
	r.res.Tokens = append(r.res.Tokens, tok)
	r.res.LogProbs = append(r.res.LogProbs, lp)
	if stops.has(tok) {
		r.res.Stopped = true
		return true
	}
	return len(r.res.Tokens) >= opt.MaxNewTokens
}

// ensureHost makes s.host hold the model's current weights (s.mu held).
func (s *Sampler) ensureHost() error {
	if s.host == nil {
		s.host = new(hostDecoder)
	}
	if !s.host.current(s.m) {
		if err := s.host.load(s.m); err != nil {
			return fmt.Errorf("sample: %w", err)
		}
	}
	return nil
}

// prefillHost runs each prompt into its sequence (empty), all together in calls of at most
// s.prefillTokens token rows (a prompt may span two calls), which bound the decoder's scratch
// memory, and copies each prompt's last logits to dst[i] [vocab] (s.mu held, s.host current).
// Every token row's results depend on its own sequence alone (see hostDecoder.step), so how
// the prompts are packed into calls changes nothing.
func (s *Sampler) prefillHost(seqs []*hostSeq, prompts [][]int32, dst [][]float32) {
	V := s.m.Config.VocabSize
	span := max(1, s.prefillTokens)
	var call []*hostSeq
	var counts, ends []int // ends[i]: the prompt whose last token is in the call at i, or -1
	var tokens []int32
	var logits []float32
	flush := func() {
		logits = grow(logits, len(call)*V)
		s.host.step(call, counts, tokens, logits)
		for i, j := range ends {
			if j >= 0 {
				copy(dst[j], logits[i*V:(i+1)*V])
			}
		}
		call, counts, ends, tokens = call[:0], counts[:0], ends[:0], tokens[:0]
	}
	for j, p := range prompts {
		for done := 0; done < len(p); {
			if len(tokens) == span {
				flush()
			}
			take := min(span-len(tokens), len(p)-done)
			call, counts, tokens = append(call, seqs[j]), append(counts, take), append(tokens, p[done:done+take]...)
			done += take
			end := -1
			if done == len(p) {
				end = j
			}
			ends = append(ends, end)
		}
	}
	if len(tokens) > 0 {
		flush()
	}
}

// promptKey is a map key holding the prompt's tokens.
func promptKey(p []int32) string {
	return string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p))), 4*len(p)))
}

// generateHost is Generate on the host decoder (s.mu held, prompts and options checked).
// The draws use one random stream in row order at each step, as the graph decode does.
func (s *Sampler) generateHost(prompts [][]int32, opt SampleOptions) ([]Sample, error) {
	if err := s.ensureHost(); err != nil {
		return nil, err
	}
	c := s.m.Config
	V, hd, kvh := c.VocabSize, c.HeadDim(), c.KVHeads
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	rows, capacity := len(prompts), longest+opt.MaxNewTokens
	// Every row's cache in the kept storage; a slot is read only after the row wrote it, so
	// what an earlier call left there does not matter and is not cleared.
	size := kvh * capacity * hd
	kBuf, vBuf := s.caches(c.Layers, rows*size, false)
	if 2*c.Layers*rows*size*4 > s.keptCacheBytes {
		defer func() { s.kCache, s.vCache = nil, nil }()
	}
	rs := make([]hostRow, rows)
	for r := range rs {
		q := &hostSeq{k: make([][]float32, c.Layers), v: make([][]float32, c.Layers), capacity: capacity}
		for l := range q.k {
			q.k[l], q.v[l] = kBuf[l][r*size:(r+1)*size], vBuf[l][r*size:(r+1)*size]
		}
		rs[r].seq = q
	}
	logits := make([]float32, rows*V)
	// Each distinct prompt is prefilled once; the rows that repeat it copy its keys, values
	// and logits.
	first := make(map[string]int, rows)
	var useqs []*hostSeq
	var uprompts [][]int32
	var udst [][]float32
	for r, p := range prompts {
		if _, ok := first[promptKey(p)]; !ok {
			first[promptKey(p)] = r
			useqs, uprompts = append(useqs, rs[r].seq), append(uprompts, p)
			udst = append(udst, logits[r*V:(r+1)*V])
		}
	}
	s.prefillHost(useqs, uprompts, udst)
	for r, p := range prompts {
		if src := first[promptKey(p)]; src != r {
			rs[r].seq.copyPrefix(rs[src].seq, hd, len(p))
			copy(logits[r*V:(r+1)*V], logits[src*V:(src+1)*V])
		}
	}

	stops := newStopSet(opt.StopTokens, V)
	rng := rand.New(rand.NewPCG(opt.Seed, samplerSeed))
	active := make([]*hostRow, rows) // the rows still decoding, in row order; row i's logits at logits[i·V:]
	for r := range rs {
		active[r] = &rs[r]
	}
	scratch := make([]*sampleScratch, rows)
	workers := max(1, runtime.GOMAXPROCS(0))
	var seqs []*hostSeq
	var tokens []int32
	for {
		// The log-softmax of each row's logits, in parallel; then the draws, in row order, so
		// that the random stream is used as with one row at a time.
		parallelFor(workers, len(active), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				if scratch[i] == nil {
					scratch[i] = newSampleScratch(V)
				}
				scratch[i].prepare(logits[i*V:(i+1)*V], opt)
			}
		})
		seqs, tokens = seqs[:0], tokens[:0]
		kept := active[:0]
		for i, row := range active {
			tok, lp := scratch[i].choose(opt, rng)
			if row.take(tok, lp, &opt, stops) {
				continue
			}
			kept = append(kept, row)
			seqs, tokens = append(seqs, row.seq), append(tokens, tok)
		}
		if active = kept; len(active) == 0 {
			break
		}
		s.host.step(seqs, nil, tokens, logits[:len(active)*V])
	}
	res := make([]Sample, rows)
	for r := range rs {
		res[r] = rs[r].res
	}
	return res, nil
}
