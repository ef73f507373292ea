package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"stx.dev/stx/engine/reload"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// ReloadOptions make a run follow edits of its recipe files (hot reload:
// changed hot knobs take effect at the next rollout boundary).
type ReloadOptions struct {
	// Files are the recipe files or package directories the recipe was
	// loaded from, as given on the command line. They are watched, and
	// re-loaded with Load when an edit settles.
	Files []string
	// Load are the run's loading options: the same --set overrides and
	// environment, so that they stay applied on top of every reload. Only is
	// set to the running recipe.
	Load schema.Options
	// Debounce is the quiet time after the last edit before a reload
	// (reload.DefaultDebounce when zero).
	Debounce time.Duration
}

// runHooks let tests act at points of a run; nil fields do nothing.
type runHooks struct {
	// boundary runs at each rollout boundary before a pending reload is
	// taken; w is nil when the run does not watch its files.
	boundary func(id int, w *reloader)
	// afterReload runs at each rollout boundary after the reload, if any,
	// was applied.
	afterReload func(id int, w *reloader)
	// watchLog receives the watcher's diagnostics as they happen (from the
	// watcher's goroutine).
	watchLog func(msg string)
	// rolloutFault, when set, runs before each generation attempt of an RL
	// rollout; an error it returns fails that attempt (the retry path).
	rolloutFault func(id, attempt int) error
	// fillAhead makes a run with max_staleness k wait, before training each rollout,
	// until the rollouts generated ahead fill its queue (async.go): the staleness of every
	// rollout is then fixed.
	fillAhead bool
	// staleness, when set, returns the max_staleness in force when rollout id is taken
	// from k, the recipe's: a hot change at the boundary before it.
	staleness func(id, k int) int
}

// knobUse says how a hot knob (schema @knob(hot)) reaches a running job.
type knobUse int

const (
	// useLoop knobs are read from the running recipe at every rollout: loop
	// bounds, cadences, sampler options, rejection sampling.
	useLoop knobUse = iota + 1
	// useSchedule knobs form the LR schedule, a graph input of the trainer
	// (Trainer.SetSchedule: no recompilation, AdamW moments untouched).
	useSchedule
	// useHost knobs are read by specializations on the host (batch inputs
	// such as coef_entropy and the actor's clip bounds, advantages, β of
	// the mixed CE + K3 blend): the roles' host-side specializations are
	// rebuilt with the new knobs, while the compiled loss reads them from the batch.
	useHost
)

// hotKnobUses classifies the schema's hot knobs for this engine: it is the one
// place besides the schema's @knob(hot) annotations that names them, and says
// only what the schema cannot (how the engine reads each). Knobs that are
// constants of a compiled graph (dual_clip_c, β, weight decay, ...) are
// @knob(cold) in the schema, so `stx knobs` tells users the truth. A hot knob
// missing here (a schema change) gets 0 and is refused: it can never slip into
// a running job unread; no default use is safe, since a knob compiled into a
// loss would be taken and never read. TestEveryHotKnobIsClassified derives the
// hot set from schema.KnobDocs and requires this table to equal it.
var hotKnobUses = func() map[string]knobUse {
	m := map[string]knobUse{}
	for use, names := range map[knobUse][]string{
		useLoop: {"num_rollout", "total_batches", "total_epochs", "num_train_passes",
			"temperature", "top_p", "top_k",
			"eval_every", "save_every", "keep_checkpoints", "log_episodes_every",
			"n_val_samples_per_prompt", "max_val_prompts", "correct_threshold",
			"min_trajs_per_group", "filter_uniform_groups", "min_partial_solve_tasks",
			"dynamic_sampling", "max_num_gen_batches", "rollout_retries", "max_staleness"},
		useSchedule: {"lr", "lr_schedule", "warmup_ratio", "warmup_steps", "min_lr_ratio"},
		useHost: {"entropy_coef", "kl_loss_coef", "kl_coef",
			"norm_adv_by_std", "adv_epsilon", "std_ddof", "gamma", "lambda", "whiten_advantages",
			"kl_penalty_coef", "kl_discount_factor",
			"beta_start", "beta_end", "beta_decay_rollouts",
			"flow_sigma_sampling",
			// The actor's PPO/GSPO/CISPO clip bounds are scalar batch inputs.
			"clip_ratio_low", "clip_ratio_high", "gspo_seq_logratio_max", "cispo_clip_low", "cispo_clip_high"},
	} {
		for _, n := range names {
			if _, dup := m[n]; dup {
				panic("engine: hot knob " + n + " classified twice")
			}
			m[n] = use
		}
	}
	return m
}()

// hotKnobUse says how this engine reads hot knob name, or 0 and why it cannot.
func hotKnobUse(name string) (knobUse, string) {
	if use, ok := hotKnobUses[name]; ok {
		return use, ""
	}
	return 0, "not known to this engine's hot reload"
}

// reloader is a run's watcher with what the loop needs around it: the
// watcher's diagnostics, kept for the loop to print (the console is not
// safe for concurrent use), and an outcome taken early by waitFor.
type reloader struct {
	files []string
	opts  schema.Options // the options files are loaded with
	w     *reload.Watcher
	hook  func(string)

	mu   sync.Mutex
	logs []string
	held *reload.Update
}

// startWatch starts watching the recipe files of opts.Reload (nil when the
// run watches nothing). The reload is `stx vet`'s pipeline (Load) with the
// run's options, then the named recipe out of the catalog.
func startWatch(name string, opts RunOptions) (*reloader, error) {
	ro := opts.Reload
	if ro == nil || len(ro.Files) == 0 {
		return nil, nil
	}
	files := slices.Clone(ro.Files)
	lo := ro.Load
	lo.Only = name
	load := func() (*schema.Recipe, error) {
		cat, err := Load(files, lo)
		if err != nil {
			return nil, err
		}
		r, ok := cat.Recipes[name]
		if !ok {
			return nil, fmt.Errorf("recipe %q is no longer defined in %s", name, strings.Join(files, ", "))
		}
		return r, nil
	}
	r := &reloader{files: files, opts: lo}
	if opts.hooks != nil {
		r.hook = opts.hooks.watchLog
	}
	w, err := reload.New(files, load, reload.Options{Debounce: ro.Debounce, Logf: r.logf})
	if err != nil {
		return nil, fmt.Errorf("hot reload: %w", err)
	}
	r.w = w
	return r, nil
}

func (r *reloader) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.logs = append(r.logs, msg)
	r.mu.Unlock()
	if r.hook != nil {
		r.hook(msg)
	}
}

// takeLogs returns the diagnostics not printed yet.
func (r *reloader) takeLogs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.logs
	r.logs = nil
	return out
}

// take returns the newest reload outcome not applied yet.
func (r *reloader) take() (reload.Update, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.w.Poll(); ok {
		r.held = nil
		return u, true
	}
	if r.held != nil {
		u := *r.held
		r.held = nil
		return u, true
	}
	return reload.Update{}, false
}

// vet runs `stx vet`'s pipeline on a resolved recipe in memory, citing the
// watched files in its errors; a nil r (a run that watches no files) cites
// the rendered recipe.
func (r *reloader) vet(rec *schema.Recipe) error {
	if r == nil {
		return Check(rec, nil, schema.Options{})
	}
	return Check(rec, r.files, r.opts)
}

func (r *reloader) close() {
	if r != nil && r.w != nil {
		r.w.Close()
	}
}

// hotReload applies edits of the recipe at rollout boundaries: the hot
// knobs that can take effect become a new recipe version, the rest is
// refused with the reason; an invalid edit leaves the recipe in force.
type hotReload struct {
	*env
	*roleSet
	watch *reloader // nil when the recipe files are not watched
	gen   *rolloutGen
	// steps is the number of optimizer steps the LR schedule spans under
	// knobs k (loop.scheduleSteps).
	steps func(k schema.Knobs) int
}

// applyPendingReload is the rollout boundary where edits take effect: the
// newest settled edit of the recipe files is applied (hot knobs), refused
// (changes that need a restart) or reported invalid (the last good recipe
// stays in force). The loop, the rollout side and the specializations read
// the running recipe afresh at every rollout, so what is applied here is in
// force from rollout id+1.
func (h *hotReload) applyPendingReload(id int) (err error) {
	if hk := h.opts.hooks; hk != nil && hk.boundary != nil {
		hk.boundary(id, h.watch)
	}
	if h.watch == nil {
		return nil
	}
	for _, msg := range h.watch.takeLogs() {
		h.con.printf("%s\n", msg)
	}
	if u, ok := h.watch.take(); ok {
		if u.Err != nil {
			err = h.reloadInvalid(id, u.Err)
		} else {
			err = h.reloadTo(id, u.Recipe)
		}
		if err != nil {
			return err
		}
	}
	if hk := h.opts.hooks; hk != nil && hk.afterReload != nil {
		hk.afterReload(id, h.watch)
	}
	return nil
}

// reloadInvalid reports an edit that failed `stx vet`: the errors with
// their positions, and the recipe version that stays in force.
func (h *hotReload) reloadInvalid(id int, err error) error {
	msg := err.Error()
	h.con.printf("reload after rollout %d: the edit is invalid; recipe v%d stays in force:\n%s\n", id+1, h.version, indent(msg))
	h.con.event("reload_invalid", map[string]any{"rollout": id + 1, "version": h.version, "message": msg})
	return h.dir.LogEvent(rundir.Event{Type: rundir.EventReloadInvalid, Rollout: id, Version: h.version, Message: msg})
}

// reloadTo moves the run toward recipe disk (a reloaded or, on resume, the
// current recipe files) at the boundary after rollout id: hot knobs that can
// take effect are applied as a new recipe version, everything else is
// refused with the reason and the run goes on with it unchanged.
func (h *hotReload) reloadTo(id int, disk *schema.Recipe) error {
	ch, err := reload.Diff(h.rec, disk)
	if err != nil {
		return err
	}
	refused := slices.Clone(ch.Structural)
	var live []reload.KnobChange
	for _, c := range ch.Hot {
		if why := h.pinned(c.Knob); why != "" {
			refused = append(refused, fmt.Sprintf("%s (hot, but %s)", c, why))
			continue
		}
		live = append(live, c)
	}
	var next *schema.Recipe
	var commit func() error
	if len(live) > 0 {
		next = reload.Apply(h.rec, reload.Changes{Hot: live})
		if len(refused) > 0 {
			// The hot changes were checked together with the refused ones;
			// alone on the running recipe they must pass vet again.
			if err := h.watch.vet(next); err != nil {
				refused = append(refused, fmt.Sprintf("the hot changes fail vet without the others: %v", err))
				live = nil
			}
		}
		if live != nil {
			if commit, err = h.prepare(next); err != nil {
				refused = append(refused, fmt.Sprintf("the hot changes cannot be applied: %v", err))
				live = nil
			}
		}
	}
	if len(refused) > 0 {
		if err := h.reloadRefused(id, refused); err != nil {
			return err
		}
	}
	if len(live) == 0 {
		return nil
	}
	text, err := schema.Format(next, "cue")
	if err != nil {
		return err
	}
	version, err := h.nextVersion()
	if err != nil {
		return err
	}
	if err := h.dir.WriteRecipe(version, text); err != nil {
		return err
	}
	if err := commit(); err != nil {
		return err
	}
	h.version = version
	changes := make([]rundir.Change, len(live))
	lines := make([]string, len(live))
	for i, c := range live {
		changes[i] = rundir.Change{Knob: c.Knob, Old: c.Old, New: c.New}
		lines[i] = c.String()
	}
	h.con.printf("reload after rollout %d: recipe v%d in force from rollout %d:\n%s\n", id+1, version, id+2, indent(strings.Join(lines, "\n")))
	h.con.event("reload_applied", map[string]any{"rollout": id + 1, "version": version, "changes": changes})
	return h.dir.LogEvent(rundir.Event{Type: rundir.EventReloadApplied, Rollout: id, Version: version, Changes: changes})
}

// reloadRefused reports changes that need a restart.
func (h *hotReload) reloadRefused(id int, lines []string) error {
	msg := strings.Join(lines, "\n")
	h.con.printf("reload after rollout %d: refused, a restart is needed for these changes; the run goes on unchanged:\n%s\n", id+1, indent(msg))
	h.con.event("reload_refused", map[string]any{"rollout": id + 1, "version": h.version, "message": msg})
	return h.dir.LogEvent(rundir.Event{Type: rundir.EventReloadRefused, Rollout: id, Version: h.version, Message: msg})
}

// pinned says why a hot knob cannot take effect in this run ("" when it can).
func (h *hotReload) pinned(knob string) string {
	use, why := hotKnobUse(knob)
	switch use {
	case useLoop, useHost, useSchedule:
		return ""
	}
	return why
}

// prepare checks that the run can take recipe next (schedule, the roles'
// specializations with the new knobs) and returns the commit that switches
// to it; nothing changes before the commit.
func (h *hotReload) prepare(next *schema.Recipe) (func() error, error) {
	total := h.steps(next.Knobs)
	sched := schedule(next.Knobs, max(total, 1))
	if err := sched.Validate(); err != nil {
		return nil, err
	}
	specs := make([]specializations.Specialization, len(h.roles))
	for i, r := range h.roles {
		s, err := specializations.New(specializations.RoleConfig{Role: r.node.Role, Knobs: next.Knobs})
		if err != nil {
			return nil, err
		}
		if _, ok := s.(specializations.Flow); ok != (r.flow != nil) {
			return nil, fmt.Errorf("role %q: the specialization no longer runs the kind of model the role has", r.name())
		}
		specs[i] = s
	}
	return func() error {
		// The trainers keep their compiled loss (built from the specialization
		// they were given): only host-side work uses the new specialization,
		// which is why knobs compiled into the loss are refused above.
		for i, r := range h.roles {
			r.spec = specs[i]
			if r.trainer != nil {
				if err := r.trainer.SetSchedule(sched); err != nil {
					return fmt.Errorf("role %q: %w", r.name(), err)
				}
			}
		}
		h.rec = next
		h.gen.rec = next
		h.total = total
		return nil
	}, nil
}

// nextVersion is the number of the next recipe version: after every
// recorded one, so a resumed run never rewrites the history of versions
// applied after its checkpoint.
func (h *hotReload) nextVersion() (int, error) {
	vs, err := h.dir.RecipeVersions()
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 1, nil
	}
	return vs[len(vs)-1] + 1, nil
}

// loadRecipeText loads recipe name from a file of resolved recipe text
// (recipes/v<N>.cue, config.cue), without any override.
func loadRecipeText(path, name string) (*schema.Recipe, error) {
	cat, err := Load([]string{path}, schema.Options{Only: name})
	if err != nil {
		return nil, err
	}
	r, ok := cat.Recipes[name]
	if !ok {
		if len(cat.Names) != 1 {
			return nil, fmt.Errorf("%s: want recipe %q, found %v", path, name, cat.Names)
		}
		if r, ok = cat.Recipes[cat.Names[0]]; !ok {
			return nil, fmt.Errorf("%s: recipe %q is not valid", path, cat.Names[0])
		}
	}
	return r, nil
}

// indent prefixes every line with two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
