package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// saveCheckpoint writes a checkpoint of two roles as the engine would.
func saveCheckpoint(t *testing.T, d *Dir, rollout int) Checkpoint {
	t.Helper()
	p, err := d.BeginCheckpoint(rollout)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Abort()
	if !strings.HasPrefix(filepath.Base(p.Path()), ".tmp-"+fmt.Sprint(rollout)+"-") {
		t.Errorf("pending path %s", p.Path())
	}
	for _, role := range []string{"policy", "value"} {
		dir, err := p.RoleDir(role)
		if err != nil {
			t.Fatal(err)
		}
		for name, size := range map[string]int{"model.safetensors": 1000 + rollout, "optimizer.safetensors": 2000, "state.json": 20} {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i*7 + rollout + len(role))
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	cps, err := d.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		if cp.Rollout == rollout {
			return cp
		}
	}
	t.Fatalf("checkpoint %d not listed after Commit", rollout)
	return Checkpoint{}
}

func rollouts(t *testing.T, d *Dir) string {
	t.Helper()
	cps, err := d.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var rs []int
	for _, cp := range cps {
		rs = append(rs, cp.Rollout)
	}
	return fmt.Sprint(rs)
}

func TestCheckpointCommit(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	if _, ok, err := d.Latest(); ok || err != nil {
		t.Errorf("Latest of a new run: %v %v", ok, err)
	}
	cp := saveCheckpoint(t, d, 42)
	if filepath.Base(cp.Path) != "000042" {
		t.Errorf("path %s", cp.Path)
	}
	if got := strings.Join(cp.Roles(), ","); got != "policy,value" {
		t.Errorf("roles %s", got)
	}
	if len(cp.Files) != 6 || cp.Files[0].Path != "policy/model.safetensors" || cp.Files[0].Size != 1042 || len(cp.Files[0].CRC32C) != 8 {
		t.Errorf("files %+v", cp.Files)
	}
	if _, err := os.Stat(filepath.Join(cp.RolePath("value"), "state.json")); err != nil {
		t.Error(err)
	}
	if err := cp.Verify(); err != nil {
		t.Error(err)
	}
	saveCheckpoint(t, d, 7)
	if latest, ok, _ := d.Latest(); !ok || latest.Rollout != 42 {
		t.Errorf("Latest is %d, want 42", latest.Rollout)
	}
	saveCheckpoint(t, d, 1234567) // past six digits
	if got := rollouts(t, d); got != "[7 42 1234567]" {
		t.Errorf("checkpoints %s", got)
	}
	if matches, _ := filepath.Glob(filepath.Join(d.Path(), CheckpointsDir, ".tmp-*")); len(matches) > 0 {
		t.Errorf("temporary dirs left: %v", matches)
	}
}

func TestCheckpointCommitErrors(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	saveCheckpoint(t, d, 1)

	p, _ := d.BeginCheckpoint(2)
	if err := p.Commit(); err == nil || !strings.Contains(err.Error(), "holds no files") {
		t.Errorf("empty checkpoint: %v", err)
	}
	os.WriteFile(filepath.Join(p.Path(), CompleteFile), []byte("x"), 0o644)
	if err := p.Commit(); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("engine-written COMPLETE: %v", err)
	}
	os.Remove(filepath.Join(p.Path(), CompleteFile))
	os.Symlink("/etc/passwd", filepath.Join(p.Path(), "link"))
	if err := p.Commit(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("symlink: %v", err)
	}
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Path()); !os.IsNotExist(err) {
		t.Errorf("Abort left %s", p.Path())
	}
	if err := p.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}

	p, _ = d.BeginCheckpoint(1)
	os.WriteFile(filepath.Join(p.Path(), "state.json"), []byte("{}"), 0o644)
	if err := p.Commit(); err == nil || !strings.Contains(err.Error(), "already holds a complete checkpoint") {
		t.Errorf("second checkpoint of rollout 1: %v", err)
	}
	p.Abort()

	for _, role := range []string{"", ".", "..", "a/b", CompleteFile} {
		p, _ := d.BeginCheckpoint(3)
		if _, err := p.RoleDir(role); err == nil {
			t.Errorf("RoleDir(%q) succeeded", role)
		}
		p.Abort()
	}
	if _, err := d.BeginCheckpoint(-1); err == nil {
		t.Error("BeginCheckpoint(-1) succeeded")
	}
	if got := rollouts(t, d); got != "[1]" {
		t.Errorf("checkpoints %s", got)
	}
}

func TestCommitSyncsStreams(t *testing.T) {
	// Commit fsyncs the streams; after it a fresh reader sees every record
	// logged before the checkpoint.
	d := mustCreate(t, t.TempDir())
	for s := range 3 {
		d.LogMetrics(s, map[string]float64{"loss": 1})
	}
	saveCheckpoint(t, d, 0)
	if recs, err := ReadMetrics(d.MetricsPath()); err != nil || len(recs) != 3 {
		t.Errorf("%d records, %v", len(recs), err)
	}
}

// TestCrashedCheckpoints damages the newest checkpoint in the ways a crash
// (or a disk) can: each damaged one is ignored, Latest falls back to the
// previous one, and Clean removes temporary leftovers and moves damaged
// checkpoints aside.
func TestCrashedCheckpoints(t *testing.T) {
	cpPath := func(d *Dir, r int) string { return filepath.Join(d.Path(), CheckpointsDir, checkpointName(r)) }
	tests := []struct {
		name    string
		damage  func(t *testing.T, d *Dir) // rollouts 1 and 2 exist
		removed string
	}{
		{"temp dir left behind", func(t *testing.T, d *Dir) {
			p, _ := d.BeginCheckpoint(3)
			os.WriteFile(filepath.Join(p.Path(), "half.safetensors"), []byte("xx"), 0o644)
			delete(d.pending, filepath.Base(p.Path())) // the process that began it died
		}, "checkpoints/.tmp-3-"},
		{"no marker", func(t *testing.T, d *Dir) {
			os.Remove(filepath.Join(cpPath(d, 2), CompleteFile))
		}, "checkpoints/000002"},
		{"marker not JSON", func(t *testing.T, d *Dir) {
			os.WriteFile(filepath.Join(cpPath(d, 2), CompleteFile), []byte(`{"format":`), 0o644)
		}, "checkpoints/000002"},
		{"file shorter than recorded", func(t *testing.T, d *Dir) {
			os.Truncate(filepath.Join(cpPath(d, 2), "policy", "model.safetensors"), 10)
		}, "checkpoints/000002"},
		{"file missing", func(t *testing.T, d *Dir) {
			os.Remove(filepath.Join(cpPath(d, 2), "value", "state.json"))
		}, "checkpoints/000002"},
		{"file not in the marker", func(t *testing.T, d *Dir) {
			os.WriteFile(filepath.Join(cpPath(d, 2), "value", "extra.bin"), []byte("x"), 0o644)
		}, "checkpoints/000002"},
		{"marker of another rollout", func(t *testing.T, d *Dir) {
			os.Rename(cpPath(d, 2), cpPath(d, 5))
		}, "checkpoints/000005"},
		{"marker lists no files", func(t *testing.T, d *Dir) {
			os.WriteFile(filepath.Join(cpPath(d, 2), CompleteFile), []byte(`{"format":"stx-checkpoint","version":1,"rollout":2,"files":[]}`), 0o644)
		}, "checkpoints/000002"},
		{"interrupted atomic write", func(t *testing.T, d *Dir) {
			os.WriteFile(filepath.Join(d.Path(), ".tmp-config.cue-123"), []byte("recip"), 0o644)
		}, ".tmp-config.cue-123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustCreate(t, t.TempDir())
			saveCheckpoint(t, d, 1)
			saveCheckpoint(t, d, 2)
			tt.damage(t, d)
			path := d.Path()
			d.Close()
			d, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			want := "[1]"
			if !strings.HasPrefix(tt.removed, "checkpoints/0") {
				want = "[1 2]" // the complete checkpoints are untouched
			}
			if got := rollouts(t, d); got != want {
				t.Errorf("checkpoints %s, want %s", got, want)
			}
			removed, err := d.Clean()
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tt.removed, "checkpoints/0") {
				// A damaged checkpoint is moved aside, reported, never removed.
				if len(removed) != 0 {
					t.Errorf("Clean removed %v", removed)
				}
				if _, err := os.Stat(filepath.Join(d.Path(), tt.removed)); !os.IsNotExist(err) {
					t.Errorf("%s still exists", tt.removed)
				}
				aside, _ := filepath.Glob(filepath.Join(d.Path(), tt.removed+RejectedInfix+"*"))
				if len(aside) != 1 {
					t.Errorf("moved aside: %v, want one %s%s*", aside, tt.removed, RejectedInfix)
				}
				if notes := strings.Join(d.Notes(), "\n"); !strings.Contains(notes, "rejected") {
					t.Errorf("notes %q do not report the rejection", notes)
				}
				if evs, _ := ReadEvents(d.EventsPath()); len(evs) == 0 || evs[len(evs)-1].Type != EventCheckpointRejected {
					t.Errorf("events %v: no checkpoint_rejected last", evs)
				}
			} else if len(removed) != 1 || !strings.HasPrefix(filepath.ToSlash(removed[0]), tt.removed) {
				t.Errorf("Clean removed %v, want %s", removed, tt.removed)
			} else if _, err := os.Stat(filepath.Join(d.Path(), removed[0])); !os.IsNotExist(err) {
				t.Errorf("%s still exists", removed[0])
			}
			if again, _ := d.Clean(); len(again) != 0 {
				t.Errorf("second Clean removed %v", again)
			}
			// The run goes on: the rollout can be checkpointed again.
			saveCheckpoint(t, d, 3)
		})
	}
}

func TestCommitReplacesIncompleteTarget(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	saveCheckpoint(t, d, 2)
	os.Truncate(filepath.Join(d.Path(), CheckpointsDir, "000002", "policy", "state.json"), 0)
	if got := rollouts(t, d); got != "[]" {
		t.Fatalf("checkpoints %s", got)
	}
	cp := saveCheckpoint(t, d, 2)
	if err := cp.Verify(); err != nil {
		t.Error(err)
	}
	if matches, _ := filepath.Glob(filepath.Join(d.Path(), CheckpointsDir, ".tmp-*")); len(matches) > 0 {
		t.Errorf("leftovers: %v", matches)
	}
}

func TestVerifyFindsSameSizeCorruption(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	cp := saveCheckpoint(t, d, 1)
	file := filepath.Join(cp.RolePath("policy"), "model.safetensors")
	data, _ := os.ReadFile(file)
	data[500] ^= 1
	os.WriteFile(file, data, 0o644)
	// Listing compares sizes only; Verify reads the bytes.
	if got := rollouts(t, d); got != "[1]" {
		t.Errorf("checkpoints %s", got)
	}
	if err := cp.Verify(); err == nil || !strings.Contains(err.Error(), "policy/model.safetensors has CRC-32C") {
		t.Errorf("Verify: %v", err)
	}
}

func TestCleanSparesPendingCheckpoints(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	p, _ := d.BeginCheckpoint(1)
	os.WriteFile(filepath.Join(p.Path(), "state.json"), []byte("{}"), 0o644)
	if removed, err := d.Clean(); err != nil || len(removed) != 0 {
		t.Errorf("Clean during a checkpoint removed %v, %v", removed, err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	// Unknown entries in checkpoints/ are not ours to remove.
	os.WriteFile(filepath.Join(d.Path(), CheckpointsDir, "README"), nil, 0o644)
	if removed, _ := d.Clean(); len(removed) != 0 {
		t.Errorf("Clean removed %v", removed)
	}
}

func TestPrune(t *testing.T) {
	tests := []struct {
		keep    int
		removed string
		left    string
	}{
		{0, "[]", "[1 2 3 4]"},
		{1, "[1 2 3]", "[4]"},
		{3, "[1]", "[2 3 4]"},
		{4, "[]", "[1 2 3 4]"},
		{9, "[]", "[1 2 3 4]"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.keep), func(t *testing.T) {
			d := mustCreate(t, t.TempDir())
			for r := 1; r <= 4; r++ {
				saveCheckpoint(t, d, r)
			}
			removed, err := d.Prune(tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(removed); got != tt.removed && !(tt.removed == "[]" && removed == nil) {
				t.Errorf("removed %s, want %s", got, tt.removed)
			}
			if got := rollouts(t, d); got != tt.left {
				t.Errorf("left %s, want %s", got, tt.left)
			}
			entries, _ := os.ReadDir(filepath.Join(d.Path(), CheckpointsDir))
			if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), tmpPrefix) }) {
				t.Errorf("prune left temporary entries")
			}
		})
	}
	d := mustCreate(t, t.TempDir())
	if _, err := d.Prune(-1); err == nil {
		t.Error("Prune(-1) succeeded")
	}
}
