package engine

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	gomlxctx "github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/engine/reload"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// hotRecipe is the text of a tiny SFT recipe file: one optimizer step per
// rollout, no evaluation, no checkpoints but the last. desc marks each edit
// (a description is not a change, so it only identifies the content).
type hotRecipe struct {
	desc       string
	lr         float64
	seed       int
	numRollout int
	extra      string // more knob lines, valid or not
}

func (h hotRecipe) text() string {
	seed := h.seed
	if seed == 0 {
		seed = 1234
	}
	return fmt.Sprintf(`package stx

recipes: sft: {
	description: %q
	roles: [{name: "policy", specialization: "sft"}]
	syncs: []
	knobs: {
		seed:                 %d
		num_rollout:          %d
		rollout_batch_size:   2
		n_samples_per_prompt: 1
		micro_batch_size:     2
		lr:                   %g
		lr_schedule:          "constant"
		eval_every:           0
		save_every:           0
		eval_before_train:    false
%s
	}
	task: {train_size: 16, validation_size: 2}
}
`, h.desc, seed, h.numRollout, h.lr, h.extra)
}

// saveStyle is how an editor writes a file.
type saveStyle int

const (
	atomicRename   saveStyle = iota // write a temporary file, rename it over the recipe
	inPlace                         // open with truncation and write
	truncateWrite                   // truncate, then write later
	deleteRecreate                  // remove, then create later
)

// save writes text to path in style; between the two halves of a
// truncate-then-write or delete-and-recreate it calls between (nil: none).
func save(t *testing.T, path, text string, style saveStyle, between func()) {
	t.Helper()
	var err error
	switch style {
	case atomicRename:
		tmp := filepath.Join(filepath.Dir(path), ".recipe.cue.swp")
		if err = os.WriteFile(tmp, []byte(text), 0o644); err == nil {
			err = os.Rename(tmp, path)
		}
	case inPlace:
		err = os.WriteFile(path, []byte(text), 0o644)
	case truncateWrite, deleteRecreate:
		if style == truncateWrite {
			err = os.Truncate(path, 0)
		} else {
			err = os.Remove(path)
		}
		if err == nil && between != nil {
			between()
		}
		if err == nil {
			var f *os.File
			if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
				_, err = f.WriteString(text)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
	}
	if err != nil {
		t.Errorf("save %s: %v", path, err)
	}
}

// logWaiter collects the watcher's diagnostics so that a test can wait for
// one ("... is empty; waiting for the save to finish") instead of sleeping.
type logWaiter chan string

func (c logWaiter) hook(msg string) {
	select {
	case c <- msg:
	default:
	}
}

func (c logWaiter) waitFor(t *testing.T, substr string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case msg := <-c:
			if strings.Contains(msg, substr) {
				return
			}
		case <-deadline:
			t.Errorf("the watcher never logged %q", substr)
			return
		}
	}
}

// byDesc accepts the outcome of a valid load of the edit marked desc.
func byDesc(desc string) func(reload.Update) bool {
	return func(u reload.Update) bool { return u.Err == nil && u.Recipe != nil && u.Recipe.Description == desc }
}

// byErr accepts an invalid load whose message holds substr.
func byErr(substr string) func(reload.Update) bool {
	return func(u reload.Update) bool { return u.Err != nil && strings.Contains(u.Err.Error(), substr) }
}

// startHotRun writes the recipe file and loads it as `stx run` does.
func startHotRun(t *testing.T, h hotRecipe, sets ...string) (path string, cat *schema.Catalog, opts RunOptions) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "recipe.cue")
	if err := os.WriteFile(path, []byte(h.text()), 0o644); err != nil {
		t.Fatal(err)
	}
	lo := schema.Options{Sets: sets, Only: "sft"}
	cat, err := Load([]string{path}, lo)
	if err != nil {
		t.Fatal(err)
	}
	return path, cat, RunOptions{RunsDir: t.TempDir(), Reload: &ReloadOptions{Files: []string{path}, Load: lo, Debounce: 30 * time.Millisecond}}
}

// events reads events.jsonl of a run, by type.
func eventsOf(t *testing.T, dir string, typ rundir.EventType) []rundir.Event {
	t.Helper()
	all, err := rundir.ReadEvents(filepath.Join(dir, rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []rundir.Event
	for _, e := range all {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// stepLRs are the learning rates the optimizer used, by 1-based step.
func stepLRs(t *testing.T, dir string) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for _, r := range trainRecords(metrics(t, dir)) {
		out[int(r["step"].(float64))] = num(t, r, "policy/lr")
	}
	return out
}

func TestHotReloadEditsDuringARun(t *testing.T) {
	const wait = 20 * time.Second
	base := hotRecipe{desc: "v1", lr: 1e-3, numRollout: 8}
	// --set keep_checkpoints stays applied over the file's own value.
	path, cat, opts := startHotRun(t, base, "knobs.keep_checkpoints=1")
	logs := make(logWaiter, 64)
	edit := func(w *reloader, h hotRecipe, style saveStyle, waitLog string, match func(reload.Update) bool) {
		var between func()
		if waitLog != "" {
			between = func() { logs.waitFor(t, waitLog) }
		}
		save(t, path, h.text(), style, between)
		if !w.waitFor(match, wait) {
			t.Errorf("edit %q: the watcher delivered no matching outcome", h.desc)
		}
	}
	opts.hooks = &runHooks{watchLog: logs.hook, boundary: func(id int, w *reloader) {
		h := base
		switch id {
		case 0:
			h.desc, h.lr = "rename", 2e-3
			edit(w, h, atomicRename, "", byDesc(h.desc))
		case 1:
			h.desc, h.lr, h.extra = "in place", 3e-3, "keep_checkpoints: 3"
			edit(w, h, inPlace, "", byDesc(h.desc))
		case 2:
			h.desc, h.lr = "truncate", 4e-3
			edit(w, h, truncateWrite, "is empty", byDesc(h.desc))
		case 3:
			h.desc, h.lr = "recreate", 5e-3
			edit(w, h, deleteRecreate, "is missing", byDesc(h.desc))
		case 4:
			h.desc, h.lr = "invalid", -5
			edit(w, h, inPlace, "", byErr("lr"))
		case 5:
			h.desc, h.lr, h.seed, h.extra = "structural", 5e-3, 7, "max_grad_norm: 0.5"
			edit(w, h, atomicRename, "", byDesc(h.desc))
		case 6:
			// Still the refused seed, now with hot changes: those apply.
			h.desc, h.lr, h.seed, h.numRollout = "mixed", 6e-3, 7, 9
			edit(w, h, inPlace, "", byDesc(h.desc))
		}
	}}
	res, err := Run(context.Background(), cat, "sft", opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 9 {
		t.Errorf("%d rollouts, want 9 (num_rollout extended at rollout 7)", res.Rollouts)
	}
	// The LR the optimizer used changes at the step after each applied edit.
	want := []float64{1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 5e-3, 5e-3, 6e-3, 6e-3}
	lrs := stepLRs(t, res.Dir)
	for i, w := range want {
		if got := lrs[i+1]; math.Abs(got-w) > 1e-12 {
			t.Errorf("step %d: lr %g, want %g", i+1, got, w)
		}
	}
	applied := eventsOf(t, res.Dir, rundir.EventReloadApplied)
	wantApplied := []struct {
		rollout, version int
		changes          string
	}{
		{0, 2, "lr 0.001→0.002"}, {1, 3, "lr 0.002→0.003"}, {2, 4, "lr 0.003→0.004"},
		{3, 5, "lr 0.004→0.005"}, {6, 6, "num_rollout 8→9, lr 0.005→0.006"},
	}
	if len(applied) != len(wantApplied) {
		t.Fatalf("%d reload_applied events, want %d: %+v", len(applied), len(wantApplied), applied)
	}
	for i, w := range wantApplied {
		e := applied[i]
		var cs []string
		for _, c := range e.Changes {
			cs = append(cs, fmt.Sprintf("%s %v→%v", c.Knob, c.Old, c.New))
		}
		if e.Rollout != w.rollout || e.Version != w.version || strings.Join(cs, ", ") != w.changes {
			t.Errorf("reload_applied %d: rollout %d v%d %q; want rollout %d v%d %q", i, e.Rollout, e.Version, strings.Join(cs, ", "), w.rollout, w.version, w.changes)
		}
	}
	inv := eventsOf(t, res.Dir, rundir.EventReloadInvalid)
	if len(inv) != 1 || inv[0].Rollout != 4 || !strings.Contains(inv[0].Message, "recipe.cue:") || !strings.Contains(inv[0].Message, "knobs.lr") {
		t.Errorf("reload_invalid: %+v; want one at rollout 4 with the error's position", inv)
	}
	ref := eventsOf(t, res.Dir, rundir.EventReloadRefused)
	if len(ref) != 2 || ref[0].Rollout != 5 || ref[1].Rollout != 6 {
		t.Fatalf("reload_refused: %+v; want rollouts 5 and 6", ref)
	}
	for _, s := range []string{"knobs.seed: 1234 → 7 (cold knob)", "knobs.max_grad_norm: 1 → 0.5 (cold knob)"} {
		if !strings.Contains(ref[0].Message, s) {
			t.Errorf("reload_refused message %q lacks %q", ref[0].Message, s)
		}
	}
	// Each applied version is kept; config.cue is the last; --set stays on.
	d, err := rundir.Open(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	vs, err := d.RecipeVersions()
	if err != nil || len(vs) != 6 {
		t.Fatalf("recipe versions %v, %v; want 1..6", vs, err)
	}
	v6, _ := d.ReadRecipe(6)
	cfg, _ := d.Config()
	if len(v6) == 0 || string(v6) != string(cfg) {
		t.Errorf("config.cue is not v6:\n%s", cfg)
	}
	r6, err := loadRecipeText(filepath.Join(res.Dir, rundir.RecipesDir, "v6.cue"), "sft")
	if err != nil {
		t.Fatal(err)
	}
	if k := r6.Knobs; k.LR != 6e-3 || k.NumRollout != 9 || k.Seed != 1234 || k.KeepCheckpoints != 1 || k.MaxGradNorm != 1 {
		t.Errorf("v6: lr %g, num_rollout %d, seed %d, keep_checkpoints %d (--set: 1), max_grad_norm %g",
			k.LR, k.NumRollout, k.Seed, k.KeepCheckpoints, k.MaxGradNorm)
	}
}

func TestHotReloadStress(t *testing.T) {
	// 50 random edits, in bursts of 1 to 3 made while a rollout runs. The
	// last edit of a burst is what the files hold at the next boundary, so
	// it must be the one applied (valid), refused (structural) or reported
	// (invalid) there; earlier edits of a burst are superseded by it.
	const edits = 50
	rng := rand.New(rand.NewPCG(7, 11))
	var bursts [][]int
	for n := 0; n < edits; {
		k := min(1+rng.IntN(3), edits-n)
		var b []int
		for range k {
			n++
			b = append(b, n)
		}
		bursts = append(bursts, b)
	}
	numRollout := len(bursts) + 2
	base := hotRecipe{desc: "e0", lr: 1e-4, numRollout: numRollout}
	path, cat, opts := startHotRun(t, base)
	kinds := make([]int, edits+1) // 0 valid, 1 invalid, 2 structural
	texts := make([]string, edits+1)
	matches := make([]func(reload.Update) bool, edits+1)
	for i := 1; i <= edits; i++ {
		h := base
		h.desc, h.lr = fmt.Sprintf("e%d", i), 1e-4*float64(i+1)
		matches[i] = byDesc(h.desc)
		switch kinds[i] = rng.IntN(3); kinds[i] {
		case 1:
			switch rng.IntN(3) {
			case 0:
				h.lr = -float64(i) - 0.5 // "-4.5" is not part of "-40.5"
				matches[i] = byErr(fmt.Sprint(h.lr))
			case 1:
				h.extra = fmt.Sprintf("typo_%d: 1", i)
				matches[i] = byErr(fmt.Sprintf("typo_%d", i))
			default:
				h.extra = fmt.Sprintf("kl_estimator: \"k%dx\"", i)
				matches[i] = byErr(fmt.Sprintf("k%dx", i))
			}
		case 2:
			h.seed = 100 + i
		}
		texts[i] = h.text()
	}
	type expect struct {
		rollout, edit int
	}
	var want []expect
	var done chan struct{}
	next := 0
	opts.hooks = &runHooks{
		boundary: func(id int, w *reloader) {
			if done == nil {
				return
			}
			<-done
			last := bursts[next-1][len(bursts[next-1])-1]
			if !w.waitFor(matches[last], 20*time.Second) {
				w.mu.Lock()
				held := w.held
				w.mu.Unlock()
				t.Errorf("boundary %d: edit %d (kind %d) never delivered; last outcome %+v", id, last, kinds[last], held)
			}
			want = append(want, expect{id, last})
			done = nil
		},
		afterReload: func(id int, w *reloader) {
			if next >= len(bursts) {
				return
			}
			b := bursts[next]
			next++
			done = make(chan struct{})
			go func(ch chan struct{}) {
				defer close(ch)
				for _, i := range b {
					save(t, path, texts[i], saveStyle(rng.IntN(4)), nil)
				}
			}(done)
		},
	}
	res, err := Run(context.Background(), cat, "sft", opts)
	if err != nil {
		t.Fatal(err)
	}
	if next != len(bursts) || len(want) != len(bursts) {
		t.Fatalf("%d of %d bursts made, %d checked", next, len(bursts), len(want))
	}
	all, err := rundir.ReadEvents(filepath.Join(res.Dir, rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	byRollout := map[int][]rundir.Event{}
	for _, e := range all {
		switch e.Type {
		case rundir.EventReloadApplied, rundir.EventReloadInvalid, rundir.EventReloadRefused:
			byRollout[e.Rollout] = append(byRollout[e.Rollout], e)
		}
	}
	lr := base.lr
	lrs := stepLRs(t, res.Dir)
	for _, w := range want {
		evs := byRollout[w.rollout]
		i := w.edit
		newLR := 1e-4 * float64(i+1)
		var types []string
		for _, e := range evs {
			types = append(types, string(e.Type))
		}
		got := strings.Join(types, " ")
		switch kinds[i] {
		case 0:
			if got != "reload_applied" || evs[0].Changes[0].Knob != "lr" || evs[0].Changes[0].New != newLR {
				t.Errorf("rollout %d, valid edit %d: events %s %+v", w.rollout, i, got, evs)
			}
			lr = newLR
		case 1:
			if got != "reload_invalid" {
				t.Errorf("rollout %d, invalid edit %d: events %s", w.rollout, i, got)
			}
		case 2:
			// A structural edit with a new lr: the seed is refused, the lr applied.
			if got != "reload_refused reload_applied" || !strings.Contains(evs[0].Message, "knobs.seed") {
				t.Errorf("rollout %d, structural edit %d: events %s %+v", w.rollout, i, got, evs)
			}
			lr = newLR
		}
		if step := w.rollout + 2; math.Abs(lrs[step]-lr) > 1e-12 {
			t.Errorf("step %d after edit %d: lr %g, want %g", step, i, lrs[step], lr)
		}
	}
	if n := len(byRollout); n != len(want) {
		t.Errorf("reload events at %d boundaries, want %d", n, len(want))
	}
}

func TestResumeStartsFromTheCheckpointsVersion(t *testing.T) {
	base := hotRecipe{desc: "v1", lr: 1e-3, numRollout: 4}
	path, cat, opts := startHotRun(t, base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts.hooks = &runHooks{boundary: func(id int, w *reloader) {
		if id == 0 {
			h := base
			h.desc, h.lr = "v2", 2e-3
			save(t, path, h.text(), atomicRename, nil)
			if !w.waitFor(byDesc(h.desc), 20*time.Second) {
				t.Error("the edit was not delivered")
			}
			cancel() // SIGINT during rollout 2: its checkpoint holds recipe v2
		}
	}}
	part, err := Run(ctx, cat, "sft", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !part.Interrupted || part.Rollouts != 2 {
		t.Fatalf("interrupted run: %+v", part)
	}
	// Edited while the run was stopped: the resumed run applies it as a reload.
	h := base
	h.desc, h.lr = "v3", 3e-3
	save(t, path, h.text(), inPlace, nil)
	cat, err = Load([]string{path}, schema.Options{Only: "sft"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cat, "sft", RunOptions{Resume: part.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 2 || res.Steps != 4 {
		t.Fatalf("resumed: %d rollouts, %d steps; want 2 and 4", res.Rollouts, res.Steps)
	}
	ap := eventsOf(t, part.Dir, rundir.EventReloadApplied)
	if len(ap) != 2 {
		t.Fatalf("reload_applied: %+v, want 2", ap)
	}
	// Old value 0.002: the resumed run started from v2, the checkpoint's version.
	if e := ap[1]; e.Rollout != 1 || e.Version != 3 || len(e.Changes) != 1 || e.Changes[0].Old != 2e-3 || e.Changes[0].New != 3e-3 {
		t.Errorf("resume reload: %+v", e)
	}
	lrs := stepLRs(t, part.Dir)
	for step, want := range map[int]float64{1: 1e-3, 2: 2e-3, 3: 3e-3, 4: 3e-3} {
		if math.Abs(lrs[step]-want) > 1e-12 {
			t.Errorf("step %d: lr %g, want %g", step, lrs[step], want)
		}
	}
	// Resuming again with the files as they are changes nothing: v3 is in force.
	if _, err := Run(context.Background(), cat, "sft", RunOptions{Resume: part.Dir}); err != nil {
		t.Fatal(err)
	}
	if n := len(eventsOf(t, part.Dir, rundir.EventReloadApplied)); n != 2 {
		t.Errorf("%d reload_applied events after a resume with no difference, want 2", n)
	}
	// A recorded version read back equals the recipe it was written from:
	// no spurious structural difference on resume.
	if ev := eventsOf(t, part.Dir, rundir.EventReloadRefused); len(ev) != 0 {
		t.Errorf("reload_refused on resume: %+v", ev)
	}
}

func TestEveryHotKnobIsClassified(t *testing.T) {
	docs, err := schema.KnobDocs()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		use, why := hotKnobUse(d.Name)
		switch {
		case !d.Hot:
			continue
		case use == 0:
			t.Errorf("hot knob %s is not classified for hot reload", d.Name)
		case why != "":
			t.Errorf("hot knob %s is refused: %s (mark it @knob(cold))", d.Name, why)
		}
	}
	// The other way: the table names only the schema's hot knobs, so it never
	// keeps a knob the schema made cold or removed.
	hot := map[string]bool{}
	for _, d := range docs {
		hot[d.Name] = d.Hot
	}
	for name := range hotKnobUses {
		if isHot, known := hot[name]; !known {
			t.Errorf("hotKnobUses classifies %s, which is no knob of the schema", name)
		} else if !isHot {
			t.Errorf("hotKnobUses classifies %s, which the schema marks @knob(cold)", name)
		}
	}
	// An unclassified hot knob is refused, not taken.
	if use, why := hotKnobUse("no_such_knob"); use != 0 || why == "" {
		t.Errorf("hotKnobUse of an unclassified knob = %v, %q; want 0 and a reason", use, why)
	}
}

// TestHotKnobsReachSamplerAndSpecialization: a reload reaches the sampler and,
// through the rebuilt host-side specialization, the actor's micro-batches: the
// entropy and KL coefficients and the clip bounds are scalar batch inputs, so
// the trainer's loss, compiled before the edit, is not traced again and yet
// computes with the new clip_ratio_high. A cold knob (dro_beta) is refused.
func TestHotKnobsReachSamplerAndSpecialization(t *testing.T) {
	cat := runCatalog(t, "grpo", "knobs.rollout_batch_size=2", "knobs.n_samples_per_prompt=2", "knobs.max_new_tokens=4")
	l, err := newLoop(cat.Recipes["grpo"], RunOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if l.dir, err = rundir.Create(t.TempDir(), "grpo", time.Now()); err != nil {
		t.Fatal(err)
	}
	text, _ := schema.Format(l.rec, "cue")
	if err := l.dir.WriteRecipe(1, text); err != nil {
		t.Fatal(err)
	}
	l.version = 1
	if got := l.rec.Knobs.ClipRatioHigh; got != 0.2 {
		t.Fatalf("grpo's clip_ratio_high is %g; the test expects the schema default 0.2", got)
	}

	// The primary's trainer, with its loss function counted: each count is a
	// trace, that is a graph built for compilation.
	r := l.primary
	traces := 0
	inner := r.spec.(specializations.LM).Loss()
	counted := func(ctx *gomlxctx.Context, m *runtime.Model, batch map[string]*graph.Node) (*graph.Node, map[string]*graph.Node) {
		traces++
		return inner(ctx, m, batch)
	}
	cfg, err := trainerConfig(l.rec.Knobs, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.trainer, err = runtime.NewTrainer(l.backend, r.model, counted, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := l.gen.rolloutGen.generate(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	opts := l.batchOptions(r, 1)
	if err := produceInto(r.ref, b.data, opts, []string{rollout.KeyLogProbs}, []string{rollout.KeyRefLogProbs}); err != nil {
		t.Fatal(err)
	}
	// step prepares the rollout with the role's current specialization, with
	// every advantage 1 and every ratio far above 1 + ε_high, so that PPO's
	// pg_loss is −(1 + ε_high) whatever the model; it returns the micro-batches.
	step := func(wantPG float64) []map[string]*tensors.Tensor {
		t.Helper()
		mbs, err := r.spec.PrepareBatch(b.data, opts)
		if err != nil {
			t.Fatal(err)
		}
		saturated := make([]map[string]*tensors.Tensor, len(mbs))
		for i, mb := range mbs {
			saturated[i] = maps.Clone(mb)
			for key, v := range map[string]float32{"advantages": 1, rollout.KeySamplerLogProbs: -100} {
				data := make([]float32, mb[key].Shape().Size())
				for j := range data {
					data[j] = v
				}
				saturated[i][key] = tensors.FromFlatDataAndDimensions(data, mb[key].Shape().Dimensions...)
			}
		}
		res, err := r.trainer.Step(saturated)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Metrics["pg_loss"]; math.Abs(got-wantPG) > 1e-5 {
			t.Errorf("pg_loss %g, want %g", got, wantPG)
		}
		return mbs
	}
	step(-1.2)
	compiled := traces
	if compiled == 0 {
		t.Fatal("the trainer's step traced no loss")
	}

	edited := *l.rec
	edited.Knobs.Temperature, edited.Knobs.EntropyCoef, edited.Knobs.KLLossCoef = 0.5, 0.01, 0.2
	edited.Knobs.ClipRatioHigh = 0.1
	edited.Knobs.DROBeta = 0.1
	if err := l.reloads.reloadTo(0, &edited); err != nil {
		t.Fatal(err)
	}
	if got := l.gen.sampleOptions(1, false).Temperature; got != 0.5 {
		t.Errorf("sampler temperature %g, want 0.5", got)
	}
	if l.rec.Knobs.DROBeta != cat.Recipes["grpo"].Knobs.DROBeta {
		t.Errorf("dro_beta changed to %g: it is compiled into the loss", l.rec.Knobs.DROBeta)
	}
	// The actor's batch carries the new coefficients and bounds as graph inputs,
	// and the trainer's compiled loss computes with them.
	mbs := step(-1.1)
	if traces != compiled {
		t.Errorf("the loss was traced %d times before the reload and %d after: the edit rebuilt the graph", compiled, traces)
	}
	for key, want := range map[string]float64{"coef_entropy": 0.01, "coef_kl": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.1} {
		for i, mb := range mbs {
			v := mb[key]
			if v == nil {
				t.Fatalf("micro-batch %d has no %s", i, key)
			}
			if got := v.Value().(float32); math.Abs(float64(got)-want) > 1e-7 {
				t.Errorf("micro-batch %d: %s = %g, want %g", i, key, got, want)
			}
		}
	}
	ev := eventsOf(t, l.dir.Path(), rundir.EventReloadRefused)
	if len(ev) != 1 || !strings.Contains(ev[0].Message, "knobs.dro_beta: 0.05 → 0.1 (cold knob)") {
		t.Errorf("reload_refused: %+v", ev)
	}
	ap := eventsOf(t, l.dir.Path(), rundir.EventReloadApplied)
	if len(ap) != 1 || len(ap[0].Changes) != 4 || ap[0].Version != 2 {
		t.Errorf("reload_applied: %+v", ap)
	}
}

func TestRecordedRecipesReadBackUnchanged(t *testing.T) {
	// A resumed run starts from recipes/v<N>.cue: reading it back must give
	// the recipe it was written from, or every resume would see a change.
	cat, err := Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: "."})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range cat.Names {
		r := cat.Recipes[name]
		text, err := schema.Format(r, "cue")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".cue")
		if err := os.WriteFile(path, text, 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := loadRecipeText(path, name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		ch, err := reload.Diff(r, back)
		if err != nil || len(ch.Hot)+len(ch.Structural) != 0 {
			t.Errorf("%s: read back with differences %+v (%v)", name, ch, err)
		}
	}
}

// waitFor blocks until the watcher has delivered an outcome that match
// accepts, or timeout passes; the outcome stays for the boundary's take. It
// reports whether one came. Tests use it to make an edit land before a
// given boundary without sleeping.
func (r *reloader) waitFor(match func(reload.Update) bool, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		if u, ok := r.w.Poll(); ok {
			r.held = &u
		}
		held := r.held
		r.mu.Unlock()
		if held != nil && match(*held) {
			return true
		}
		select {
		case <-r.w.Ready():
		case <-deadline.C:
			return false
		}
	}
}
