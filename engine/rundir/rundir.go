// Package rundir is the on-disk record of a training run: the recipe
// versions it ran with, its metric, event and episode streams, and its
// checkpoints. It is plain file handling (no tensors, no CUE), written so
// that a crash at any instant leaves a directory a run can resume from:
//
//	runs/<recipe>-<YYYYMMDD-HHMMSS>/
//	    run.json          marks the directory as a run (format, recipe, creation time)
//	    LOCK              held by the one process using the run
//	    config.cue        the current resolved recipe
//	    recipes/v<N>.cue  every applied version of the recipe (v1: the one the run started with)
//	    metrics.jsonl     one JSON object per step: {"step": N, "<metric>": value, ...}
//	    events.jsonl      typed events (run_start, reload_applied, checkpoint_saved, ...)
//	    episodes.jsonl    sampled episodes, free-form JSON objects
//	    checkpoints/000042/<role>/{model.safetensors, optimizer.safetensors, state.json}
//	    checkpoints/000042/COMPLETE   the file list with sizes and CRC-32C checksums
//	    initial/<role>/   initial weights of frozen roles and references (hard links to the source)
//	    tb/events.out.tfevents.*  TensorBoard event files, written by the engine through a Mirror
//
// Whole files (config.cue, recipe versions, COMPLETE, run.json) are
// replaced atomically: written to a temporary name, synced and renamed.
// Streams are appended one whole line per write, and a partial last line
// (a crash mid-write) is cut away when the run is opened again.
// Checkpoints are filled under a temporary name and renamed into place
// only when complete; a checkpoint whose COMPLETE marker does not match
// its files is not a checkpoint.
//
// Resuming, the engine opens the run, calls Clean, takes the latest
// checkpoint that verifies (Reject moves one that does not aside, to
// checkpoints/<rollout>.rejected-<time>: nothing a run saved is deleted
// because it looks damaged), and truncates the streams past the checkpoint (TruncateMetricsAfter,
// TruncateEpisodesAfter) so the resumed run writes the same records an
// uninterrupted one would have.
package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Names inside a run directory.
const (
	MarkerFile     = "run.json"
	LockFile       = "LOCK"
	ConfigFile     = "config.cue"
	RecipesDir     = "recipes"
	MetricsFile    = "metrics.jsonl"
	EventsFile     = "events.jsonl"
	EpisodesFile   = "episodes.jsonl"
	CheckpointsDir = "checkpoints"
	CompleteFile   = "COMPLETE"
)

// runFormat identifies run.json; a later layout bumps the version.
const (
	runFormat  = "stx-run"
	runVersion = 1
)

// timeLayout is the <time> part of a run directory's name.
const timeLayout = "20060102-150405"

// ErrNotRun is returned (wrapped) by Open for a directory that is not a
// run directory.
var ErrNotRun = errors.New("not an stx run directory")

// meta is run.json.
type meta struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Recipe  string    `json:"recipe"`
	Created time.Time `json:"created"`
}

// Dir is a run directory opened for writing by this process (it holds the
// directory's lock until Close). Its methods may be called from several
// goroutines.
type Dir struct {
	path string
	meta meta
	lock *Lock

	metrics, events, episodes *Writer

	mu      sync.Mutex
	notes   []string
	pending map[string]bool // names of checkpoint temp dirs being filled
	closed  bool
	mirror  Mirror
	replica bool // writes nothing (replica.go)
}

// Mirror receives a copy of each metrics and episode record once it is
// appended to its stream (the engine's TensorBoard files). Its methods run
// in the caller's goroutine, must not fail the record (a mirror reports
// its own errors) and may log events, but not metrics or episodes.
type Mirror interface {
	MirrorMetrics(step int, values map[string]float64)
	MirrorEpisode(v any)
}

// SetMirror makes m receive the records appended from now on (nil: none).
func (d *Dir) SetMirror(m Mirror) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mirror = m
}

func (d *Dir) getMirror() Mirror {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mirror
}

// Create makes a new run directory root/<recipe>-<YYYYMMDD-HHMMSS> (now
// formatted in its own time zone), adding -2, -3, ... when the name is
// taken, and opens it for writing.
func Create(root, recipe string, now time.Time) (*Dir, error) {
	if err := checkRecipeName(recipe); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	base := recipe + "-" + now.Format(timeLayout)
	var path string
	for i := 1; ; i++ {
		if i > 1000 {
			return nil, fmt.Errorf("create run: %s-2 ... %s-1000 are all taken in %s", base, base, root)
		}
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		path = filepath.Join(root, name)
		// Mkdir, not MkdirAll: it fails when the name exists, which is what
		// claims the name against a concurrent Create.
		err := os.Mkdir(path, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create run: %w", err)
		}
	}
	d, err := create(path, meta{Format: runFormat, Version: runVersion, Recipe: recipe, Created: now})
	if err != nil {
		os.RemoveAll(path) // ours, new and unusable
		return nil, err
	}
	return d, nil
}

func create(path string, m meta) (*Dir, error) {
	lock, err := AcquireLock(path)
	if err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	d := &Dir{path: path, meta: m, lock: lock, pending: map[string]bool{}}
	for _, sub := range []string{RecipesDir, CheckpointsDir} {
		if err := os.Mkdir(filepath.Join(path, sub), 0o755); err != nil {
			d.Close()
			return nil, fmt.Errorf("create run: %w", err)
		}
	}
	if err := d.openStreams(); err != nil {
		d.Close()
		return nil, fmt.Errorf("create run: %w", err)
	}
	// run.json last: a directory that has one is complete.
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(filepath.Join(path, MarkerFile), append(data, '\n')); err != nil {
		d.Close()
		return nil, fmt.Errorf("create run: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		d.Close()
		return nil, fmt.Errorf("create run: %w", err)
	}
	return d, nil
}

// Open opens an existing run directory for writing, to resume it. It takes
// the directory's lock (failing with ErrInUse while another process holds
// it), recreates missing subdirectories and cuts partial last lines a crash
// left in the streams; Notes lists what it repaired.
func Open(path string) (*Dir, error) {
	m, err := readMeta(path)
	if err != nil {
		return nil, err
	}
	lock, err := AcquireLock(path)
	if err != nil {
		return nil, fmt.Errorf("open run: %w", err)
	}
	d := &Dir{path: path, meta: m, lock: lock, pending: map[string]bool{}}
	if pid := lock.TookOver(); pid != 0 {
		d.note("took over the lock of process %d, which is no longer running", pid)
	}
	for _, sub := range []string{RecipesDir, CheckpointsDir} {
		p := filepath.Join(path, sub)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.Mkdir(p, 0o755); err != nil {
				d.Close()
				return nil, fmt.Errorf("open run: %w", err)
			}
			d.note("recreated the missing %s/ directory", sub)
		}
	}
	for _, name := range []string{MetricsFile, EventsFile, EpisodesFile} {
		n, err := truncatePartialLine(filepath.Join(path, name))
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("open run: %w", err)
		}
		if n > 0 {
			d.note("%s: removed a partial last line (%d bytes) left by an interrupted write", name, n)
		}
	}
	if err := d.openStreams(); err != nil {
		d.Close()
		return nil, fmt.Errorf("open run: %w", err)
	}
	return d, nil
}

// readMeta checks that path is a run directory and reads its run.json.
func readMeta(path string) (meta, error) {
	st, err := os.Stat(path)
	if err != nil {
		return meta{}, fmt.Errorf("open run: %w", err)
	}
	if !st.IsDir() {
		return meta{}, fmt.Errorf("open run: %s: %w (it is a file)", path, ErrNotRun)
	}
	data, err := os.ReadFile(filepath.Join(path, MarkerFile))
	if errors.Is(err, os.ErrNotExist) {
		return meta{}, fmt.Errorf("open run: %s: %w (it has no %s)", path, ErrNotRun, MarkerFile)
	}
	if err != nil {
		return meta{}, fmt.Errorf("open run: %w", err)
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return meta{}, fmt.Errorf("open run: %s: %w (%s is not valid JSON: %v)", path, ErrNotRun, MarkerFile, err)
	}
	if m.Format != runFormat {
		return meta{}, fmt.Errorf("open run: %s: %w (%s has format %q, want %q)", path, ErrNotRun, MarkerFile, m.Format, runFormat)
	}
	if m.Version != runVersion {
		return meta{}, fmt.Errorf("open run: %s: layout version %d, this stx reads version %d", path, m.Version, runVersion)
	}
	if err := checkRecipeName(m.Recipe); err != nil {
		return meta{}, fmt.Errorf("open run: %s: %s: %w", path, MarkerFile, err)
	}
	return m, nil
}

func checkRecipeName(name string) error {
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") ||
		strings.ContainsAny(name, `/\:`) || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' }) {
		return fmt.Errorf("recipe name %q cannot name a run directory", name)
	}
	return nil
}

func (d *Dir) openStreams() error {
	var err error
	if d.metrics, err = OpenWriter(filepath.Join(d.path, MetricsFile)); err != nil {
		return err
	}
	if d.events, err = OpenWriter(filepath.Join(d.path, EventsFile)); err != nil {
		return err
	}
	d.episodes, err = OpenWriter(filepath.Join(d.path, EpisodesFile))
	return err
}

func (d *Dir) note(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
}

// Path is the run directory.
func (d *Dir) Path() string { return d.path }

// Recipe is the name of the recipe the run trains.
func (d *Dir) Recipe() string { return d.meta.Recipe }

// Created is when the run was created.
func (d *Dir) Created() time.Time { return d.meta.Created }

// Notes are the repairs Open made (partial lines cut, a stale lock taken
// over, ...), for the engine to print when it resumes.
func (d *Dir) Notes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.notes...)
}

// MetricsPath, EventsPath and EpisodesPath are the streams' files.
func (d *Dir) MetricsPath() string { return filepath.Join(d.path, MetricsFile) }

// EventsPath is the events stream's file.
func (d *Dir) EventsPath() string { return filepath.Join(d.path, EventsFile) }

// EpisodesPath is the episodes stream's file.
func (d *Dir) EpisodesPath() string { return filepath.Join(d.path, EpisodesFile) }

// Sync makes every record appended so far durable (fsync of the streams).
// Commit calls it, so a checkpoint never exists without the records that
// led to it.
func (d *Dir) Sync() error {
	if d.replica {
		return nil
	}
	for _, w := range []*Writer{d.metrics, d.events, d.episodes} {
		if err := w.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// Close syncs and closes the streams and releases the lock. Pending
// checkpoints that were neither committed nor aborted stay behind as
// temporary directories, which the next Clean removes.
func (d *Dir) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	var errs []error
	for _, w := range []*Writer{d.metrics, d.events, d.episodes} {
		if w != nil {
			errs = append(errs, w.Close())
		}
	}
	errs = append(errs, d.lock.Release())
	return errors.Join(errs...)
}
