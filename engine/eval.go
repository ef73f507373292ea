package engine

import (
	"fmt"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
)

// evaluator scores the rollout model on the validation split.
type evaluator struct {
	gen  *rolloutGen
	val  []tasks.Example
	task tasks.Task // set for the flow recipes, whose samples are points
	// kl measures val/teacher_kl on the samples when the rollout role has a teacher.
	kl *klProbe
}

func newEvaluator(gen *rolloutGen, task tasks.Task) (*evaluator, error) {
	val := task.Validation()
	if gen.render != nil {
		if err := gen.renderPrompts(val); err != nil {
			return nil, fmt.Errorf("validation: %w", err)
		}
	}
	// The reference answer of a preference example is its chosen completion.
	for i := range val {
		if val[i].Answer == "" {
			val[i].Answer = val[i].Chosen
		}
	}
	return &evaluator{gen: gen, val: val}, nil
}

// run completes every validation prompt n_val_samples_per_prompt times
// (greedily when 1, with the rollout temperature otherwise), scores the
// completions with the task reward and returns val/accuracy (mean pass@1),
// val/reward_mean and val/<source>/pass@k.
func (e *evaluator) run(seed uint64) (map[string]float64, error) {
	k := e.gen.rec.Knobs
	if e.gen.flow != nil {
		return flowEval(e.gen.flow, k, e.gen.reward, e.task, seed)
	}
	// max_val_prompts is hot: the split is cut at each evaluation.
	val := e.val
	if m := k.MaxValPrompts; m > 0 && len(val) > m {
		val = val[:m]
	}
	if e.gen.workflow != nil {
		return e.gen.workflowEval(val, seed)
	}
	n := max(k.NValSamplesPerPrompt, 1)
	var prompts [][]int32
	for _, ex := range val {
		p := e.gen.enc.prompt(ex.Prompt)
		for range n {
			prompts = append(prompts, p)
		}
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("evaluation: the task has no validation examples")
	}
	samples, err := e.gen.sampler.Generate(prompts, e.gen.sampleOptions(seed, n == 1))
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	texts := make([]string, len(samples))
	owners := make([]tasks.Example, len(samples))
	for i, s := range samples {
		texts[i], owners[i] = e.gen.tok.Decode(s.Tokens), val[i/n]
	}
	rews, oks, err := e.gen.reward.ScoreBatch(texts, owners)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	for i := range oks {
		oks[i] = oks[i] || rews[i] >= k.CorrectThreshold // the task's own test, or correct_threshold
	}
	m, err := validationMetrics(owners, rews, oks, n)
	if err != nil {
		return nil, err
	}
	if e.kl != nil {
		comps := make([][]int32, len(samples))
		for i, s := range samples {
			comps[i] = s.Tokens
		}
		if m["val/teacher_kl"], err = e.kl.measure(prompts, comps); err != nil {
			return nil, fmt.Errorf("evaluation: %w", err)
		}
	}
	return m, nil
}

// validationMetrics turns scored validation samples (n per prompt; owners[i]
// is sample i's example) into val/accuracy (mean pass@1), val/reward_mean and
// val/<source>/pass@k.
func validationMetrics(owners []tasks.Example, rews []float64, oks []bool, n int) (map[string]float64, error) {
	vs := make([]estimators.ValSample, len(owners))
	sum, correct := 0.0, 0.0
	for i, ex := range owners {
		src := ex.DataSource
		if src == "" {
			src = estimators.UnknownDataSource
		}
		vs[i] = estimators.ValSample{DataSource: src, TaskID: ex.ID, Correct: oks[i]}
		sum += rews[i]
		if oks[i] {
			correct++
		}
	}
	ks := []int{1}
	if n > 1 {
		ks = append(ks, n)
	}
	m, err := estimators.ValidationMetrics(vs, ks)
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	m["val/accuracy"] = correct / float64(len(vs))
	m["val/reward_mean"] = sum / float64(len(vs))
	return m, nil
}
