package reload

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"stx.dev/stx/schema"
)

// LoadFunc re-reads and validates the running recipe exactly as `stx vet`
// does, --set overrides and environment included. The engine builds it over
// engine.Load, which reload cannot import (the engine imports reload).
type LoadFunc func() (*schema.Recipe, error)

// DefaultDebounce is how long the files must stay quiet before a reload:
// long enough to cover the several writes of one editor save, short enough
// that a reload seems immediate.
const DefaultDebounce = 100 * time.Millisecond

// Options tune a Watcher.
type Options struct {
	// Debounce is the quiet time after the last event before the files are
	// reloaded (DefaultDebounce when zero).
	Debounce time.Duration
	// Logf receives diagnostics that are not reload outcomes: watch errors,
	// saves in progress. Nil discards them.
	Logf func(format string, args ...any)
}

// Update is the outcome of one reload: the new recipe, or the error that
// made the edit invalid (a schema.List with positions for vet errors). On
// an error the engine prints it and keeps the last good recipe.
type Update struct {
	Recipe *schema.Recipe
	Err    error
}

// Watcher watches the files a recipe was loaded from and reloads them when
// an edit has settled. Results are collected for Poll, which the engine
// calls at each rollout boundary.
//
// fsnotify watches directories, not the files: editors that save by writing
// a temporary file and renaming it over the recipe would otherwise leave a
// watch on a file that no longer exists. Events are filtered by name.
type Watcher struct {
	load     LoadFunc
	debounce time.Duration
	logf     func(string, ...any)
	fsw      *fsnotify.Watcher
	// targets maps each watched directory to what in it matters.
	targets map[string]target

	mu      sync.Mutex
	pending *Update // the latest outcome not yet polled
	ready   chan struct{}

	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// target is what matters in one watched directory: named files, or every
// .cue file when a package directory was given.
type target struct {
	names  map[string]bool
	allCUE bool
}

// New starts watching the files (recipe files or package directories, as
// given to `stx run`; relative names are taken from the working directory
// now). On each settled change it calls load and keeps the outcome for
// Poll. Close stops it.
func New(files []string, load LoadFunc, opts Options) (*Watcher, error) {
	if load == nil {
		return nil, errors.New("reload: nil load function")
	}
	if len(files) == 0 {
		return nil, errors.New("reload: no files to watch")
	}
	w := &Watcher{
		load:     load,
		debounce: opts.Debounce,
		logf:     opts.Logf,
		targets:  map[string]target{},
		ready:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if w.debounce <= 0 {
		w.debounce = DefaultDebounce
	}
	if w.logf == nil {
		w.logf = func(string, ...any) {}
	}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("reload: %s: %w", f, err)
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			t := w.targets[abs]
			t.allCUE = true
			w.targets[abs] = t
			continue
		}
		w.addFile(abs)
		// A recipe that is a symbolic link is edited where it leads: watch
		// the target's directory too (the link's own directory still sees
		// the link re-pointed).
		if fi, err := os.Lstat(abs); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if target, err := filepath.EvalSymlinks(abs); err == nil {
				w.addFile(target)
			}
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("reload: start watcher: %w", err)
	}
	for _, dir := range slices.Sorted(maps.Keys(w.targets)) {
		if err := fsw.Add(dir); err != nil {
			fsw.Close()
			return nil, fmt.Errorf("reload: watch %s: %w", dir, err)
		}
	}
	w.fsw = fsw
	go w.run()
	return w, nil
}

// addFile adds one file to watch by its directory and name.
func (w *Watcher) addFile(abs string) {
	dir, name := filepath.Split(abs)
	dir = filepath.Clean(dir)
	t := w.targets[dir]
	if t.names == nil {
		t.names = map[string]bool{}
	}
	t.names[name] = true
	w.targets[dir] = t
}

// Poll returns the latest reload outcome since the previous Poll, and false
// when there has been none. Outcomes that were superseded before a Poll
// are dropped: only the newest content of the files matters.
func (w *Watcher) Poll() (Update, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		return Update{}, false
	}
	u := *w.pending
	w.pending = nil
	return u, true
}

// Ready receives a value when an outcome is waiting for Poll, for callers
// that would rather wait than poll (one value however many outcomes).
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Close stops watching and waits for the watcher's goroutine to end; a
// reload in progress finishes first (a LoadFunc cannot be interrupted).
// Outcomes already collected stay available to Poll.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		w.closeErr = w.fsw.Close()
		<-w.stopped
	})
	return w.closeErr
}

// run is the watcher's only goroutine: it debounces events and reloads.
func (w *Watcher) run() {
	defer close(w.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if _, ok := w.targets[ev.Name]; ok && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				w.logf("reload: %s was removed or renamed; recipe edits are no longer watched", ev.Name)
				continue
			}
			if !w.relevant(ev) {
				continue
			}
			// Every relevant event restarts the quiet period, so a burst
			// of saves is loaded once, after its last write.
			timer.Reset(w.debounce)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.logf("reload: watching recipe files: %v", err)
		case <-timer.C:
			w.settled()
		}
	}
}

// relevant reports whether an event concerns a recipe file. A pure Chmod
// (touch, a backup tool, an editor restoring modes) changes no content.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod || ev.Op == 0 {
		return false
	}
	dir, name := filepath.Split(ev.Name)
	t, ok := w.targets[filepath.Clean(dir)]
	if !ok {
		return false
	}
	return t.names[name] || (t.allCUE && isCUE(name))
}

// isCUE reports whether a directory entry is a CUE source that the loader
// would read (hidden files and editor backups are not).
func isCUE(name string) bool {
	return strings.HasSuffix(name, ".cue") && !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "_")
}

// settled runs when the files have been quiet for the debounce time. It
// loads whenever the files are complete, even if their content is the same
// as at the last load: a load reads the files itself, possibly a later save
// than any hash taken here, so skipping "unchanged" content could skip the
// final state of the files (save, save again during the load, undo).
func (w *Watcher) settled() {
	if err := w.saving(); err != nil {
		// A missing or empty file is a save in progress (truncate then
		// write, delete then recreate): wait for the event that ends it.
		w.logf("reload: %v; waiting for the save to finish", err)
		return
	}
	r, err := w.load()
	if err == nil && r == nil {
		err = errors.New("reload: load returned no recipe")
	}
	w.mu.Lock()
	w.pending = &Update{Recipe: r, Err: err}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// saving reports a recipe file that is missing or empty, or a package
// directory without .cue files: the signs of a save in progress. Other
// read errors are left to load, which reports them with the file name.
func (w *Watcher) saving() error {
	for _, dir := range slices.Sorted(maps.Keys(w.targets)) {
		t := w.targets[dir]
		if t.allCUE {
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			found := false
			for _, e := range entries {
				if !e.Type().IsRegular() || !isCUE(e.Name()) {
					continue
				}
				found = true
				if err := checkFile(filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
			if !found {
				return fmt.Errorf("%s has no .cue files", dir)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(t.names)) {
			if err := checkFile(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFile fails for a missing or empty file.
func checkFile(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is missing", path)
	}
	if err == nil && fi.Size() == 0 {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}
