package serve

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"stx.dev/stx/runtime"
)

// sampling is one request's sampling parameters, whichever API they came from.
type sampling struct {
	maxNew      int
	temperature float64
	topP        float64
	topK        int
	n           int
	stopTokens  []int32  // the request's own stop ids, besides the model's
	stopStrings []string // cut a sample after the token that completes one
	ignoreEOS   bool     // the model's stop ids do not end a sample
	seed        *uint64  // nil: a random seed per sample
	// scorePrompt asks for the prompt's log-probs (completion.promptLogprobs).
	scorePrompt bool
	// topN > 0 asks for the topN most likely tokens of each completion position
	// (completion.top) and, when topFrom ≥ 0, of the prompt positions from topFrom
	// (completion.promptTop); toplogprobs.go.
	topN, topFrom int
}

// completion is one finished sample.
type completion struct {
	tokens   []int32
	logprobs []float32
	text     string // decoded, cut before a stop string; "" without a tokenizer
	finish   finishReason
	// promptLogprobs[t] is log p(prompt[t+1] | prompt[≤t]) under the model (temperature 1),
	// when the request asked for them.
	promptLogprobs []float32
	// top[t] are the most likely tokens where tokens[t] was sampled; promptTop[t] those of
	// prompt position topFrom+t (nil for position 0, which nothing predicts).
	top, promptTop [][]alt
}

// finishReason says why a sample ended.
type finishReason struct {
	length bool   // hit max new tokens
	token  int32  // the stop token that ended it (when !length and str == "")
	str    string // the stop string that ended it
	// requested: the stop token is one of the request's stop ids, not one of the model's.
	requested bool
}

// maxSamples bounds the samples of one request (prompts × n).
const maxSamples = 4096

// complete samples sps[i].n continuations of each prompt i, prompt-major, all with the same
// weights, and returns them with the version of those weights.
func (s *Server) complete(ctx context.Context, prompts [][]int32, sps []sampling) ([]completion, string, error) {
	if len(prompts) == 0 {
		return nil, "", badRequest("no prompt was given")
	}
	total := 0
	for i := range prompts {
		if err := s.check(i, prompts[i], sps[i]); err != nil {
			return nil, "", err
		}
		total += sps[i].n
	}
	if total > maxSamples {
		return nil, "", badRequest("%d samples in one request: more than %d", total, maxSamples)
	}
	eng, version, release, err := s.acquire()
	if err != nil {
		return nil, "", err
	}
	defer release()
	if seed, ok := oneSeededBatch(sps); ok {
		out, err := s.completeSeeded(eng, prompts, sps, seed)
		if err != nil {
			return nil, "", err
		}
		return out, version, nil
	}
	out := make([]completion, total)
	errs := make([]error, total)
	var wg sync.WaitGroup
	k := 0
	for i, p := range prompts {
		sp := sps[i]
		stops := s.stopSet(sp)
		for range sp.n {
			at := k
			k++
			if sp.maxNew == 0 {
				out[at].finish.length = true
				continue
			}
			opt := runtime.SampleOptions{MaxNewTokens: sp.maxNew, Temperature: sp.temperature, TopP: sp.topP, TopK: sp.topK, StopTokens: stops}
			if sp.seed != nil {
				// Row at (prompt-major, counting the n samples of each prompt) draws with seed
				// + at: repeated prompts in one request (a group of rollouts) differ.
				opt.Seed = *sp.seed + uint64(at)
			} else {
				opt.Seed = rand.Uint64()
			}
			wg.Go(func() {
				smp, err := eng.gen.Generate(ctx, p, opt)
				if err != nil {
					errs[at] = err
					return
				}
				out[at] = s.finish(smp, sp)
			})
		}
	}
	// The prompts' log-probs, in one forward pass while the samples decode.
	promptLPs, scoreErr := scorePrompts(eng, prompts, sps)
	wg.Wait()
	if scoreErr != nil {
		return nil, "", scoreErr
	}
	for _, err := range errs {
		if err != nil {
			return nil, "", err
		}
	}
	k = 0
	for i, sp := range sps {
		for range sp.n {
			out[k].promptLogprobs = promptLPs[i]
			k++
		}
	}
	if err := s.addTops(eng, prompts, sps, out); err != nil {
		return nil, "", err
	}
	return out, version, nil
}

// addTops adds the top-N log-probs to the completions (prompt-major) whose request asked
// for them, on eng's weights, which sampled them.
func (s *Server) addTops(eng *engine, prompts [][]int32, sps []sampling, out []completion) error {
	k := 0
	for i, sp := range sps {
		p := prompts[i]
		for range sp.n {
			c := &out[k]
			k++
			if sp.topN <= 0 {
				continue
			}
			from := len(p)
			if sp.topFrom >= 0 {
				from = sp.topFrom
			}
			seq := append(append(make([]int32, 0, len(p)+len(c.tokens)), p...), c.tokens...)
			temp := func(t int) float64 {
				if t < len(p) {
					return 1 // the prompt's log-probs are the model's
				}
				return sp.temperature
			}
			tops, err := eng.topLogprobs(s.opt.Backend, seq, from, sp.topN, temp)
			if err != nil {
				return err
			}
			if sp.topFrom >= 0 {
				if from == 0 {
					c.promptTop = append(c.promptTop, nil)
				}
				c.promptTop = append(c.promptTop, tops[:len(p)-max(from, 1)]...)
			}
			c.top = tops[len(tops)-len(c.tokens):]
		}
	}
	return nil
}

// oneSeededBatch reports whether a request samples as one seeded batch: every prompt carries the
// same sampling_seed and the same options (n aside) and asks for new tokens. Such a request is
// decoded by one Sampler.Generate call with that seed over its rows (prompt-major, each prompt
// repeated n times), which is what stx run's in-process sampler computes for the same rows and
// seed: a run whose rollouts come from stx serve then samples exactly what it would sample
// itself (docs/serve.md). Other requests go through the generator, each row with its own stream.
func oneSeededBatch(sps []sampling) (uint64, bool) {
	first := sps[0]
	if first.seed == nil {
		return 0, false
	}
	for _, sp := range sps {
		if sp.seed == nil || *sp.seed != *first.seed || sp.maxNew == 0 || sp.maxNew != first.maxNew ||
			sp.temperature != first.temperature || sp.topP != first.topP || sp.topK != first.topK ||
			sp.ignoreEOS != first.ignoreEOS || !slices.Equal(sp.stopTokens, first.stopTokens) {
			return 0, false
		}
	}
	return *first.seed, true
}

// completeSeeded samples a oneSeededBatch request in one Sampler.Generate call.
func (s *Server) completeSeeded(eng *engine, prompts [][]int32, sps []sampling, seed uint64) ([]completion, error) {
	var rows [][]int32
	for i, p := range prompts {
		for range sps[i].n {
			rows = append(rows, p)
		}
	}
	sp := sps[0]
	opt := runtime.SampleOptions{MaxNewTokens: sp.maxNew, Temperature: sp.temperature, TopP: sp.topP, TopK: sp.topK,
		StopTokens: s.stopSet(sp), Seed: seed}
	promptLPs, err := scorePrompts(eng, prompts, sps)
	if err != nil {
		return nil, err
	}
	samples, err := eng.sampler.Generate(rows, opt)
	if err != nil {
		return nil, err
	}
	out := make([]completion, 0, len(rows))
	k := 0
	for i, sp := range sps {
		for range sp.n {
			c := s.finish(samples[k], sp)
			c.promptLogprobs = promptLPs[i]
			out = append(out, c)
			k++
		}
	}
	if err := s.addTops(eng, prompts, sps, out); err != nil {
		return nil, err
	}
	return out, nil
}

// scorePrompts returns the log-probs of each prompt that asked for them (nil for the others).
func scorePrompts(eng *engine, prompts [][]int32, sps []sampling) ([][]float32, error) {
	out := make([][]float32, len(prompts))
	var seqs [][]int32
	var which []int
	for i, sp := range sps {
		if sp.scorePrompt {
			seqs, which = append(seqs, prompts[i]), append(which, i)
		}
	}
	if len(seqs) == 0 {
		return out, nil
	}
	scored, err := eng.scorer.Score(seqs)
	if err != nil {
		return nil, err
	}
	for k, i := range which {
		out[i] = scored[k].LogProbs
	}
	return out, nil
}

// repeat is n copies of sp, for requests whose prompts share their parameters.
func repeat(sp sampling, n int) []sampling {
	out := make([]sampling, n)
	for i := range out {
		out[i] = sp
	}
	return out
}

// check validates prompt i and its parameters against the model before anything is queued.
func (s *Server) check(i int, p []int32, sp sampling) error {
	c := s.cfg
	switch {
	case sp.n < 1:
		return badRequest("n must be at least 1, got %d", sp.n)
	case sp.n > maxSamples:
		return badRequest("n is %d: more than %d samples in one request", sp.n, maxSamples)
	case sp.maxNew < 0:
		return badRequest("the number of new tokens must be ≥ 0, got %d", sp.maxNew)
	case sp.temperature < 0:
		return badRequest("temperature must be ≥ 0, got %g", sp.temperature)
	case sp.topP <= 0 || sp.topP > 1:
		return badRequest("top_p must be in (0, 1], got %g", sp.topP)
	case sp.topK < 0:
		return badRequest("top_k must be -1, 0 (off) or positive, got %d", sp.topK)
	}
	for _, id := range sp.stopTokens {
		if id < 0 || int(id) >= c.VocabSize {
			return badRequest("stop token id %d is outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	if len(sp.stopStrings) > 0 && s.opt.Tokenizer == nil {
		return badRequest("stop strings need a tokenizer, and this model has none; use stop token ids")
	}
	if len(p) == 0 {
		return badRequest("prompt %d is empty", i)
	}
	for _, id := range p {
		if id < 0 || int(id) >= c.VocabSize {
			return badRequest("prompt %d has token id %d outside the vocabulary [0, %d)", i, id, c.VocabSize)
		}
	}
	if limit := contextLimit(c); limit > 0 && len(p)+sp.maxNew > limit {
		return badRequest("this model's maximum context length is %d tokens; prompt %d has %d tokens and %d new tokens were requested (%d in all)",
			limit, i, len(p), sp.maxNew, len(p)+sp.maxNew)
	}
	return nil
}

// contextLimit is the longest prompt plus generation the sampler takes (0: no limit).
func contextLimit(c runtime.Config) int {
	limit := c.MaxPositions
	if c.SlidingWindow > 0 && (limit == 0 || c.SlidingWindow < limit) {
		limit = c.SlidingWindow // generation past the window is not supported (runtime.Sampler)
	}
	return limit
}

// stopSet is the sorted ids that end a sample: the model's (unless ignore_eos) and the request's.
func (s *Server) stopSet(sp sampling) []int32 {
	var ids []int32
	if !sp.ignoreEOS {
		ids = append(ids, s.opt.StopTokens...)
	}
	ids = append(ids, sp.stopTokens...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// finish turns a sample into a completion: the finish reason, the text, and the cut after a
// stop string.
func (s *Server) finish(smp runtime.Sample, sp sampling) completion {
	c := completion{tokens: smp.Tokens, logprobs: smp.LogProbs}
	if smp.Stopped && len(smp.Tokens) > 0 {
		last := smp.Tokens[len(smp.Tokens)-1]
		c.finish.token = last
		c.finish.requested = slices.Contains(sp.stopTokens, last) && (sp.ignoreEOS || !slices.Contains(s.opt.StopTokens, last))
	} else {
		c.finish.length = true
	}
	tok := s.opt.Tokenizer
	if tok == nil {
		return c
	}
	c.text = tok.Decode(c.tokens)
	if len(sp.stopStrings) == 0 || !containsAny(c.text, sp.stopStrings) {
		return c
	}
	// The first token whose text completes a stop string ends the sample; the text stops
	// before the stop string (vLLM's include_stop_str_in_output false, SGLang's default trim).
	for k := range c.tokens {
		text := tok.Decode(c.tokens[:k+1])
		at, str := -1, ""
		for _, st := range sp.stopStrings {
			if i := strings.Index(text, st); i >= 0 && (at < 0 || i < at) {
				at, str = i, st
			}
		}
		if at >= 0 {
			c.tokens, c.logprobs = c.tokens[:k+1], c.logprobs[:k+1]
			c.text = text[:at]
			c.finish = finishReason{str: str}
			break
		}
	}
	return c
}

func containsAny(text string, subs []string) bool {
	for _, s := range subs {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}
