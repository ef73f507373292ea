package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// RunOptions are the settings of a run that are not part of the recipe.
type RunOptions struct {
	// RunsDir is where new run directories are created ("runs" when empty).
	RunsDir string
	// Backend is the compute backend spec (see runtime.NewBackend; "" picks the default).
	Backend string
	// Resume is a run directory to continue from its last complete checkpoint.
	Resume string
	// Quiet prints only the start and end lines; JSON prints one JSON object per line instead
	// of text.
	Quiet, JSON bool
	// NoEvalBefore skips the evaluation before training that eval_before_train asks for.
	NoEvalBefore bool
	// NoTensorBoard turns off the TensorBoard event files in <run>/tb/ (run_record.go).
	NoTensorBoard bool
	// Out receives the console output (nil: discarded).
	Out io.Writer
	// Now is the clock naming a new run directory (nil: time.Now).
	Now func() time.Time
	// Reload makes the run follow edits of its recipe files (nil: no
	// watching, as with --no-watch).
	Reload *ReloadOptions

	// Group is this process's place in a group of processes (run_node.go: node 0 alone
	// writes the run directory); the zero value is a run of one process.
	Group GroupNode

	hooks *runHooks // tests only
}

// Result is what a finished run reports.
type Result struct {
	// Dir is the run directory.
	Dir string
	// Steps is the number of optimizer steps taken (over all rollouts, resumed ones included).
	Steps int
	// Rollouts is the number of rollouts completed.
	Rollouts int
	// Interrupted is true when a signal (ctx cancellation) ended the run early.
	Interrupted bool
	// FirstVal and LastVal are the first and last evaluation metrics of this process (nil without one).
	FirstVal, LastVal map[string]float64
	// Phases is the total wall time of each phase (generate, sync, train, update_weights,
	// eval, checkpoint) in this process.
	Phases map[string]time.Duration
	// Objective is the recipe family's own objective over the whole run (resumed parts
	// included); nil when its metric was never recorded.
	Objective *ObjectiveResult
}

// ObjectiveResult is an objective's first and last values in a run.
type ObjectiveResult struct {
	Objective
	First, Last float64
	// Span says how First and Last were taken ("means of the first and last 10 steps").
	Span string
}

// objectiveResult measures the recipe's objective over the run's metrics.jsonl.
func (l *loop) objectiveResult() *ObjectiveResult {
	if !l.dir.Writes() {
		return nil // node 0 reports it (run_node.go)
	}
	recs, err := rundir.ReadMetrics(filepath.Join(l.dir.Path(), rundir.MetricsFile))
	if err != nil {
		return nil
	}
	o := ObjectiveFor(l.rec)
	first, last, ok := o.Measure(recs)
	if !ok {
		return nil
	}
	return &ObjectiveResult{Objective: o, First: first, Last: last, Span: o.Span(recs)}
}

// ErrNonFinite is returned (wrapped) when a loss or gradient norm is NaN or infinite.
var ErrNonFinite = errors.New("non-finite loss or gradient")

// Run trains recipe name of cat and returns where it wrote its run directory.
// Its outer loop, per rollout id: generate and score the data, train every
// trainable role on it num_train_passes times, push weights to the samplers,
// checkpoint, then apply a pending hot reload. Cancelling ctx (SIGINT/SIGTERM) ends the
// run after the current rollout with a checkpoint and no error.
//
// With opts.Reload the recipe files are watched and edits are hot-reloaded at
// rollout boundaries. With opts.Resume the run continues from the recipe
// version in force at its last checkpoint; where cat's recipe (the files on
// disk) differs from it, the difference is applied as a reload.
func Run(ctx context.Context, cat *schema.Catalog, name string, opts RunOptions) (*Result, error) {
	rec, ok := cat.Recipes[name]
	if !ok {
		return nil, fmt.Errorf("no valid recipe %q", name)
	}
	// The watch starts before the models are built, so that an edit saved
	// meanwhile is not missed.
	watch, err := startWatch(name, opts)
	if err != nil {
		return nil, err
	}
	base := rec
	var rp *resumePoint
	if opts.Resume != "" {
		if rp, err = openResume(opts.Group, opts.Resume, name); err != nil {
			watch.close()
			return nil, err
		}
		base = rp.recipe
	}
	var from *resumeFrom
	if rp != nil {
		from = &resumeFrom{cp: &rp.cp, initial: filepath.Join(rp.dir.Path(), rundir.InitialDir)}
	}
	l, err := newLoop(base, opts, from)
	if err != nil {
		watch.close()
		if rp != nil {
			// The run being resumed records how this attempt ended.
			rp.dir.LogEvent(rundir.Event{Type: rundir.EventRunEnd, Rollout: max(rp.state.Rollout, 0), Message: err.Error()})
			rp.dir.Close()
		}
		return nil, err
	}
	l.reloads.watch, l.ckpt.resume, l.version = watch, rp, 1
	defer l.close()
	return l.run(ctx, rec)
}

// loop is one run in progress: the outer loop over rollouts and what it
// keeps between them (the step count, the run's result).
// The work of each phase is its collaborators': gen generates the data
// (and keeps the data position and the sampling RNG),
// train takes the optimizer steps, ckpt writes and restores checkpoints,
// reloads applies recipe edits at rollout boundaries.
type loop struct {
	*env
	*roleSet
	kind    specializations.DataKind
	unit    int // rows that stay together when reshuffling (2 for pairs)
	nTrain  int // examples in the train split (total_epochs)
	gen     *generator
	push    *runtime.RolloutCopy // the sampler's copy of the rollout role's weights, if on its own device (placement.go)
	eval    *evaluator
	train   *trainer
	ckpt    *checkpointer
	reloads *hotReload
	state   loopState
	res     Result
	last    map[string]float64 // the last rollout's final metrics record (console)
	// rowAdv are the primary role's per-row advantages of the current
	// rollout's first pass (rows in generation order), for episodes.jsonl.
	rowAdv []float64
	tb     *tbLog // the TensorBoard event files (run_record.go); nil when off
}

// env is what the loop and its collaborators share: the recipe in force,
// which hot reloads replace, with the schedule length derived from it, and
// where the run reports (the console, the run directory once open).
type env struct {
	rec     *schema.Recipe // the recipe in force
	version int            // its version in the run directory
	total   int            // optimizer steps the LR schedule spans under rec
	opts    RunOptions
	con     *console
	backend *runtime.Backend
	dir     *rundir.Dir // nil until the run directory is open
}

// roleSet is the run's roles, in graph order and by name.
type roleSet struct {
	roles   []*role
	byName  map[string]*role
	primary *role // the first trainable role: its kind of data is generated
}

func newRoleSet(roles []*role) *roleSet {
	s := &roleSet{roles: roles, byName: map[string]*role{}}
	for _, r := range roles {
		s.byName[r.name()] = r
		if s.primary == nil && r.trainable() {
			s.primary = r
		}
	}
	return s
}

// newLoop builds a run from its recipe: the role graph, the task, the roles' models, the
// reward and the rollout generator (from a checkpoint when from is set).
func newLoop(rec *schema.Recipe, opts RunOptions, from *resumeFrom) (*loop, error) {
	g, probs := BuildGraph(rec)
	if len(probs) > 0 {
		return nil, fmt.Errorf("recipe %s: %s: %s", rec.Name, probs[0].Path, probs[0].Msg)
	}
	l := &loop{env: &env{rec: rec, opts: opts, con: &console{w: opts.Out, quiet: opts.Quiet, json: opts.JSON}},
		res: Result{Phases: map[string]time.Duration{}}}
	var err error
	if l.backend, err = runtime.NewBackend(opts.Backend); err != nil {
		return nil, err
	}
	task, err := l.loadTask(g)
	if err != nil {
		return nil, err
	}
	if err := l.buildRoles(g, from); err != nil {
		return nil, err
	}
	reward, err := tasks.NewReward(rec.Task.Reward, task)
	if err != nil {
		return nil, fmt.Errorf("task %s reward: %w", rec.Task.Name, err)
	}
	// The reward may hold a process (a reward command): stopped by l.close,
	// or here when the loop is not built.
	built := false
	defer func() {
		if !built {
			reward.Close()
		}
	}()
	if len(task.Train()) == 0 {
		return nil, fmt.Errorf("task %s has no training examples", rec.Task.Name)
	}
	if rr := l.rolloutRole(); rr.flow != nil {
		l.newFlowGenerator(rr, task, reward)
	} else if err := l.newLMGenerator(rr, task, reward); err != nil {
		return nil, err
	}
	l.wire(g)
	built = true
	return l, nil
}

// loadTask reads the recipe's task for the data kind of the first trainable role, checks
// every record against that kind (here, with the record's file and line, before any model
// is built, not at the rollout that first draws it), and sizes the LR schedule: total_epochs
// caps the rollouts by the task's size.
func (l *loop) loadTask(g *Graph) (tasks.Task, error) {
	rec := l.rec
	kind := specializations.DataKind("")
	for _, n := range g.Nodes {
		if n.Role.Trainable {
			kind = n.Contract.Data
			break
		}
	}
	l.kind, l.unit = kind, kindOf(kind).unit
	task, err := tasks.NewFor(rec.Task, rec.Knobs)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", rec.Task.Name, err)
	}
	if tk := kindOf(kind).examples; tk != "" {
		for _, exs := range [][]tasks.Example{task.Train(), task.Validation()} {
			if _, err := tasks.ForKind(exs, tk); err != nil {
				return nil, fmt.Errorf("task %s: %w", rec.Task.Name, err)
			}
		}
	}
	l.nTrain = len(task.Train())
	l.total = l.scheduleSteps(rec.Knobs)
	return task, nil
}

// buildRoles builds every role's model (built-in starting models, tiny-sft and
// tiny-teacher, are trained on first use and cached) and finds the primary role.
func (l *loop) buildRoles(g *Graph, from *resumeFrom) error {
	say := func(format string, args ...any) {
		l.con.printf(format, args...)
		l.con.event("starting_model", map[string]any{"message": strings.TrimSpace(fmt.Sprintf(format, args...))})
	}
	starts, err := starterDirs(context.Background(), l.rec, l.backend, say)
	if err != nil {
		return err
	}
	roles, err := buildRoles(l.backend, g, max(l.total, 1), from, starts)
	if err != nil {
		return err
	}
	l.roleSet = newRoleSet(roles)
	if l.primary == nil {
		return fmt.Errorf("recipe %s has no trainable role", l.rec.Name)
	}
	return nil
}

// rolloutRole is the role that pushes its weights to the sampler (sync_to_rollout), else
// the primary role.
func (l *loop) rolloutRole() *role {
	for _, r := range l.roles {
		if r.node.Role.SyncToRollout {
			return r
		}
	}
	return l.primary
}

// newFlowGenerator generates the rollouts of the flow recipes from the velocity model of
// rr, the rollout role.
func (l *loop) newFlowGenerator(rr *role, task tasks.Task, reward *tasks.Reward) {
	k := l.rec.Knobs
	l.gen = l.newGenerator(&rolloutGen{rec: l.rec, kind: l.kind, role: l.primary.name(), feed: &feeder{train: task.Train(), seed: uint64(k.Seed)},
		reward: reward, flow: rr.flow, strategy: chooseStrategy(l.primary.node.Contract, k, estimators.Needs{})})
	l.eval = &evaluator{gen: l.gen.rolloutGen, task: task}
}

// newLMGenerator generates the rollouts of the language-model recipes: the rollout role
// rr's tokenizer, sampler and prompt template, the teacher's sampler, the strategy of the
// primary role's data kind, workflow episodes, and the evaluator.
func (l *loop) newLMGenerator(rr *role, task tasks.Task, reward *tasks.Reward) error {
	rec, k, train := l.rec, l.rec.Knobs, task.Train()
	tok, err := roleTokenizer(rr)
	if err != nil {
		return err
	}
	sampler, err := l.rolloutGenerator(rr) // in-process, or the rollout engine (rollout_remote.go)
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	render, templated, err := promptRenderer(rr.dir)
	if err != nil {
		return fmt.Errorf("role %q: %w", rr.name(), err)
	}
	l.gen = l.newGenerator(&rolloutGen{rec: rec, kind: l.kind, role: l.primary.name(), feed: &feeder{train: train, seed: uint64(k.Seed)},
		enc: encoder{tok: tok, maxPrompt: k.MaxPromptTokens, templated: templated}, reward: reward, sampler: sampler, tok: tok,
		render: render})
	if err := l.gen.renderPrompts(train); err != nil {
		return fmt.Errorf("task %s: %w", rec.Task.Name, err)
	}
	if t := l.primary.node.Role.InitString("teacher"); t != "" && l.byName[t] != nil {
		if l.gen.teacher, err = runtime.NewSampler(l.backend, l.byName[t].model); err != nil {
			return fmt.Errorf("teacher sampler: %w", err)
		}
	}
	l.gen.strategy = chooseStrategy(l.primary.node.Contract, k, estimators.NeedsOf(k.EstimatorFor(l.primary.name())))
	l.unit = max(l.unit, l.gen.strategy.unit())
	if w := rec.Task.Workflow; w != nil {
		if l.gen.workflow, err = newWorkflowGen(w, rr.model.Config.MaxPositions); err != nil {
			return err
		}
		if tr, ok := render.(templateRenderer); ok {
			l.gen.workflow.render = tr.workflowRenderer()
		}
	}
	if l.eval, err = newEvaluator(l.gen.rolloutGen, task); err != nil {
		return err
	}
	if t := rr.node.Role.InitString("teacher"); t != "" && l.byName[t] != nil && l.byName[t].model != nil {
		if l.eval.kl, err = newKLProbe(l.backend, rr.model, l.byName[t].model); err != nil {
			return err
		}
	}
	l.gen.retried = l.gen.logRetry
	if l.opts.hooks != nil {
		l.gen.fault = l.opts.hooks.rolloutFault
	}
	return nil
}

// wire builds the loop's collaborators over what newLoop made.
func (l *loop) wire(g *Graph) {
	l.train = &trainer{env: l.env, roleSet: l.roleSet, g: g, state: &l.state, rowsPerStep: l.rowsPerStep}
	l.ckpt = &checkpointer{env: l.env, roleSet: l.roleSet, state: &l.state, rng: l.gen.rng, feed: l.gen.feed}
	l.reloads = &hotReload{env: l.env, roleSet: l.roleSet, gen: l.gen.rolloutGen, steps: l.scheduleSteps}
}

// expectedRows is the number of rows a rollout holds before rejection.
func (l *loop) expectedRows(kind specializations.DataKind) int {
	k := l.rec.Knobs
	if w := l.rec.Task.Workflow; w != nil {
		// One row per turn: the schedule spans the longest episodes.
		return k.RolloutBatchSize * max(k.NSamplesPerPrompt, 1) * w.MaxTurns
	}
	return kindOf(kind).rows(k)
}

// scheduleSteps is the number of optimizer steps the LR schedule spans
// under knobs k: total_batches, or the planned rollouts (num_rollout,
// capped by total_epochs) × passes × steps per pass.
func (l *loop) scheduleSteps(k schema.Knobs) int {
	if k.TotalBatches > 0 {
		return k.TotalBatches
	}
	return l.plannedRollouts(k) * max(k.NumTrainPasses, 1) * l.stepsPerPass(l.expectedRows(l.kind))
}

// stepsPerPass is the number of optimizer steps over rows rows.
func (l *loop) stepsPerPass(rows int) int {
	tb := l.rowsPerStep()
	if rows <= 0 || tb <= 0 {
		return 1
	}
	return (rows + tb - 1) / tb
}

// rowsPerStep is the mini-batch of one optimizer step, a whole number of units.
func (l *loop) rowsPerStep() int {
	tb := l.rec.Knobs.TrainBatch()
	if l.gen != nil && kindOf(l.gen.kind).wholeRollout {
		return 0 // e.g. KTO's mismatched rows must share a step with their examples
	}
	if l.unit > 1 {
		tb = max(tb/l.unit, 1) * l.unit
	}
	return tb
}

func (l *loop) close() {
	if l.gen != nil && l.gen.reward != nil {
		if err := l.gen.reward.Close(); err != nil {
			l.con.printf("reward: %v\n", err)
		}
	}
	if l.reloads != nil {
		l.reloads.watch.close()
	}
	if l.gen != nil {
		l.gen.workflow.close()
	}
	if l.dir != nil {
		l.dir.Close()
	}
}

// run is the outer loop, as in train.py: per rollout id, generate, train
// every trainable role on the data num_train_passes times, push the weights
// to the samplers, checkpoint at the cadence, then apply a pending hot
// reload. disk is the recipe of the files on disk: on resume, where it
// differs from the checkpoint's version, the difference is applied as a
// reload before the first rollout.
func (l *loop) run(ctx context.Context, disk *schema.Recipe) (res *Result, err error) {
	// Every run that has a directory ends with run_end, however it ends:
	// also when resuming fails, or the first rollout does (its rollout is
	// then -1, which events record as 0).
	defer func() {
		if l.dir == nil {
			return
		}
		l.tb.close()
		msg := "completed"
		if err != nil {
			msg = err.Error()
		} else if l.res.Interrupted {
			msg = "interrupted"
		}
		if lerr := l.dir.LogEvent(rundir.Event{Type: rundir.EventRunEnd, Rollout: max(l.state.Rollout, 0), Message: msg}); lerr != nil && err == nil {
			err = lerr
		}
	}()
	if err := l.open(disk); err != nil {
		return nil, err
	}
	k := l.rec.Knobs
	start := l.state.Rollout + 1
	if start == 0 && (k.EvalBeforeTrain && !l.opts.NoEvalBefore || k.EvalOnly) {
		if err := l.evaluateBefore(); err != nil {
			return nil, err
		}
		if k.EvalOnly {
			return &l.res, nil
		}
	}
	begin := time.Now()
	saved, done := l.state.Rollout, l.state.Rollout
	// The knobs are read afresh at every rollout: a hot reload at the
	// boundary may have changed num_rollout, total_batches or a cadence.
	for id := start; id < l.rec.Knobs.NumRollout && !l.finished(); id++ {
		if err := l.rollout(id); err != nil {
			return nil, err
		}
		l.tb.flush(id)
		done = id
		l.res.Rollouts++
		l.progress(id, start, begin)
		k := l.rec.Knobs
		interrupted := ctx.Err() != nil
		if k.SaveEvery > 0 && (id+1)%k.SaveEvery == 0 || id == k.NumRollout-1 || l.finished() || interrupted {
			if err := l.save(id); err != nil {
				return nil, err
			}
			saved = id
		}
		if interrupted {
			// No reload now: the checkpoint just saved holds the version in
			// force, and a resume applies any edit from the files.
			l.res.Interrupted = true
			l.con.printf("interrupted: checkpoint of rollout %d saved in %s\n", id+1, l.dir.Path())
			break
		}
		if err := l.reloads.applyPendingReload(id); err != nil {
			return nil, err
		}
	}
	if done > saved {
		if err := l.save(done); err != nil {
			return nil, err
		}
	}
	l.res.Steps = l.state.Step
	l.res.Objective = l.objectiveResult()
	return &l.res, nil
}

// open creates the run directory, or restores the run being resumed, and
// says where the run is; on resume the recipe files' edits since the
// checkpoint's version (disk) are applied as a reload.
func (l *loop) open(disk *schema.Recipe) error {
	if err := l.ckpt.open(); err != nil {
		return err
	}
	l.openTensorBoard()
	l.res.Dir = l.dir.Path()
	l.con.printf("stx run %s: %s\n", l.rec.Name, l.backend.Describe())
	for _, r := range l.roles {
		if line := r.computeLine(l.backend); line != "" {
			l.con.printf("%s\n", line)
		}
	}
	l.con.printf("run directory %s\n", l.dir.Path())
	watch := l.reloads.watch
	if watch != nil {
		l.con.printf("watching %s: hot knobs of saved edits take effect at rollout boundaries (--no-watch turns this off)\n",
			strings.Join(watch.files, ", "))
	}
	l.con.event("start", map[string]any{"recipe": l.rec.Name, "dir": l.dir.Path(), "backend": l.backend.Describe(),
		"version": l.version, "watching": watch != nil})
	if l.ckpt.resume != nil {
		return l.reloads.reloadTo(l.state.Rollout, disk)
	}
	return nil
}

// finished reports whether the run has taken total_batches steps or handed
// out total_epochs passes over the data.
func (l *loop) finished() bool {
	k := l.rec.Knobs
	return k.TotalBatches > 0 && l.state.Step >= k.TotalBatches || l.epochsDone()
}

// progress prints the line of rollout id, the ETA from the pace since begin
// (the first rollout of this process, start).
func (l *loop) progress(id, start int, begin time.Time) {
	n := id + 1 - start
	planned := l.plannedRollouts(l.rec.Knobs)
	eta := time.Duration(float64(time.Since(begin)) / float64(n) * float64(max(planned-id-1, 0)))
	l.con.progress(id, planned, l.last, time.Since(begin), eta)
}

// save checkpoints rollout id.
func (l *loop) save(id int) error {
	t := time.Now()
	defer func() { l.res.Phases["checkpoint"] += time.Since(t) }()
	return l.ckpt.save(id)
}

// evaluateBefore is the validation before training (eval_before_train, eval_only).
func (l *loop) evaluateBefore() error {
	m, err := l.evaluate(0)
	if err != nil {
		return err
	}
	if err := l.dir.LogMetrics(0, m); err != nil {
		return err
	}
	what := fmt.Sprintf("%d prompts", len(l.eval.val))
	if l.gen.flow != nil {
		what = fmt.Sprintf("%d samples", flowValSamples)
	}
	l.con.printf("validation before training: accuracy %.3f (%s)\n", m["val/accuracy"], what)
	return nil
}

// evaluate runs validation with the current rollout model.
func (l *loop) evaluate(id int) (map[string]float64, error) {
	t := time.Now()
	m, err := l.eval.run(uint64(l.rec.Knobs.Seed) ^ 0xe7a1)
	l.res.Phases["eval"] += time.Since(t)
	if err != nil {
		return nil, err
	}
	if l.res.FirstVal == nil {
		l.res.FirstVal = m
	}
	l.res.LastVal = m
	if err := l.dir.LogEvent(rundir.Event{Type: rundir.EventEval, Rollout: id, Metrics: m}); err != nil {
		return nil, err
	}
	return m, nil
}

// rollout is one iteration of the outer loop: generate, num_train_passes
// train steps, update weights, evaluate at the cadence; the metrics of its
// optimizer steps are logged at its end.
func (l *loop) rollout(id int) error {
	k := l.rec.Knobs
	t0 := time.Now()
	l.rowAdv = nil
	b, err := l.gen.generate(id)
	if err != nil {
		return err
	}
	tGen := time.Since(t0)
	l.res.Phases["generate"] += tGen
	base := l.gen.rolloutMetrics(id, b)
	var tp trained
	if b.data.Len() == 0 {
		err = l.skip(id, b)
	} else {
		l.releaseBeforeTrain() // run_memory.go
		tp, err = l.trainPasses(id, b.data)
	}
	if err != nil {
		return err
	}
	if b.wf != nil {
		for name, v := range b.wf.advantageMetrics(l.primary.name(), l.rowAdv) {
			base[name] = v
		}
	}
	t := time.Now()
	if err := l.updateWeights(); err != nil {
		return err
	}
	tUpd := time.Since(t)
	l.releaseAfterTrain()
	l.res.Phases["update_weights"] += tUpd
	var val map[string]float64
	if k.EvalEvery > 0 && (id+1)%k.EvalEvery == 0 || id == k.NumRollout-1 || l.epochsDone() {
		if val, err = l.evaluate(id); err != nil {
			return err
		}
	}
	if k.LogEpisodesEvery > 0 && id%k.LogEpisodesEvery == 0 {
		if err := l.logEpisodes(id, b); err != nil {
			return err
		}
	}
	perf := perfMetrics(b.genTokens, tGen, tp, tUpd, time.Since(t0))
	return l.logMetrics(tp.records, base, perf, val)
}

// perfMetrics are a rollout's phase times and throughputs: genTokens
// generated in tGen, tp trained, the weights updated in tUpd, all in elapsed.
func perfMetrics(genTokens int, tGen time.Duration, tp trained, tUpd, elapsed time.Duration) map[string]float64 {
	perf := map[string]float64{"time/generate": tGen.Seconds(), "time/sync": tp.sync.Seconds(),
		"time/train": tp.train.Seconds(), "time/update_weights": tUpd.Seconds(),
		"perf/tokens_per_s": float64(genTokens+tp.tokens) / elapsed.Seconds()}
	if genTokens > 0 {
		perf["perf/generate_tokens_per_s"] = float64(genTokens) / tGen.Seconds()
	}
	if tp.train > 0 {
		perf["perf/train_tokens_per_s"] = float64(tp.tokens) / tp.train.Seconds()
	}
	if tp.slots > 0 { // the share of the trained positions that were padding (see knobs.pack)
		perf["perf/train_pad_frac"] = 1 - float64(tp.realTokens)/float64(tp.slots)
		perf["perf/train_micro_batches"] = float64(tp.microBatches) // fewer, fuller ones packed
	}
	return perf
}

// skip records that rollout id has no data to train on: dynamic sampling
// kept nothing within max_num_gen_batches.
func (l *loop) skip(id int, b *batch) error {
	ev := rundir.Event{Type: rundir.EventStepSkipped, Rollout: id, Message: "no group survived rejection"}
	if b.wf != nil {
		ev.Message, ev.Metrics = "no episode survived compact filtering and rejection", b.metrics
	}
	return l.dir.LogEvent(ev)
}

// trainPasses takes num_train_passes train steps on rollout id's data d,
// each pass after the first on d reshuffled with a seed of the run, the
// rollout and the pass; it stops at total_batches.
func (l *loop) trainPasses(id int, d *rollout.Rollout) (trained, error) {
	k := l.rec.Knobs
	var out trained
	for pass := range max(k.NumTrainPasses, 1) {
		pd := d
		if pass > 0 {
			var err error
			if pd, err = l.reshuffle(d, uint64(k.Seed)+uint64(id)+uint64(pass)*100003); err != nil {
				return out, err
			}
		}
		t, err := l.train.step(id, pass, pd)
		if err != nil {
			return out, err
		}
		l.res.Phases["sync"] += t.sync
		l.res.Phases["train"] += t.train
		if l.rowAdv == nil { // the first pass's: rows in generation order
			l.rowAdv = l.train.rowAdv
		}
		out.sync += t.sync
		out.train += t.train
		out.tokens += t.tokens
		out.slots += t.slots
		out.realTokens += t.realTokens
		out.microBatches += t.microBatches
		out.records = append(out.records, t.records...)
		if k.TotalBatches > 0 && l.state.Step >= k.TotalBatches {
			break
		}
	}
	return out, nil
}

// logMetrics writes a rollout's records to metrics.jsonl, each with the
// rollout's metrics (base) and phase times (perf), the last with the
// validation metrics val; with no record, base is what the console shows.
func (l *loop) logMetrics(records []map[string]float64, base, perf, val map[string]float64) error {
	for i, rec := range records {
		for name, v := range base {
			rec[name] = v
		}
		for name, v := range perf {
			rec[name] = v
		}
		if i == len(records)-1 {
			for name, v := range val {
				rec[name] = v
			}
		}
		if err := l.dir.LogMetrics(int(rec["step"]), withoutStep(rec)); err != nil {
			return err
		}
	}
	if len(records) > 0 {
		l.last = records[len(records)-1]
	} else {
		l.last = base
	}
	return nil
}

// epochsDone reports whether the run has handed out total_epochs passes
// over the train split (never when total_epochs is 0).
func (l *loop) epochsDone() bool {
	k := l.rec.Knobs
	return k.TotalEpochs > 0 && l.gen != nil && l.gen.feed != nil &&
		l.gen.feed.Cursor >= k.TotalEpochs*len(l.gen.feed.train)
}

// plannedRollouts is the number of rollouts the run expects under knobs k:
// num_rollout, capped by total_epochs at ceil(total_epochs · train examples
// / examples per rollout). Dynamic sampling may draw more examples per
// rollout and end the epochs sooner; the loop stops on the data it has
// really handed out (epochsDone).
func (l *loop) plannedRollouts(k schema.Knobs) int {
	n := k.NumRollout
	per := kindOf(l.kind).drawn(k)
	if per <= 0 {
		return n // e.g. the flow sampler draws no examples
	}
	if k.TotalEpochs > 0 && l.nTrain > 0 {
		n = min(n, (k.TotalEpochs*l.nTrain+per-1)/per)
	}
	return n
}

func withoutStep(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if k != "step" {
			out[k] = v
		}
	}
	return out
}

// reshuffle permutes the rows of d by whole units (pairs stay together).
func (l *loop) reshuffle(d *rollout.Rollout, seed uint64) (*rollout.Rollout, error) {
	if l.gen != nil && l.gen.workflow != nil {
		return reshuffleTrajectories(d, seed)
	}
	units := d.Len() / l.unit
	perm := rand.New(rand.NewPCG(seed, 0x5bd1e995)).Perm(units)
	idx := make([]int, 0, d.Len())
	for _, u := range perm {
		for j := range l.unit {
			idx = append(idx, u*l.unit+j)
		}
	}
	for i := units * l.unit; i < d.Len(); i++ {
		idx = append(idx, i)
	}
	return d.Select(idx)
}
