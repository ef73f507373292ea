package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/schema"
)

// checkpointer writes the checkpoint of a rollout (every trainable role's
// weights, optimizer and RNG state, and the loop state) and, when resuming,
// restores the last usable one; openResume rejects the checkpoints that
// fail their checks.
type checkpointer struct {
	*env
	*roleSet
	resume *resumePoint // set when resuming
	// The loop state a checkpoint holds besides the roles: the loop's
	// counters, its sampling RNG and the data position.
	state *loopState
	rng   *rand.PCG
	feed  *feeder
}

// open creates the run directory, or takes over the directory of the run
// being resumed and restores the trainers and the loop state from its last
// complete checkpoint.
func (c *checkpointer) open() error {
	k := c.rec.Knobs
	rp := c.resume
	if rp == nil {
		text, err := schema.Format(c.rec, "cue")
		if err != nil {
			return err
		}
		now := time.Now
		if c.opts.Now != nil {
			now = c.opts.Now
		}
		root := c.opts.RunsDir
		if root == "" {
			root = "runs"
		}
		if c.dir, err = createRunDir(c.opts.Group, root, c.rec.Name, now()); err != nil {
			return err
		}
		if err := c.dir.WriteRecipe(1, text); err != nil {
			return err
		}
		c.nameLoRABases()
		if err := c.keepInitial(); err != nil {
			return err
		}
		c.state.Rollout = -1
		return c.dir.LogEvent(rundir.Event{Type: rundir.EventRunStart, Rollout: 0, Version: 1,
			Message: c.backend.Describe()})
	}
	c.dir = rp.dir
	c.nameLoRABases()
	for _, n := range c.dir.Notes() {
		c.con.printf("resume: %s\n", n)
	}
	// config.cue is the recipe in force: the checkpoint's version, until a
	// reload below or later records the next.
	if err := c.dir.WriteRecipe(rp.version, rp.text); err != nil {
		return fmt.Errorf("resume %s: %w", c.opts.Resume, err)
	}
	c.version = rp.version
	*c.state = rp.state
	for _, r := range c.roles {
		if r.trainer == nil {
			continue
		}
		if _, err := r.trainer.LoadCheckpoint(rp.cp.RolePath(r.name())); err != nil {
			return fmt.Errorf("resume role %q: %w", r.name(), err)
		}
		// The schedule follows the running recipe, not the saved one.
		if err := r.trainer.SetSchedule(schedule(k, max(c.total, 1))); err != nil {
			return err
		}
	}
	if err := c.rng.UnmarshalBinary(c.state.RNG); err != nil {
		return fmt.Errorf("resume: rng: %w", err)
	}
	c.feed.Cursor = c.state.Cursor
	if err := c.dir.TruncateMetricsAfter(c.state.Step); err != nil {
		return err
	}
	if err := c.dir.TruncateEpisodesAfter(c.state.Rollout); err != nil {
		return err
	}
	c.con.printf("resuming %s from the checkpoint of rollout %d (step %d, recipe v%d)\n", c.dir.Path(), c.state.Rollout+1, c.state.Step, c.version)
	return c.dir.LogEvent(rundir.Event{Type: rundir.EventRunResume, Rollout: c.state.Rollout, Version: c.version, Checkpoint: rp.cp.Path})
}

// nameLoRABases makes the saved adapters of LoRA roles on a built-in base name the copy of
// that base in the run directory (keepInitial writes it) as their base model.
func (c *checkpointer) nameLoRABases() {
	for _, r := range c.roles {
		if r.model != nil && r.model.LoRA() != nil && r.dir == "" {
			if p, err := filepath.Abs(c.dir.InitialPath(r.name())); err == nil {
				r.model.SetAdapterBase(p)
			}
		}
	}
}

// keepInitial keeps in the run directory the initial weights that a resume
// needs and no checkpoint holds: those of frozen roles and of the frozen
// reference of with_ref roles, where they come from a model directory.
// Hard links cost nothing; where they fail the files are copied, which is
// reported.
func (c *checkpointer) keepInitial() error {
	if !c.dir.Writes() {
		return nil // node 0 keeps them
	}
	for _, r := range c.roles {
		if r.model != nil && r.model.LoRA() != nil && r.dir == "" {
			// A built-in base has no directory for saved adapters to name: it is written
			// once into the run directory, where `stx merge` finds it.
			if err := r.model.SaveHF(c.dir.InitialPath(r.name()), 0); err != nil {
				return fmt.Errorf("role %q: base of the adapters: %w", r.name(), err)
			}
			continue
		}
		// A LoRA role resumes from its base and its saved adapters: its base is kept.
		lora := r.model != nil && r.model.LoRA() != nil
		if r.flow != nil || r.dir == "" || (r.ref == nil && r.trainer != nil && !lora) {
			continue
		}
		files, err := modelFiles(r.dir)
		if err != nil {
			return fmt.Errorf("role %q: %w", r.name(), err)
		}
		copied, err := c.dir.KeepInitial(r.name(), files)
		if err != nil {
			return err
		}
		if copied > 0 {
			msg := fmt.Sprintf("role %q: copied %d bytes of initial weights from %s into %s (hard links failed), so that resuming does not need the source",
				r.name(), copied, r.dir, c.dir.InitialPath(r.name()))
			c.con.printf("%s\n", msg)
			if err := c.dir.LogEvent(rundir.Event{Type: rundir.EventWarning, Message: msg}); err != nil {
				return err
			}
		}
	}
	return nil
}

// save writes the checkpoint of rollout id: every trainable role's model
// (Hugging Face layout), optimizer and RNG state, and the loop state.
func (c *checkpointer) save(id int) error {
	if !c.dir.Writes() {
		// Node 0 saves. (With weights sharded across processes, the other nodes will have
		// to take part in gathering them before this return.)
		return nil
	}
	t := time.Now()
	c.state.Rollout = id
	c.state.Version = c.version
	c.state.Cursor = c.feed.Cursor
	rng, err := c.rng.MarshalBinary()
	if err != nil {
		return err
	}
	c.state.RNG = rng
	p, err := c.dir.BeginCheckpoint(id)
	if err != nil {
		return err
	}
	defer p.Abort()
	for _, r := range c.roles {
		if !r.trainable() {
			continue
		}
		dir, err := p.RoleDir(r.name())
		if err != nil {
			return err
		}
		if err := r.trainer.SaveCheckpoint(dir, rng); err != nil {
			return fmt.Errorf("checkpoint role %q: %w", r.name(), err)
		}
		if err := writeSideFiles(r.side, dir); err != nil {
			return fmt.Errorf("checkpoint role %q: %w", r.name(), err)
		}
	}
	data, err := json.Marshal(c.state)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.Path(), engineFile), data, 0o644); err != nil {
		return err
	}
	if err := p.Commit(); err != nil {
		return err
	}
	if err := c.dir.LogEvent(rundir.Event{Type: rundir.EventCheckpointSaved, Rollout: id, Checkpoint: p.Target(),
		Metrics: map[string]float64{"time_s": time.Since(t).Seconds()}}); err != nil {
		return err
	}
	_, err = c.dir.Prune(c.rec.Knobs.KeepCheckpoints)
	return err
}

// writeSideFiles puts a role's tokenizer and generation files (read when
// the run started) beside the saved weights, so that the saved role opens
// in other tools unchanged.
func writeSideFiles(side map[string][]byte, to string) error {
	for name, data := range side {
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// engineFile is the loop's own state in every checkpoint.
const engineFile = "engine.json"

// loopState is what a checkpoint needs beyond the roles' trainers to continue
// exactly where the run was: the next rollout, the step counter, the data
// position and the sampler's RNG.
type loopState struct {
	Rollout int    `json:"rollout"` // the rollout the checkpoint completed
	Step    int    `json:"step"`
	Cursor  int    `json:"cursor"`
	RNG     []byte `json:"rng"`
	// Version is the recipe version in force at the checkpoint
	// (recipes/v<N>.cue); a resumed run starts from it.
	Version int `json:"version,omitempty"`
}

// resumePoint is where a resumed run starts: its run directory, last
// complete checkpoint, the loop state saved there and the recipe version
// that was in force at that checkpoint.
type resumePoint struct {
	dir     *rundir.Dir
	cp      rundir.Checkpoint
	state   loopState
	version int
	text    []byte
	recipe  *schema.Recipe
}

// openResume opens the run to resume and reads its last usable checkpoint,
// including the recipe version in force there (v1 for checkpoints written
// before versions were recorded). A checkpoint that fails its checks
// (checksums, engine.json) is rejected: moved aside
// with a message on the console and in events.jsonl, never deleted, and
// the previous complete checkpoint is tried.
func openResume(n GroupNode, path, name string) (_ *resumePoint, err error) {
	d, err := openRunDir(n, path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if _, err := d.Clean(); err != nil {
		return nil, err
	}
	cps, err := d.Checkpoints()
	if err != nil {
		return nil, err
	}
	if len(cps) == 0 {
		if notes := d.Notes(); len(notes) > 0 {
			return nil, fmt.Errorf("resume %s: no complete checkpoint:\n%s", path, indent(strings.Join(notes, "\n")))
		}
		return nil, fmt.Errorf("resume %s: no complete checkpoint", path)
	}
	var rejected []string
	for i := len(cps) - 1; i >= 0; i-- {
		rp, why := readResumePoint(d, cps[i])
		if why == nil {
			// The recipe version belongs to the run, not to the checkpoint:
			// failing to load it is an error, not a reason to fall back.
			if rp.text, err = d.ReadRecipe(rp.version); err != nil {
				return nil, fmt.Errorf("resume %s: %w", path, err)
			}
			if rp.recipe, err = loadRecipeText(filepath.Join(path, rundir.RecipesDir, fmt.Sprintf("v%d.cue", rp.version)), name); err != nil {
				return nil, fmt.Errorf("resume %s: recipe v%d: %w", path, rp.version, err)
			}
			return rp, nil
		}
		if _, err := d.Reject(cps[i].Path, cps[i].Rollout, why.Error()); err != nil {
			return nil, fmt.Errorf("resume %s: %w", path, err)
		}
		rejected = append(rejected, fmt.Sprintf("%s: %v", filepath.Base(cps[i].Path), why))
	}
	return nil, fmt.Errorf("resume %s: no usable checkpoint; rejected and moved aside:\n%s", path, indent(strings.Join(rejected, "\n")))
}

// readResumePoint reads one checkpoint to resume from; an error says why
// the checkpoint cannot be used.
func readResumePoint(d *rundir.Dir, cp rundir.Checkpoint) (*resumePoint, error) {
	if err := cp.Verify(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(cp.Path, engineFile))
	if err != nil {
		return nil, err
	}
	rp := &resumePoint{dir: d, cp: cp}
	if err := json.Unmarshal(data, &rp.state); err != nil {
		return nil, fmt.Errorf("%s: %w", engineFile, err)
	}
	if err := rp.state.check(cp.Rollout); err != nil {
		return nil, fmt.Errorf("%s: %w", engineFile, err)
	}
	rp.version = max(rp.state.Version, 1)
	return rp, nil
}

// check range-checks a loop state read from a checkpoint of rollout: the
// values index data, size schedules and seed the sampler, so a damaged or
// edited engine.json must fail here rather than later and stranger.
func (s loopState) check(rollout int) error {
	switch {
	case s.Rollout != rollout:
		return fmt.Errorf("rollout %d in the checkpoint of rollout %d", s.Rollout, rollout)
	case s.Step < 0:
		return fmt.Errorf("negative step %d", s.Step)
	case s.Step > maxStateCount:
		return fmt.Errorf("step %d is beyond any run (limit %d)", s.Step, maxStateCount)
	case s.Cursor < 0:
		return fmt.Errorf("negative data cursor %d", s.Cursor)
	case s.Cursor > maxStateCount:
		return fmt.Errorf("data cursor %d is beyond any run (limit %d)", s.Cursor, maxStateCount)
	case s.Version < 0:
		return fmt.Errorf("negative recipe version %d", s.Version)
	}
	var pcg rand.PCG
	if err := pcg.UnmarshalBinary(s.RNG); err != nil {
		return fmt.Errorf("rng: %w", err)
	}
	return nil
}

// maxStateCount bounds the counters of engine.json (steps, data position):
// 2^40 is more than any run reaches, and far from overflowing what they
// are multiplied with.

const maxStateCount = 1 << 40
