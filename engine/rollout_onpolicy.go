package engine

import (
	"fmt"
	"math"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
)

// onPolicy samples n_samples_per_prompt completions per prompt, scores them
// and applies rejection / dynamic sampling (DAPO, Yu et al., 2025). A failed
// generation is retried rollout_retries times before the run fails. Its
// sampling says who completes the prompts (the role itself unless the
// contract lets the teacher sample); greedyBaseline adds the reward of a
// greedy completion of each prompt, for estimators that need it.
type onPolicy struct {
	sampling       sampling
	greedyBaseline bool
}

func (onPolicy) unit() int { return 1 }

func (s onPolicy) generate(g *rolloutGen, id int, seed uint64) (*batch, error) {
	k := g.rec.Knobs
	// Dynamic sampling generates until the train batch is full; without it,
	// min_partial_solve_tasks still accumulates batches until enough tasks are
	// partially solved (docs/ALGORITHMS.md §G step 4). Either way at most
	// max_num_gen_batches batches (0: no cap, as documented).
	dynamic := k.DynamicSampling || k.MinPartialSolveTasks > 0
	filter := k.FilterUniformGroups || k.MinTrajsPerGroup > 1 || k.MinPartialSolveTasks > 0
	cfg := estimators.RejectionConfig{MinTrajsPerGroup: max(k.MinTrajsPerGroup, 1), FilterUniformGroups: k.FilterUniformGroups,
		UniformTol: 1e-8, MinPartialSolveTasks: k.MinPartialSolveTasks}
	if dynamic {
		cfg.MaxGenBatches = k.MaxNumGenBatches
	}
	if k.DynamicSampling {
		cfg.TrainBatchGroups = k.RolloutBatchSize
	}
	var acc *estimators.Accumulator
	if dynamic {
		var err error
		if acc, err = estimators.NewAccumulator(cfg); err != nil {
			return nil, fmt.Errorf("dynamic sampling: %w", err)
		}
	}
	var parts []*batch
	byTask := map[string][]int{} // task id → rows across parts
	offset := 0
	for gen := 0; ; gen++ {
		b, err := s.sampleWithRetries(g, id, seed+uint64(gen)*1000003)
		if err != nil {
			return nil, err
		}
		parts = append(parts, b)
		for i, t := range b.data.TaskID {
			byTask[t] = append(byTask[t], offset+i)
		}
		offset += b.data.Len()
		if !dynamic && !filter {
			return b, nil
		}
		groups := toGroups(b.data)
		if !dynamic {
			rej, err := estimators.Reject(groups, cfg)
			if err != nil {
				return nil, err
			}
			out, err := keepGroups(parts, byTask, rej.Kept)
			if err != nil {
				return nil, err
			}
			for name, v := range rej.Metrics {
				out.metrics[name] = v
			}
			return out, nil
		}
		rel, err := acc.Add(groups)
		if err != nil {
			return nil, err
		}
		if rel.Ready || rel.Skip {
			out, err := keepGroups(parts, byTask, rel.Groups)
			if err != nil {
				return nil, err
			}
			for name, v := range rel.Metrics {
				out.metrics[name] = v
			}
			return out, nil
		}
	}
}

// sampleWithRetries samples one batch, retrying a failed generation up to
// rollout_retries times. A retry takes the same prompts (the data cursor is
// rewound) with another sampling seed, so that a failure that depends on
// the draw can pass while the data order stays that of a run without one.
func (s onPolicy) sampleWithRetries(g *rolloutGen, id int, seed uint64) (*batch, error) {
	retries := g.rec.Knobs.RolloutRetries
	cursor := g.feed.Cursor
	for attempt := 0; ; attempt++ {
		g.feed.Cursor = cursor
		b, err := s.tryBatch(g, id, attempt, seed+uint64(attempt)*7)
		if err == nil {
			b.metrics["rollout/retries"] = float64(attempt)
			return b, nil
		}
		if attempt >= retries {
			return nil, fmt.Errorf("rollout %d: generation failed after %d retries (rollout_retries %d): %w", id+1, attempt, retries, err)
		}
		if g.retried != nil {
			if err := g.retried(id, attempt+1, err); err != nil {
				return nil, err
			}
		}
	}
}

// tryBatch is one generation attempt.
func (s onPolicy) tryBatch(g *rolloutGen, id, attempt int, seed uint64) (*batch, error) {
	if g.fault != nil {
		if err := g.fault(id, attempt); err != nil {
			return nil, err
		}
	}
	return s.sampleBatch(g, id, seed)
}

// toGroups turns rows into estimator groups (one trajectory per row).
func toGroups(d *rollout.Rollout) []estimators.Group {
	var gs []estimators.Group
	for _, idx := range d.Groups() {
		g := estimators.Group{TaskID: d.TaskID[idx[0]], Role: d.Role[idx[0]], DataSource: d.DataSource[idx[0]]}
		for _, i := range idx {
			g.Trajectories = append(g.Trajectories, estimators.Trajectory{Reward: d.Reward[i], IsCorrect: d.Row[rollout.KeyIsCorrect][i] == 1})
		}
		gs = append(gs, g)
	}
	return gs
}

// keepGroups selects the rows of the kept groups (by task id) from parts.
func keepGroups(parts []*batch, byTask map[string][]int, kept []estimators.Group) (*batch, error) {
	var ds []*rollout.Rollout
	out := &batch{metrics: map[string]float64{}}
	var comps []string
	for _, p := range parts {
		ds = append(ds, p.data)
		out.exs = append(out.exs, p.exs...)
		comps = append(comps, p.completions...)
		out.genTokens += p.genTokens
		for name, v := range p.metrics {
			out.metrics[name] = v
		}
	}
	all, err := rollout.Concat(ds...)
	if err != nil {
		return nil, err
	}
	var idx []int
	for _, g := range kept {
		idx = append(idx, byTask[g.TaskID]...)
	}
	if out.data, err = all.Select(idx); err != nil {
		return nil, err
	}
	exs, cs := out.exs, comps
	out.exs, out.completions = nil, nil
	for _, i := range idx {
		out.exs = append(out.exs, exs[i])
		out.completions = append(out.completions, cs[i])
	}
	return out, nil
}

// sampleBatch draws rollout_batch_size prompts and samples their groups.
func (s onPolicy) sampleBatch(g *rolloutGen, id int, seed uint64) (*batch, error) {
	k := g.rec.Knobs
	exs, err := tasks.ForKind(g.feed.next(k.RolloutBatchSize), tasks.KindRL)
	if err != nil {
		return nil, err
	}
	n := max(k.NSamplesPerPrompt, 1)
	var prompts [][]int32
	for _, ex := range exs {
		p := g.enc.prompt(ex.Prompt)
		for range n {
			prompts = append(prompts, p)
		}
	}
	got, err := s.sampling.sample(g, id, seed, prompts)
	if err != nil {
		return nil, err
	}
	samples := got.samples
	b := newRows()
	out := &batch{metrics: map[string]float64{}}
	var stopped, lengthCut, length float64
	lps := make([][]float32, 0, len(samples))
	texts := make([]string, len(samples))
	owners := make([]tasks.Example, len(samples))
	for i, smp := range samples {
		texts[i], owners[i] = g.tok.Decode(smp.Tokens), exs[i/n]
	}
	// One call for the whole rollout: external rewards score it as a batch.
	rews, oks, terms, err := g.reward.ScoreTerms(texts, owners)
	if err != nil {
		return nil, err
	}
	if len(terms) > 1 {
		// Each term's unweighted mean shows what a weighted sum hides.
		for j, name := range g.reward.TermNames() {
			s := 0.0
			for _, v := range terms[j] {
				s += v
			}
			out.metrics["reward/"+g.role+"/"+name] = s / float64(len(terms[j]))
		}
	}
	for i, smp := range samples {
		ex := exs[i/n]
		row := b.add(prompts[i], smp.Tokens, ex, g.role)
		text := texts[i]
		rew, ok := rews[i], oks[i]
		if math.IsNaN(rew) || math.IsInf(rew, 0) {
			return nil, fmt.Errorf("reward of %q for task %s is %g", text, ex.ID, rew)
		}
		b.r.Reward[row] = rew
		c := 0.0
		if ok || rew >= k.CorrectThreshold {
			c = 1
		}
		b.setRow(rollout.KeyIsCorrect, row, c)
		lp := make([]float32, len(b.r.Tokens[row]))
		copy(lp[len(prompts[i]):], smp.LogProbs)
		lps = append(lps, lp)
		out.completions = append(out.completions, text)
		out.genTokens += len(smp.Tokens)
		length += float64(len(smp.Tokens))
		if smp.Stopped {
			stopped++
		} else {
			lengthCut++
		}
	}
	b.r.Tok[rollout.KeySamplerLogProbs] = lps
	for key, col := range got.rows {
		b.r.Row[key] = col
	}
	if s.greedyBaseline {
		greedy, err := g.sampler.Generate(dedupe(prompts, n), g.sampleOptions(seed, true))
		if err != nil {
			return nil, fmt.Errorf("greedy baseline: %w", err)
		}
		gTexts := make([]string, len(greedy))
		for j, smp := range greedy {
			gTexts[j] = g.tok.Decode(smp.Tokens)
		}
		gRews, _, err := g.reward.ScoreBatch(gTexts, exs)
		if err != nil {
			return nil, fmt.Errorf("greedy baseline: %w", err)
		}
		for i := range samples {
			b.setRow(rollout.KeyGreedyReward, i, gRews[i/n])
		}
		out.genTokens += len(greedy) * k.MaxNewTokens
	}
	N := float64(len(samples))
	out.metrics["response_length/mean"] = length / N
	out.metrics["termination/stop_frac"] = stopped / N
	out.metrics["termination/length_frac"] = lengthCut / N
	out.metrics["termination/error_frac"] = 0
	for name, v := range got.metrics {
		out.metrics[name] = v
	}
	out.data, out.exs = b.r, b.exs
	if err := out.data.Validate(); err != nil {
		return nil, fmt.Errorf("rollout data: %w", err)
	}
	return out, nil
}

// dedupe keeps every n-th prompt (the distinct prompts of groups of n).
func dedupe(prompts [][]int32, n int) [][]int32 {
	var out [][]int32
	for i := 0; i < len(prompts); i += n {
		out = append(out, prompts[i])
	}
	return out
}

// sampling completes the prompts of an on-policy rollout.
type sampling interface {
	sample(g *rolloutGen, id int, seed uint64, prompts [][]int32) (drawn, error)
}

// drawn is one completion per prompt, the per-row columns that say who
// sampled which (nil: none) and metrics about the draw.
type drawn struct {
	samples []runtime.Sample
	rows    map[string][]float64
	metrics map[string]float64
}

// studentSamples: the role's own sampler completes every prompt.
type studentSamples struct{}

func (studentSamples) sample(g *rolloutGen, _ int, seed uint64, prompts [][]int32) (drawn, error) {
	samples, err := g.sampler.Generate(prompts, g.sampleOptions(seed, false))
	if err != nil {
		return drawn{}, fmt.Errorf("sample: %w", err)
	}
	return drawn{samples: samples}, nil
}
