package rundir

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// tree lists every entry under root with its size and content hash, to see that nothing changed.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if e.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %x", rel, len(data), sha256.Sum256(data)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// writeAll calls every method that writes a run directory, as the engine does over a run.
func writeAll(t *testing.T, d *Dir) {
	t.Helper()
	steps := []struct {
		name string
		err  error
	}{
		{"LogMetrics", d.LogMetrics(3, map[string]float64{"loss": 1.5})},
		{"LogEvent", d.LogEvent(Event{Type: EventWarning, Message: "x"})},
		{"LogEpisode", d.LogEpisode(map[string]any{"rollout": 9})},
		{"WriteRecipe", d.WriteRecipe(2, []byte("recipes: x: {}\n"))},
		{"TruncateMetricsAfter", d.TruncateMetricsAfter(0)},
		{"TruncateEpisodesAfter", d.TruncateEpisodesAfter(0)},
		{"Sync", d.Sync()},
	}
	for _, s := range steps {
		if s.err != nil {
			t.Errorf("%s on a replica: %v", s.name, s.err)
		}
	}
	src := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(src, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := d.KeepInitial("ref", map[string]string{"model.safetensors": src}); n != 0 || err != nil {
		t.Errorf("KeepInitial on a replica: %d, %v", n, err)
	}
	if _, err := d.Clean(); err != nil {
		t.Errorf("Clean on a replica: %v", err)
	}
	if _, err := d.Prune(1); err != nil {
		t.Errorf("Prune on a replica: %v", err)
	}
	if _, err := d.BeginCheckpoint(4); !errors.Is(err, ErrReplica) {
		t.Errorf("BeginCheckpoint on a replica: %v, want ErrReplica", err)
	}
	// Validation still runs: a replica refuses what the writer refuses.
	if err := d.LogMetrics(-1, nil); err == nil {
		t.Error("LogMetrics(-1) on a replica: no error")
	}
}

// TestReplicaOfNewRunWritesNothing: a node other than node 0 gets a replica of the run node 0
// creates; the engine's writes succeed and leave nothing, not even in the working directory.
func TestReplicaOfNewRunWritesNothing(t *testing.T) {
	t.Chdir(t.TempDir())
	d, err := NewReplica("grpo")
	if err != nil {
		t.Fatal(err)
	}
	if d.Writes() || d.Path() != "" || d.Recipe() != "grpo" {
		t.Fatalf("replica: writes %v, path %q, recipe %q", d.Writes(), d.Path(), d.Recipe())
	}
	writeAll(t, d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, "."); len(got) != 1 { // "./" alone
		t.Errorf("the replica wrote %v", got[1:])
	}
	if _, err := NewReplica("../x"); err == nil {
		t.Error("NewReplica(\"../x\"): no error")
	}
}

// TestReplicaReadsNodeZerosRun: on resume, the other nodes open node 0's run directory as a
// replica while node 0 holds it open: they find its checkpoint and recipes and change nothing,
// even a checkpoint node 0 would reject.
func TestReplicaReadsNodeZerosRun(t *testing.T) {
	root := t.TempDir()
	w := mustCreate(t, root)
	if err := w.WriteRecipe(1, []byte("recipes: grpo: {}\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.LogMetrics(1, map[string]float64{"loss": 2}); err != nil {
		t.Fatal(err)
	}
	p, err := w.BeginCheckpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	role, err := p.RoleDir("actor")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(role, "model.safetensors"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	before := tree(t, w.Path())

	r, err := OpenReplica(w.Path()) // node 0 holds the lock: a replica takes none
	if err != nil {
		t.Fatal(err)
	}
	cp, ok, err := r.Latest()
	if err != nil || !ok || cp.Rollout != 1 {
		t.Fatalf("replica's latest checkpoint: %+v %v %v", cp, ok, err)
	}
	if err := cp.Verify(); err != nil {
		t.Fatal(err)
	}
	if text, err := r.ReadRecipe(1); err != nil || string(text) != "recipes: grpo: {}\n" {
		t.Fatalf("replica's recipe v1: %q, %v", text, err)
	}
	if _, err := r.Reject(cp.Path, 1, "test"); err != nil {
		t.Fatal(err)
	}
	writeAll(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	after := tree(t, w.Path())
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("the replica changed node 0's run directory:\nbefore %v\nafter  %v", before, after)
	}
	// Node 0 still writes: the replica's Close released nothing of its lock.
	if err := w.LogMetrics(2, map[string]float64{"loss": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(w.Path()); !errors.Is(err, ErrInUse) {
		t.Errorf("Open while node 0 holds the run: %v, want ErrInUse", err)
	}
	if _, err := OpenReplica(filepath.Join(root, "missing")); err == nil {
		t.Error("OpenReplica of a missing directory: no error")
	}
}
