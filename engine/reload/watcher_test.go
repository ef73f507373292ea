package reload_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stx.dev/stx/engine"
	"stx.dev/stx/engine/reload"
	"stx.dev/stx/schema"
)

// debounce is short so that tests are fast; quiet is how long a test waits
// to be sure that nothing is coming (several debounce periods).
const (
	debounce = 30 * time.Millisecond
	quiet    = 6 * debounce
	deadline = 3 * time.Second
)

// recipe is a valid one-role recipe with the given learning rate.
func recipe(lr float64) string {
	return fmt.Sprintf("package stx\nrecipes: r: {roles: [{name: \"policy\", specialization: \"sft\"}], knobs: lr: %g}\n", lr)
}

// loader loads recipe "r" with the real vet pipeline and counts its calls.
type loader struct {
	files []string
	opts  schema.Options
	calls atomic.Int32
}

func (l *loader) load() (*schema.Recipe, error) {
	l.calls.Add(1)
	opts := l.opts
	opts.Only = "r"
	cat, err := engine.Load(l.files, opts)
	if err != nil {
		return nil, err
	}
	return cat.Recipes["r"], nil
}

// setup writes path with content and starts a watcher on files.
func setup(t *testing.T, path, content string, files ...string) (*reload.Watcher, *loader) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	l := &loader{files: files}
	w, err := reload.New(files, l.load, reload.Options{Debounce: debounce, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w, l
}

// next waits for the next outcome.
func next(t *testing.T, w *reload.Watcher) reload.Update {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case <-w.Ready():
			if u, ok := w.Poll(); ok {
				return u
			}
		case <-timeout:
			t.Fatalf("no reload within %v", deadline)
		}
	}
}

// nextLR waits for a successful reload and returns its learning rate.
func nextLR(t *testing.T, w *reload.Watcher) float64 {
	t.Helper()
	u := next(t, w)
	if u.Err != nil {
		t.Fatalf("reload failed: %v", u.Err)
	}
	return u.Recipe.Knobs.LR
}

// until waits for a successful reload with learning rate lr, skipping
// outcomes of earlier saves.
func until(t *testing.T, w *reload.Watcher, lr float64) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case <-w.Ready():
			if u, ok := w.Poll(); ok && u.Err == nil && u.Recipe.Knobs.LR == lr {
				return
			}
		case <-timeout:
			t.Fatalf("no reload with lr=%g within %v", lr, deadline)
		}
	}
}

// none checks that no outcome arrives while the files stay quiet.
func none(t *testing.T, w *reload.Watcher) {
	t.Helper()
	select {
	case <-w.Ready():
	case <-time.After(quiet):
	}
	if u, ok := w.Poll(); ok {
		t.Fatalf("unexpected reload: %+v", u)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameSave saves the way sed -i and many editors do: a temporary file in
// the same directory renamed over the original.
func renameSave(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestSaveStyles(t *testing.T) {
	styles := []struct {
		name string
		save func(t *testing.T, w *reload.Watcher, path, content string)
	}{
		{"in place", func(t *testing.T, _ *reload.Watcher, path, content string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Same length as the original, so no truncation is involved.
			if _, err := f.WriteString(content); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"atomic rename", func(t *testing.T, _ *reload.Watcher, path, content string) {
			renameSave(t, path, content)
		}},
		{"truncate then write", func(t *testing.T, w *reload.Watcher, path, content string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
			none(t, w) // an empty file is a save in progress
			write(t, path, content)
		}},
		{"delete and recreate", func(t *testing.T, w *reload.Watcher, path, content string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			none(t, w) // a missing file is a save in progress
			write(t, path, content)
		}},
	}
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.cue")
			w, _ := setup(t, path, recipe(1e-3), path)
			s.save(t, w, path, recipe(2e-3))
			if lr := nextLR(t, w); lr != 2e-3 {
				t.Fatalf("lr = %g, want 2e-3", lr)
			}
			// A second save of the same style is seen too: the watch
			// survives renames and deletions of the file.
			s.save(t, w, path, recipe(3e-3))
			if lr := nextLR(t, w); lr != 3e-3 {
				t.Fatalf("lr = %g, want 3e-3", lr)
			}
		})
	}
}

func TestInvalidThenValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.cue")
	w, _ := setup(t, path, recipe(1e-3), path)

	write(t, path, recipe(2)) // lr must be <= 1
	u := next(t, w)
	var list schema.List
	if !errors.As(u.Err, &list) || len(list) == 0 {
		t.Fatalf("want vet errors, got recipe %v, error %v", u.Recipe, u.Err)
	}
	if e := list[0]; filepath.Base(e.Pos.File) != "r.cue" || e.Pos.Line != 2 || e.Path != "recipes.r.knobs.lr" {
		t.Errorf("error at %v %s, want r.cue:2 recipes.r.knobs.lr: %v", e.Pos, e.Path, e)
	}

	write(t, path, "package stx\nrecipes: r: {roles: [{name: \"policy\", specialization: \"sft\"}], knobz: lr: 1e-3}\n")
	if u := next(t, w); u.Err == nil || !strings.Contains(u.Err.Error(), "knobz") {
		t.Fatalf("typo not reported: %v", u.Err)
	}

	write(t, path, recipe(4e-3))
	if lr := nextLR(t, w); lr != 4e-3 {
		t.Fatalf("lr = %g, want 4e-3", lr)
	}
}

// TestReloadDiff runs the whole pipeline: the watcher reloads an edit, Diff
// classifies it.
func TestReloadDiff(t *testing.T) {
	tests := []struct {
		name       string
		edit       string
		hot        []reload.KnobChange
		structural []string
	}{
		{name: "hot knob",
			edit: `recipes: r: {roles: [{name: "policy", specialization: "sft"}], knobs: {lr: 1e-3, temperature: 0.5}}`,
			hot:  []reload.KnobChange{{Knob: "temperature", Old: 1.0, New: 0.5}}},
		{name: "cold knob",
			edit:       `recipes: r: {roles: [{name: "policy", specialization: "sft"}], knobs: {lr: 1e-3, seed: 7}}`,
			structural: []string{"knobs.seed: 1234 → 7 (cold knob)"}},
		{name: "structural",
			edit:       `recipes: r: {roles: [{name: "policy", specialization: "sft", pool: "solo"}], knobs: lr: 1e-3}`,
			structural: []string{`roles[0].pool: "policy" → "solo"`}},
		{name: "description",
			edit: `recipes: r: {description: "now described", roles: [{name: "policy", specialization: "sft"}], knobs: lr: 1e-3}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.cue")
			w, l := setup(t, path, recipe(1e-3), path)
			running, err := l.load()
			if err != nil {
				t.Fatal(err)
			}
			renameSave(t, path, "package stx\n"+tc.edit+"\n")
			u := next(t, w)
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			ch, err := reload.Diff(running, u.Recipe)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ch.Hot) != fmt.Sprint(tc.hot) || fmt.Sprint(ch.Structural) != fmt.Sprint(tc.structural) {
				t.Errorf("got hot %v structural %q; want %v %q", ch.Hot, ch.Structural, tc.hot, tc.structural)
			}
			applied := reload.Apply(running, ch)
			for _, c := range tc.hot {
				if c.Knob == "temperature" && applied.Knobs.Temperature != c.New {
					t.Errorf("applied temperature = %v", applied.Knobs.Temperature)
				}
			}
		})
	}
}

// TestBurst saves 50 random edits in quick succession, in every style, some
// of them invalid; the last one is valid and must be the last outcome.
func TestBurst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.cue")
	w, l := setup(t, path, recipe(1e-3), path)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3 {
		var final float64
		for i := range 50 {
			lr := float64(rng.IntN(1000)+1) * 1e-6
			content := recipe(lr)
			switch {
			case i == 49:
				// A value no earlier save of the round has, so that
				// only the final save can satisfy until.
				lr = float64(round+1) * 1e-2
				content = recipe(lr)
			case rng.IntN(4) == 0:
				content = recipe(2) // invalid
			}
			switch rng.IntN(3) {
			case 0:
				write(t, path, content)
			case 1:
				renameSave(t, path, content)
			default:
				if err := os.Truncate(path, 0); err != nil {
					t.Fatal(err)
				}
				write(t, path, content)
			}
			final = lr
		}
		// Outcomes of earlier edits may arrive first (a reload can start
		// inside a pause of the burst); the final content must follow.
		until(t, w, final)
		// The final content may be loaded twice (a load that began just
		// before the last save reads it too), but nothing older may follow.
		select {
		case <-w.Ready():
		case <-time.After(quiet):
		}
		if u, ok := w.Poll(); ok && (u.Err != nil || u.Recipe.Knobs.LR != final) {
			t.Fatalf("round %d: stale outcome after the final edit: %+v", round, u)
		}
	}
	t.Logf("%d loads for 150 saves", l.calls.Load())
}

func TestRelativePathInWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	w, _ := setup(t, "r.cue", recipe(1e-3), "r.cue")
	renameSave(t, filepath.Join(dir, "r.cue"), recipe(5e-3))
	if lr := nextLR(t, w); lr != 5e-3 {
		t.Fatalf("lr = %g, want 5e-3", lr)
	}
}

// TestPackageDirectory watches a package directory given as "." (the
// working directory): every .cue file in it is part of the recipe.
func TestPackageDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	write(t, filepath.Join(dir, "roles.cue"), "package stx\nrecipes: r: roles: [{name: \"policy\", specialization: \"sft\"}]\n")
	knobs := filepath.Join(dir, "knobs.cue")
	w, l := setup(t, knobs, "package stx\nrecipes: r: knobs: lr: 1e-3\n", ".")

	write(t, filepath.Join(dir, "notes.txt"), "not CUE")
	none(t, w)
	write(t, knobs, "package stx\nrecipes: r: knobs: lr: 6e-3\n")
	if lr := nextLR(t, w); lr != 6e-3 {
		t.Fatalf("lr = %g, want 6e-3", lr)
	}
	// A new file of the package is part of the recipe.
	write(t, filepath.Join(dir, "more.cue"), "package stx\nrecipes: r: knobs: temperature: 0.25\n")
	if u := next(t, w); u.Err != nil || u.Recipe.Knobs.Temperature != 0.25 {
		t.Fatalf("new package file not loaded: %+v", u)
	}
	if n := l.calls.Load(); n != 2 {
		t.Errorf("%d loads, want 2", n)
	}
}

func TestIgnored(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.cue")
	w, l := setup(t, path, recipe(1e-3), path)

	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "other.cue"), recipe(9e-3)) // not a recipe file of this run
	renameSave(t, filepath.Join(dir, "other.cue"), recipe(8e-3))
	none(t, w)
	if n := l.calls.Load(); n != 0 {
		t.Errorf("%d loads for events that are no edit of the recipe", n)
	}

	// A save of unchanged content is still loaded (see TestSaveDuringLoad).
	write(t, path, recipe(1e-3))
	if lr := nextLR(t, w); lr != 1e-3 {
		t.Fatalf("lr = %g", lr)
	}
	if n := l.calls.Load(); n != 1 {
		t.Errorf("%d loads, want 1", n)
	}
}

func TestSetOverridesSurviveReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.cue")
	write(t, path, recipe(1e-3))
	l := &loader{files: []string{path}, opts: schema.Options{Sets: []string{"knobs.temperature=0.3"}}}
	w, err := reload.New(l.files, l.load, reload.Options{Debounce: debounce})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	renameSave(t, path, recipe(7e-3))
	u := next(t, w)
	if u.Err != nil {
		t.Fatal(u.Err)
	}
	if u.Recipe.Knobs.LR != 7e-3 || u.Recipe.Knobs.Temperature != 0.3 {
		t.Errorf("lr %g temperature %g, want 7e-3 and the --set 0.3", u.Recipe.Knobs.LR, u.Recipe.Knobs.Temperature)
	}
}

func TestCloseDuringActivity(t *testing.T) {
	before := runtime.NumGoroutine()
	path := filepath.Join(t.TempDir(), "r.cue")
	write(t, path, recipe(1e-3))
	l := &loader{files: []string{path}}
	w, err := reload.New(l.files, l.load, reload.Options{Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := path + ".tmp"
			_ = os.WriteFile(tmp, []byte(recipe(float64(i%1000+1)*1e-6)), 0o644)
			_ = os.Rename(tmp, path)
			time.Sleep(time.Millisecond) // let reloads start between saves
		}
	})
	// Close once reloads are under way.
	timeout := time.After(deadline)
	for l.calls.Load() < 3 {
		select {
		case <-timeout:
			t.Fatal("no reloads while saving")
		case <-time.After(time.Millisecond):
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	close(stop)
	wg.Wait()
	w.Poll() // still safe after Close

	calls := l.calls.Load()
	for runtime.NumGoroutine() > before {
		select {
		case <-timeout:
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		case <-time.After(time.Millisecond):
		}
	}
	if l.calls.Load() != calls {
		t.Error("load called after Close returned")
	}
}

func TestNewErrors(t *testing.T) {
	load := func() (*schema.Recipe, error) { return nil, nil }
	if _, err := reload.New(nil, load, reload.Options{}); err == nil {
		t.Error("New with no files succeeded")
	}
	if _, err := reload.New([]string{"r.cue"}, nil, reload.Options{}); err == nil {
		t.Error("New with no load function succeeded")
	}
	missing := filepath.Join(t.TempDir(), "gone", "r.cue")
	if _, err := reload.New([]string{missing}, load, reload.Options{}); err == nil {
		t.Error("New in a missing directory succeeded")
	}
}

// TestSaveDuringLoad saves twice while a load is running, the second save
// going back to the content the load was started for (an undo). The load
// reads the intermediate save; the final content must still be delivered.
func TestSaveDuringLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.cue")
	write(t, path, recipe(1e-3))
	l := &loader{files: []string{path}}
	var once sync.Once
	load := func() (*schema.Recipe, error) {
		var r *schema.Recipe
		var err error
		once.Do(func() {
			write(t, path, recipe(3e-3))
			r, err = l.load()
			write(t, path, recipe(2e-3))
		})
		if r != nil || err != nil {
			return r, err
		}
		return l.load()
	}
	w, err := reload.New(l.files, load, reload.Options{Debounce: debounce})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	write(t, path, recipe(2e-3))
	// The mid-load outcome (3e-3) may or may not be polled before the
	// final one replaces it; the final one must come.
	until(t, w, 2e-3)
	if n := l.calls.Load(); n < 2 {
		t.Errorf("%d loads, want the final content loaded again", n)
	}
}

// TestSymlinkedRecipe: the recipe named on the command line is a symbolic
// link into another directory, where the edits happen (a dotfiles
// repository, a shared config checkout): they are seen, whichever way the
// target is saved.
func TestSymlinkedRecipe(t *testing.T) {
	real := filepath.Join(t.TempDir(), "real.cue")
	write(t, real, recipe(1e-3))
	link := filepath.Join(t.TempDir(), "r.cue")
	if err := os.Symlink(real, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	l := &loader{files: []string{link}}
	w, err := reload.New([]string{link}, l.load, reload.Options{Debounce: debounce, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	write(t, real, recipe(2e-3))
	if lr := nextLR(t, w); lr != 2e-3 {
		t.Fatalf("lr = %g after writing the target, want 2e-3", lr)
	}
	renameSave(t, real, recipe(3e-3))
	until(t, w, 3e-3)
}
