package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/engine/workflow"
	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
)

// KeyStepReward is the per-row column of a workflow rollout holding the
// environment's reward for that step (Reward holds the trajectory's total,
// the value every step is trained with).
const KeyStepReward = "step_reward"

// workflowGen generates rollouts of multi-turn episodes (task.workflow):
// each episode is a trajectory whose steps become rows sharing a Traj value,
// so that the estimator's trajectory advantage is broadcast to every step's
// action tokens.
type workflowGen struct {
	runner *workflow.Runner
	filter []workflow.Termination
	// render turns a conversation into prompt text: workflow.Plain for the
	// built-in base models. A chat template plugs in here.
	render workflow.Renderer
	// maxPositions is the rollout model's context (0: unbounded).
	maxPositions int
	restarts     int // runner restarts already reported
}

// newWorkflowGen starts nothing yet: processes start with the first
// episode. A command that cannot be found is an error now, not mid-run.
func newWorkflowGen(w *schema.Workflow, maxPositions int) (*workflowGen, error) {
	timeout, err := w.Timeout()
	if err != nil {
		return nil, fmt.Errorf("task.workflow: %w", err)
	}
	cfg := workflow.Config{Command: append([]string(nil), w.Command...), MaxTurns: w.MaxTurns, Parallel: w.NParallelTasks,
		RetryLimit: w.RetryLimit, StepTimeout: timeout}
	if len(cfg.Command) > 0 && cfg.Command[0] == "stx" {
		// "stx" is this binary, whatever its file is called; it sees itself
		// invoked as stx (its hidden `env` command serves the built-ins).
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("task.workflow.command: cannot locate the stx binary: %w", err)
		}
		cfg.Command[0], cfg.Argv0 = exe, "stx"
	} else if len(cfg.Command) > 0 {
		if _, err := exec.LookPath(cfg.Command[0]); err != nil {
			return nil, fmt.Errorf("task.workflow.command: %w", err)
		}
	}
	r, err := workflow.NewRunner(cfg)
	if err != nil {
		return nil, err
	}
	wg := &workflowGen{runner: r, render: workflow.Plain, maxPositions: maxPositions}
	for _, f := range w.Filter.Reasons() {
		t, err := workflow.ParseTermination(f)
		if err != nil {
			return nil, fmt.Errorf("task.workflow.filter: %w", err)
		}
		wg.filter = append(wg.filter, t)
	}
	return wg, nil
}

func (w *workflowGen) close() {
	if w != nil {
		w.runner.Close()
	}
}

// workflowBatch is what a workflow rollout keeps beside its rows: the
// episodes (for episodes.jsonl) and the first row of each trained one.
type workflowBatch struct {
	episodes []*workflow.Episode
	firstRow []int // -1: not trained (filtered or without steps)
	owners   []tasks.Example
}

// samplerPolicy acts with the rollout sampler: each conversation is
// rendered, encoded with BOS, and continued; all of a turn's conversations
// go to the sampler in one batch.
type samplerPolicy struct {
	g      *rolloutGen
	w      *workflowGen
	seed   uint64
	greedy bool
	turn   uint64
}

func (p *samplerPolicy) Act(convs [][]workflow.Message) ([]workflow.Action, error) {
	g, k := p.g, p.g.rec.Knobs
	out := make([]workflow.Action, len(convs))
	var prompts [][]int32
	var idx []int
	for i, c := range convs {
		text, err := p.w.render.Render(c)
		if err != nil {
			return nil, fmt.Errorf("workflow: render the conversation: %w", err)
		}
		ids := g.enc.tokens(text)
		// A conversation cut to fit would lose its task: it ends the episode.
		if len(ids) > k.MaxPromptTokens || (p.w.maxPositions > 0 && len(ids)+k.MaxNewTokens > p.w.maxPositions) {
			out[i].Truncated = true
			continue
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("workflow: an observation renders to an empty prompt and the tokenizer has no BOS")
		}
		prompts = append(prompts, ids)
		idx = append(idx, i)
	}
	if len(prompts) == 0 {
		return out, nil
	}
	p.turn++
	samples, err := g.sampler.Generate(prompts, g.sampleOptions(p.seed+p.turn*0x9e3779b97f4a7c15, p.greedy))
	if err != nil {
		return nil, fmt.Errorf("workflow sample: %w", err)
	}
	eos := g.tok.EOS()
	for j, s := range samples {
		text := s.Tokens
		if n := len(text); n > 0 && s.Stopped && text[n-1] == eos {
			text = text[:n-1]
		}
		out[idx[j]] = workflow.Action{Text: g.tok.Decode(text), PromptTokens: prompts[j], Tokens: s.Tokens, LogProbs: s.LogProbs}
	}
	return out, nil
}

// episodeTasks lays out n episodes per example; episode i's reset seed is
// drawn from seed and i.
func episodeTasks(exs []tasks.Example, n int, seed uint64) ([]workflow.Task, []tasks.Example) {
	var ts []workflow.Task
	var owners []tasks.Example
	for _, ex := range exs {
		for range n {
			i := uint64(len(ts))
			fields := map[string]any{"id": ex.ID, "prompt": ex.Prompt, "answer": ex.Answer}
			if ex.DataSource != "" {
				fields["data_source"] = ex.DataSource
			}
			ts = append(ts, workflow.Task{ID: ex.ID, Seed: (seed ^ 0xe915) + i*0x9e3779b97f4a7c15, Fields: fields})
			owners = append(owners, ex)
		}
	}
	return ts, owners
}

// workflowRollout plays rollout_batch_size × n_samples_per_prompt episodes
// and lays out the trained ones as rows.
func (g *rolloutGen) workflowRollout(id int, seed uint64) (*batch, error) {
	k := g.rec.Knobs
	exs, err := tasks.ForKind(g.feed.next(k.RolloutBatchSize), tasks.KindRL)
	if err != nil {
		return nil, err
	}
	wts, owners := episodeTasks(exs, max(k.NSamplesPerPrompt, 1), seed)
	eps, err := g.workflow.runner.Run(wts, &samplerPolicy{g: g, w: g.workflow, seed: seed})
	if err != nil {
		return nil, fmt.Errorf("rollout %d: %w", id+1, err)
	}
	if err := allFailed(eps); err != nil {
		return nil, fmt.Errorf("rollout %d: %w", id+1, err)
	}
	out, err := g.workflow.rows(eps, owners, g.role, k)
	if err != nil {
		return nil, err
	}
	out.metrics["workflow/env_restarts"] = float64(g.workflow.runner.Restarts() - g.workflow.restarts)
	g.workflow.restarts = g.workflow.runner.Restarts()
	if k.FilterUniformGroups || k.MinTrajsPerGroup > 1 || k.MinPartialSolveTasks > 0 {
		return rejectTrajectories(out, k)
	}
	return out, nil
}

// allFailed is an error when every episode timed out or failed even after
// its retries: the environment is broken, and a run that goes on would
// train on nothing without saying so.
func allFailed(eps []*workflow.Episode) error {
	for _, ep := range eps {
		if ep.Termination != workflow.TermError && ep.Termination != workflow.TermTimeout {
			return nil
		}
	}
	if len(eps) == 0 {
		return nil
	}
	ep := eps[0]
	return fmt.Errorf("all %d episodes failed, after retry_limit retries each; the first (task %s) with %s: %s",
		len(eps), ep.Task.ID, ep.Termination, ep.Reason)
}

// rows turns episodes into a batch: one row per step of every episode that
// compact filtering keeps (prompt = the rendered conversation, response =
// the action, mask on the action), its trajectory's total reward on every
// row, and the workflow and reward metrics.
func (w *workflowGen) rows(eps []*workflow.Episode, owners []tasks.Example, role string, k schema.Knobs) (*batch, error) {
	b := newRows()
	wb := &workflowBatch{episodes: eps, firstRow: make([]int, len(eps)), owners: owners}
	out := &batch{metrics: map[string]float64{}, wf: wb}
	var lps [][]float32
	var rewards []float64
	traj, turns, retries, actionTokens := 0, 0, 0, 0
	reasons := map[workflow.Termination]int{}
	correct := 0.0
	for i, ep := range eps {
		wb.firstRow[i] = -1
		turns += len(ep.Steps)
		retries += ep.Attempts - 1
		reasons[ep.Termination]++
		if ep.Filtered(w.filter) || len(ep.Steps) == 0 {
			continue
		}
		R := ep.Reward()
		if math.IsNaN(R) || math.IsInf(R, 0) {
			return nil, fmt.Errorf("episode of task %s: total reward %g is not finite", ep.Task.ID, R)
		}
		c := 0.0
		if ep.Correct(k.CorrectThreshold) {
			c = 1
		}
		correct += c
		rewards = append(rewards, R)
		for s, st := range ep.Steps {
			row := b.add(st.Action.PromptTokens, st.Action.Tokens, owners[i], role)
			if s == 0 {
				wb.firstRow[i] = row
			}
			b.r.Reward[row] = R
			b.r.Traj[row] = traj
			b.setRow(rollout.KeyIsCorrect, row, c)
			b.setRow(KeyStepReward, row, st.Reward)
			lp := make([]float32, len(b.r.Tokens[row]))
			copy(lp[len(st.Action.PromptTokens):], st.Action.LogProbs)
			lps = append(lps, lp)
			out.completions = append(out.completions, st.Action.Text)
			out.genTokens += len(st.Action.Tokens)
			actionTokens += len(st.Action.Tokens)
		}
		traj++
	}
	if b.r.Len() > 0 {
		b.r.Tok[rollout.KeySamplerLogProbs] = lps
	}
	out.data, out.exs = b.r, b.exs
	if err := out.data.Validate(); err != nil {
		return nil, fmt.Errorf("rollout data: %w", err)
	}
	m := out.metrics
	n := float64(len(eps))
	m["workflow/episodes"] = n
	m["workflow/invalid"] = n - float64(traj)
	m["workflow/steps"] = float64(b.r.Len())
	m["workflow/retries"] = float64(retries)
	if n > 0 {
		m["workflow/turns/mean"] = float64(turns) / n
		for _, t := range workflow.Terminations {
			m["workflow/termination/"+string(t)] = float64(reasons[t]) / n
		}
	}
	if b.r.Len() > 0 {
		m["response_length/mean"] = float64(actionTokens) / float64(b.r.Len())
	}
	if len(rewards) > 0 {
		for name, v := range stats(rewards) {
			m["reward/"+role+"/"+name] = v
			m["reward/"+name] = v
		}
		m["reward/correct_frac"] = correct / float64(len(rewards))
	}
	return out, nil
}

// stats are the mean, std, min and max of xs (not empty).
func stats(xs []float64) map[string]float64 {
	s, ss, lo, hi := 0.0, 0.0, math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		s += x
		ss += x * x
		lo, hi = min(lo, x), max(hi, x)
	}
	n := float64(len(xs))
	mean := s / n
	return map[string]float64{"mean": mean, "std": math.Sqrt(max(ss/n-mean*mean, 0)), "min": lo, "max": hi}
}

// rejectTrajectories applies rejection sampling (filter_uniform_groups,
// min_trajs_per_group, min_partial_solve_tasks) with one trajectory per
// episode, not per row.
func rejectTrajectories(b *batch, k schema.Knobs) (*batch, error) {
	d := b.data
	var groups []estimators.Group
	pos := map[string]int{}
	seen := map[int]bool{}
	for i := range d.Tokens {
		if seen[d.Traj[i]] {
			continue
		}
		seen[d.Traj[i]] = true
		gi, ok := pos[d.GroupID[i]]
		if !ok {
			gi = len(groups)
			pos[d.GroupID[i]] = gi
			groups = append(groups, estimators.Group{TaskID: d.TaskID[i], Role: d.Role[i], DataSource: d.DataSource[i]})
		}
		groups[gi].Trajectories = append(groups[gi].Trajectories, estimators.Trajectory{Reward: d.Reward[i], IsCorrect: d.Row[rollout.KeyIsCorrect][i] == 1})
	}
	rej, err := estimators.Reject(groups, estimators.RejectionConfig{MinTrajsPerGroup: max(k.MinTrajsPerGroup, 1),
		FilterUniformGroups: k.FilterUniformGroups, UniformTol: 1e-8, MinPartialSolveTasks: k.MinPartialSolveTasks})
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, g := range rej.Kept {
		keep[g.TaskID] = true
	}
	var idx []int
	for i, t := range d.TaskID {
		if keep[t] {
			idx = append(idx, i)
		}
	}
	sel, err := d.Select(idx)
	if err != nil {
		return nil, err
	}
	firstOf := map[int]int{}
	for j, i := range idx {
		if _, ok := firstOf[i]; !ok {
			firstOf[i] = j
		}
	}
	for e, r := range b.wf.firstRow {
		if j, ok := firstOf[r]; ok && r >= 0 {
			b.wf.firstRow[e] = j
		} else {
			b.wf.firstRow[e] = -1
		}
	}
	out := &batch{data: sel, metrics: b.metrics, genTokens: b.genTokens, wf: b.wf}
	for _, i := range idx {
		out.exs = append(out.exs, b.exs[i])
		out.completions = append(out.completions, b.completions[i])
	}
	for name, v := range rej.Metrics {
		out.metrics[name] = v
	}
	return out, nil
}

// advantageMetrics are advantage/<role>/… over the batch's trajectories:
// the advantage of each trained episode (its first row's, which every step
// shares with an outcome estimator): one value per episode, so that long
// episodes do not weigh more than short ones.
func (wb *workflowBatch) advantageMetrics(role string, rowAdv []float64) map[string]float64 {
	var advs []float64
	for _, r := range wb.firstRow {
		if r >= 0 && r < len(rowAdv) {
			advs = append(advs, rowAdv[r])
		}
	}
	if len(advs) == 0 {
		return nil
	}
	m := map[string]float64{}
	zero := 0.0
	for _, a := range advs {
		if math.Abs(a) < estimators.ZeroAdvantageTol {
			zero++
		}
	}
	for name, v := range stats(advs) {
		m["advantage/"+role+"/"+name] = v
	}
	m["advantage/"+role+"/fraction_zero"] = zero / float64(len(advs))
	return m
}

// logEpisodes writes every episode of the rollout to episodes.jsonl: its
// turns, reward, termination, whether it was trained and, if so, its advantage.
func (wb *workflowBatch) logEpisodes(l *loop, id int) error {
	for i, ep := range wb.episodes {
		steps := make([]map[string]any, len(ep.Steps))
		for s, st := range ep.Steps {
			steps[s] = map[string]any{"observation": st.Observation, "action": st.Action.Text, "reward": st.Reward, "done": st.Done}
			if st.Info != nil {
				steps[s]["info"] = st.Info
			}
		}
		rec := map[string]any{"rollout": id, "episode": i, "task_id": ep.Task.ID, "prompt": wb.owners[i].Prompt,
			"reward": ep.Reward(), "correct": ep.Correct(l.rec.Knobs.CorrectThreshold), "termination": string(ep.Termination),
			"turns": len(ep.Steps), "attempts": ep.Attempts, "trained": wb.firstRow[i] >= 0, "steps": steps, "final_observation": ep.Final}
		if ep.Reason != "" {
			rec["reason"] = ep.Reason
		}
		if r := wb.firstRow[i]; r >= 0 && r < len(l.rowAdv) {
			rec["advantage"] = l.rowAdv[r]
		}
		if err := l.dir.LogEpisode(rec); err != nil {
			return err
		}
	}
	return nil
}

// workflowEval plays one episode per validation prompt and sample
// (greedily when n_val_samples_per_prompt is 1) and scores episodes as
// correct or not: val/accuracy, val/reward_mean, val/<source>/pass@k and
// val/workflow/{turns/mean,invalid}.
func (g *rolloutGen) workflowEval(val []tasks.Example, seed uint64) (map[string]float64, error) {
	k := g.rec.Knobs
	n := max(k.NValSamplesPerPrompt, 1)
	if len(val) == 0 {
		return nil, fmt.Errorf("evaluation: the task has no validation examples")
	}
	wts, owners := episodeTasks(val, n, seed)
	eps, err := g.workflow.runner.Run(wts, &samplerPolicy{g: g, w: g.workflow, seed: seed, greedy: n == 1})
	if err != nil {
		return nil, fmt.Errorf("evaluation: %w", err)
	}
	// workflow/env_restarts counts the rollouts' restarts only.
	g.workflow.restarts = g.workflow.runner.Restarts()
	rews, oks := make([]float64, len(eps)), make([]bool, len(eps))
	turns, invalid := 0.0, 0.0
	for i, ep := range eps {
		rews[i], oks[i] = ep.Reward(), ep.Correct(k.CorrectThreshold)
		if ep.Filtered(g.workflow.filter) {
			invalid++
		}
		turns += float64(len(ep.Steps))
	}
	m, err := validationMetrics(owners, rews, oks, n)
	if err != nil {
		return nil, err
	}
	m["val/workflow/turns/mean"] = turns / float64(len(eps))
	m["val/workflow/invalid"] = invalid
	return m, nil
}

// reshuffleTrajectories permutes whole trajectories (a workflow rollout's
// rows of one episode stay together and in step order, which token-level
// estimators such as GAE need).
func reshuffleTrajectories(d *rollout.Rollout, seed uint64) (*rollout.Rollout, error) {
	var starts []int
	for i := range d.Tokens {
		if i == 0 || d.Traj[i] != d.Traj[i-1] {
			starts = append(starts, i)
		}
	}
	perm := rand.New(rand.NewPCG(seed, 0x5bd1e995)).Perm(len(starts))
	idx := make([]int, 0, d.Len())
	for _, u := range perm {
		end := d.Len()
		if u+1 < len(starts) {
			end = starts[u+1]
		}
		for i := starts[u]; i < end; i++ {
			idx = append(idx, i)
		}
	}
	return d.Select(idx)
}
