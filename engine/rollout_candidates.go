package engine

import (
	"fmt"
	"math/rand/v2"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/rollout"
)

// candidateActions builds AggreVaTe's states (Ross & Bagnell, 2014): for each of
// rollout_batch_size × n_samples_per_prompt student rollouts, a state is the
// prompt plus a prefix of the student's completion cut at a uniformly drawn
// position; aggrevate_candidates actions are sampled from the student there;
// the teacher completes each greedily, and the task reward of the completed
// answer is the action's reward-to-go. Each state is a group of k rows with
// mask 1 on the action token, which train together.
type candidateActions struct{ k int }

func (s candidateActions) unit() int { return s.k }

func (s candidateActions) generate(g *rolloutGen, _ int, seed uint64) (*batch, error) {
	if g.teacher == nil {
		return nil, fmt.Errorf("aggrevate needs a teacher role (init: teacher)")
	}
	k := g.rec.Knobs
	K := s.k
	exs, err := tasks.ForKind(g.feed.next(k.RolloutBatchSize), tasks.KindRL)
	if err != nil {
		return nil, err
	}
	n := max(k.NSamplesPerPrompt, 1)
	var prompts [][]int32
	var owners []tasks.Example
	for _, ex := range exs {
		p := g.enc.prompt(ex.Prompt)
		for range n {
			prompts = append(prompts, p)
			owners = append(owners, ex)
		}
	}
	rolls, err := g.sampler.Generate(prompts, g.sampleOptions(seed, false))
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0xa99e))
	var prefixes [][]int32
	var cuts []int
	for i, s := range rolls {
		t := rng.IntN(len(s.Tokens)) // the action replaces token t (an empty prefix when t = 0)
		prefixes = append(prefixes, append(append([]int32{}, prompts[i]...), s.Tokens[:t]...))
		cuts = append(cuts, t)
	}
	var candPrompts [][]int32
	for _, p := range prefixes {
		for range K {
			candPrompts = append(candPrompts, p)
		}
	}
	opt := g.sampleOptions(seed^0xca4d, false)
	opt.MaxNewTokens = 1
	cands, err := g.sampler.Generate(candPrompts, opt)
	if err != nil {
		return nil, fmt.Errorf("candidate actions: %w", err)
	}
	// The teacher completes every prefix + action that did not stop.
	var contPrompts [][]int32
	var contOf []int
	for j, c := range cands {
		rest := k.MaxNewTokens - cuts[j/K] - 1
		if rest > 0 && !c.Stopped {
			contPrompts = append(contPrompts, append(append([]int32{}, candPrompts[j]...), c.Tokens[0]))
			contOf = append(contOf, j)
		}
	}
	conts := make([][]int32, len(cands))
	if len(contPrompts) > 0 {
		copt := g.sampleOptions(seed, true)
		copt.MaxNewTokens = max(k.MaxNewTokens-1, 1)
		outs, err := g.teacher.Generate(contPrompts, copt)
		if err != nil {
			return nil, fmt.Errorf("teacher completion: %w", err)
		}
		for i, o := range outs {
			j := contOf[i]
			conts[j] = o.Tokens[:min(len(o.Tokens), k.MaxNewTokens-cuts[j/K]-1)]
		}
	}
	b := newRows()
	out := &batch{metrics: map[string]float64{}}
	texts := make([]string, len(cands))
	of := make([]tasks.Example, len(cands))
	for j, c := range cands {
		s := j / K
		answer := append(append(append([]int32{}, rolls[s].Tokens[:cuts[s]]...), c.Tokens[0]), conts[j]...)
		texts[j], of[j] = g.tok.Decode(answer), owners[s]
	}
	rews, oks, err := g.reward.ScoreBatch(texts, of)
	if err != nil {
		return nil, err
	}
	for j, c := range cands {
		s := j / K
		ex := owners[s]
		ex.ID = fmt.Sprintf("%s#%d", ex.ID, s) // one group per state
		row := b.add(prefixes[s], c.Tokens[:1], ex, g.role)
		text := texts[j]
		rew, ok := rews[j], oks[j]
		b.r.Reward[row] = rew
		b.setRow(rollout.KeyIsCorrect, row, map[bool]float64{true: 1}[ok || rew >= k.CorrectThreshold])
		out.completions = append(out.completions, text)
		out.genTokens += 1 + len(conts[j])
	}
	for _, r := range rolls {
		out.genTokens += len(r.Tokens)
	}
	out.data, out.exs = b.r, b.exs
	if err := out.data.Validate(); err != nil {
		return nil, fmt.Errorf("rollout data: %w", err)
	}
	return out, nil
}
