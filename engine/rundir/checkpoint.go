package rundir

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checkpointFormat identifies a COMPLETE marker.
const (
	checkpointFormat  = "stx-checkpoint"
	checkpointVersion = 1
)

// castagnoli is CRC-32C: checkpoints hold gigabytes of weights, and the
// checksum only has to catch truncation and corruption, not tampering, so
// the hardware-accelerated CRC beats a cryptographic hash.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CheckpointFile is one file of a checkpoint as its COMPLETE marker
// records it.
type CheckpointFile struct {
	Path   string `json:"path"` // slash-separated, relative to the checkpoint
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"` // hex
}

// marker is the COMPLETE file.
type marker struct {
	Format  string           `json:"format"`
	Version int              `json:"version"`
	Rollout int              `json:"rollout"`
	Files   []CheckpointFile `json:"files"`
}

// Checkpoint is a complete checkpoint: its COMPLETE marker lists exactly
// the files present, with their sizes.
type Checkpoint struct {
	Rollout int
	Path    string
	Files   []CheckpointFile
}

// Roles lists the checkpoint's top-level subdirectories (one per role),
// sorted.
func (c Checkpoint) Roles() []string {
	var roles []string
	for _, f := range c.Files {
		if i := strings.IndexByte(f.Path, '/'); i > 0 && !slices.Contains(roles, f.Path[:i]) {
			roles = append(roles, f.Path[:i])
		}
	}
	slices.Sort(roles)
	return roles
}

// RolePath is the directory of one role's files.
func (c Checkpoint) RolePath(role string) string { return filepath.Join(c.Path, role) }

// Verify re-reads every file and compares it with the checksum recorded
// at commit. Listing checkpoints only compares names and sizes (reading
// gigabytes on every listing would be slow); call Verify before loading
// weights from a checkpoint a crash or a copy may have damaged.
func (c Checkpoint) Verify() error {
	files, _, err := scanTree(c.Path, scanHash)
	if err != nil {
		return fmt.Errorf("verify checkpoint %s: %w", c.Path, err)
	}
	if err := sameFiles(c.Files, files, true); err != nil {
		return fmt.Errorf("verify checkpoint %s: %w", c.Path, err)
	}
	return nil
}

// checkpointName is the directory name of a rollout's checkpoint.
func checkpointName(rollout int) string { return fmt.Sprintf("%06d", rollout) }

// parseCheckpointName returns the rollout of a checkpoint directory name;
// ok is false for any name checkpointName does not produce.
func parseCheckpointName(name string) (int, bool) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || checkpointName(n) != name {
		return 0, false
	}
	return n, true
}

func (d *Dir) checkpointsDir() string { return filepath.Join(d.path, CheckpointsDir) }

// Pending is a checkpoint being written: the engine fills Path (one
// subdirectory per role, see RoleDir), then calls Commit, or Abort to
// drop it. Until Commit it lives under a temporary name that no reader
// takes for a checkpoint.
type Pending struct {
	d       *Dir
	rollout int
	path    string
	done    bool
}

// BeginCheckpoint starts the checkpoint of a rollout in a new temporary
// directory checkpoints/.tmp-<rollout>-<random>.
func (d *Dir) BeginCheckpoint(rollout int) (*Pending, error) {
	if rollout < 0 {
		return nil, fmt.Errorf("begin checkpoint: negative rollout %d", rollout)
	}
	if d.replica {
		return nil, fmt.Errorf("begin checkpoint %d: %w", rollout, ErrReplica)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("begin checkpoint %d: run directory %s is closed", rollout, d.path)
	}
	tmp, err := os.MkdirTemp(d.checkpointsDir(), tmpPrefix+strconv.Itoa(rollout)+"-")
	if err != nil {
		return nil, fmt.Errorf("begin checkpoint %d: %w", rollout, err)
	}
	d.pending[filepath.Base(tmp)] = true
	return &Pending{d: d, rollout: rollout, path: tmp}, nil
}

// Path is the temporary directory to fill.
func (p *Pending) Path() string { return p.path }

// Rollout is the rollout the checkpoint saves.
func (p *Pending) Rollout() int { return p.rollout }

// Target is where Commit puts the checkpoint: checkpoints/<rollout, six digits>.
func (p *Pending) Target() string {
	return filepath.Join(p.d.checkpointsDir(), checkpointName(p.rollout))
}

// RoleDir creates (if needed) and returns the subdirectory for one role's
// files.
func (p *Pending) RoleDir(role string) (string, error) {
	if role == "" || role == "." || role == ".." || strings.ContainsAny(role, `/\`) || role == CompleteFile {
		return "", fmt.Errorf("checkpoint %d: invalid role name %q", p.rollout, role)
	}
	dir := filepath.Join(p.path, role)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint %d: %w", p.rollout, err)
	}
	return dir, nil
}

// Commit makes the checkpoint durable and visible: it syncs the run's
// streams, fsyncs every file, writes the COMPLETE marker (each file's
// path, size and CRC-32C), fsyncs the directories, and renames the
// temporary directory to Target. A crash at any point leaves either no
// checkpoint for the rollout or a complete one. An existing complete
// checkpoint of the same rollout is an error; an incomplete one (a
// damaged leftover) is replaced.
func (p *Pending) Commit() error {
	if p.done {
		return fmt.Errorf("commit checkpoint %d: already committed or aborted", p.rollout)
	}
	fail := func(err error) error { return fmt.Errorf("commit checkpoint %d: %w", p.rollout, err) }
	if err := p.d.Sync(); err != nil {
		return fail(err)
	}
	files, dirs, err := scanTree(p.path, scanHashSync)
	if err != nil {
		return fail(err)
	}
	if len(files) == 0 {
		return fail(fmt.Errorf("%s holds no files", p.path))
	}
	if slices.ContainsFunc(files, func(f CheckpointFile) bool { return f.Path == CompleteFile }) {
		return fail(fmt.Errorf("%s is a reserved name in a checkpoint", CompleteFile))
	}
	data, _ := json.MarshalIndent(marker{Format: checkpointFormat, Version: checkpointVersion, Rollout: p.rollout, Files: files}, "", "  ")
	for _, dir := range dirs { // the role directories' entries
		if err := syncDir(dir); err != nil {
			return fail(err)
		}
	}
	// writeFileAtomic also syncs p.path, making the whole tree durable
	// before the rename publishes it.
	if err := writeFileAtomic(filepath.Join(p.path, CompleteFile), append(data, '\n')); err != nil {
		return fail(err)
	}
	target := p.Target()
	if _, err := os.Lstat(target); err == nil {
		if _, err := readCheckpoint(target, p.rollout); err == nil {
			return fail(fmt.Errorf("%s already holds a complete checkpoint", target))
		}
		if _, err := p.d.Reject(target, p.rollout, "incomplete, and its rollout is being checkpointed again"); err != nil {
			return fail(fmt.Errorf("replace incomplete %s: %w", target, err))
		}
	}
	if err := os.Rename(p.path, target); err != nil {
		return fail(err)
	}
	p.done = true
	p.d.mu.Lock()
	delete(p.d.pending, filepath.Base(p.path))
	p.d.mu.Unlock()
	if err := syncDir(p.d.checkpointsDir()); err != nil {
		return fail(err)
	}
	return nil
}

// Abort removes the pending checkpoint. After Commit it does nothing, so
// `defer p.Abort()` cleans up on every error path.
func (p *Pending) Abort() error {
	if p.done {
		return nil
	}
	p.done = true
	p.d.mu.Lock()
	delete(p.d.pending, filepath.Base(p.path))
	p.d.mu.Unlock()
	if err := os.RemoveAll(p.path); err != nil {
		return fmt.Errorf("abort checkpoint %d: %w", p.rollout, err)
	}
	return nil
}

// removeAside removes a directory tree by first renaming it to a
// temporary name, so a crash during the removal leaves a leftover that
// Clean removes, never a half-deleted directory under its real name.
func removeAside(path string) error {
	aside := filepath.Join(filepath.Dir(path), fmt.Sprintf("%sremoved-%s-%d", tmpPrefix, filepath.Base(path), time.Now().UnixNano()))
	if err := os.Rename(path, aside); err != nil {
		return err
	}
	return os.RemoveAll(aside)
}

type scanMode int

const (
	scanSizes    scanMode = iota // names and sizes only
	scanHash                     // and checksums
	scanHashSync                 // and fsync each file
)

// scanTree lists the regular files under root (except a top-level
// COMPLETE marker when only reading) sorted by path, and the
// subdirectories. Links and other special files are errors: a checkpoint
// is plain files.
func scanTree(root string, mode scanMode) ([]CheckpointFile, []string, error) {
	var files []CheckpointFile
	var dirs []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case e.IsDir():
			dirs = append(dirs, path)
			return nil
		case !e.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", path)
		case rel == CompleteFile && mode != scanHashSync:
			return nil // the marker itself
		}
		f := CheckpointFile{Path: rel}
		if mode == scanSizes {
			info, err := e.Info()
			if err != nil {
				return err
			}
			f.Size = info.Size()
		} else if f.Size, f.CRC32C, err = checksum(path, mode == scanHashSync); err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(files, func(a, b CheckpointFile) int { return strings.Compare(a.Path, b.Path) })
	return files, dirs, nil
}

// checksum reads a file's size and CRC-32C, fsyncing it first if asked.
func checksum(path string, sync bool) (int64, string, error) {
	flag := os.O_RDONLY
	if sync {
		flag = os.O_RDWR // some systems refuse fsync on a read-only descriptor
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if sync {
		if err := f.Sync(); err != nil {
			return 0, "", fmt.Errorf("sync %s: %w", path, err)
		}
	}
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// sameFiles compares the files a marker records with the ones present.
func sameFiles(recorded, present []CheckpointFile, checksums bool) error {
	have := make(map[string]CheckpointFile, len(present))
	for _, f := range present {
		have[f.Path] = f
	}
	for _, want := range recorded {
		got, ok := have[want.Path]
		switch {
		case !ok:
			return fmt.Errorf("%s is missing", want.Path)
		case got.Size != want.Size:
			return fmt.Errorf("%s has %d bytes, %s records %d", want.Path, got.Size, CompleteFile, want.Size)
		case checksums && got.CRC32C != want.CRC32C:
			return fmt.Errorf("%s has CRC-32C %s, %s records %s", want.Path, got.CRC32C, CompleteFile, want.CRC32C)
		}
		delete(have, want.Path)
	}
	for p := range have {
		return fmt.Errorf("%s is not listed in %s", p, CompleteFile)
	}
	return nil
}

// readCheckpoint checks a checkpoint directory against its marker (names
// and sizes).
func readCheckpoint(path string, rollout int) (Checkpoint, error) {
	data, err := os.ReadFile(filepath.Join(path, CompleteFile))
	if err != nil {
		return Checkpoint{}, err
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil {
		return Checkpoint{}, fmt.Errorf("%s: %w", CompleteFile, err)
	}
	if m.Format != checkpointFormat || m.Version != checkpointVersion {
		return Checkpoint{}, fmt.Errorf("%s: format %q version %d, want %q version %d", CompleteFile, m.Format, m.Version, checkpointFormat, checkpointVersion)
	}
	if m.Rollout != rollout {
		return Checkpoint{}, fmt.Errorf("%s: rollout %d in the directory of rollout %d", CompleteFile, m.Rollout, rollout)
	}
	if len(m.Files) == 0 {
		return Checkpoint{}, fmt.Errorf("%s lists no files", CompleteFile)
	}
	present, _, err := scanTree(path, scanSizes)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := sameFiles(m.Files, present, false); err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Rollout: rollout, Path: path, Files: m.Files}, nil
}

// Checkpoints lists the complete checkpoints by rollout. Temporary
// directories and checkpoints whose COMPLETE marker is missing or does not
// match their files are skipped (Clean removes them).
func (d *Dir) Checkpoints() ([]Checkpoint, error) {
	entries, err := os.ReadDir(d.checkpointsDir())
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var cps []Checkpoint
	for _, e := range entries {
		rollout, ok := parseCheckpointName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if cp, err := readCheckpoint(filepath.Join(d.checkpointsDir(), e.Name()), rollout); err == nil {
			cps = append(cps, cp)
		}
	}
	// ReadDir sorts by name and names are zero-padded, but rollouts past
	// 999999 have more digits: sort by number.
	slices.SortFunc(cps, func(a, b Checkpoint) int { return a.Rollout - b.Rollout })
	return cps, nil
}

// Latest is the complete checkpoint of the highest rollout; ok is false
// when there is none.
func (d *Dir) Latest() (cp Checkpoint, ok bool, err error) {
	cps, err := d.Checkpoints()
	if err != nil || len(cps) == 0 {
		return Checkpoint{}, false, err
	}
	return cps[len(cps)-1], true, nil
}

// Clean removes what interrupted work left behind: temporary checkpoint
// directories (except those of this Dir's pending checkpoints) and
// temporary files of interrupted atomic writes. It returns the removed
// paths relative to the run directory. A checkpoint whose COMPLETE marker
// is missing or does not match its files is not removed but rejected
// (Reject: moved aside, noted and logged).
func (d *Dir) Clean() ([]string, error) {
	if d.replica {
		return nil, nil
	}
	var removed []string
	cpDir := d.checkpointsDir()
	entries, err := os.ReadDir(cpDir)
	if err != nil {
		return nil, fmt.Errorf("clean: %w", err)
	}
	for _, e := range entries {
		name, path := e.Name(), filepath.Join(cpDir, e.Name())
		if strings.HasPrefix(name, tmpPrefix) {
			d.mu.Lock()
			busy := d.pending[name]
			d.mu.Unlock()
			if busy {
				continue
			}
			if err := os.RemoveAll(path); err != nil {
				return removed, fmt.Errorf("clean: %w", err)
			}
			removed = append(removed, filepath.Join(CheckpointsDir, name))
			continue
		}
		rollout, ok := parseCheckpointName(name)
		if !ok || !e.IsDir() {
			continue // not ours: leave it
		}
		if _, err := readCheckpoint(path, rollout); err != nil {
			// A checkpoint under its final name was complete once (Commit
			// renames only complete ones): damage is for a person to look
			// at, so it is moved aside, never removed.
			if _, err := d.Reject(path, rollout, fmt.Sprintf("incomplete: %v", err)); err != nil {
				return removed, fmt.Errorf("clean: %w", err)
			}
		}
	}
	for _, sub := range []string{".", RecipesDir} {
		entries, err := os.ReadDir(filepath.Join(d.path, sub))
		if err != nil {
			return removed, fmt.Errorf("clean: %w", err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tmpPrefix) && e.Type().IsRegular() {
				rel := filepath.Join(sub, e.Name())
				if err := os.Remove(filepath.Join(d.path, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return removed, fmt.Errorf("clean: %w", err)
				}
				removed = append(removed, rel)
			}
		}
	}
	slices.Sort(removed)
	return removed, nil
}

// Prune removes the oldest complete checkpoints so that at most keep
// remain (keep 0 keeps all) and returns the rollouts removed. The latest
// checkpoint is never removed.
func (d *Dir) Prune(keep int) ([]int, error) {
	if keep < 0 {
		return nil, fmt.Errorf("prune checkpoints: keep %d, want ≥ 0", keep)
	}
	if d.replica {
		return nil, nil
	}
	cps, err := d.Checkpoints()
	if err != nil || keep == 0 || len(cps) <= keep {
		return nil, err
	}
	var removed []int
	for _, cp := range cps[:len(cps)-keep] {
		if err := removeAside(cp.Path); err != nil {
			return removed, fmt.Errorf("prune checkpoint %d: %w", cp.Rollout, err)
		}
		removed = append(removed, cp.Rollout)
	}
	return removed, syncDir(d.checkpointsDir())
}

// RejectedInfix joins a rejected checkpoint's name and the time it was
// rejected: checkpoints/000042.rejected-20260101-120000. Such a directory is
// never taken for a checkpoint, and nothing removes it.
const RejectedInfix = ".rejected-"

// Reject moves a checkpoint that cannot be resumed from aside, to
// checkpoints/<name>.rejected-<time> (-2, -3, ... when taken), records why
// in events.jsonl and in Notes, and returns the new path. Nothing is
// deleted: the files stay for a person to inspect or repair.
func (d *Dir) Reject(path string, rollout int, reason string) (string, error) {
	if d.replica {
		return path, nil
	}
	base := filepath.Join(filepath.Dir(path), filepath.Base(path)+RejectedInfix+time.Now().UTC().Format(timeLayout))
	aside := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if i > 1000 {
			return "", fmt.Errorf("reject checkpoint %s: no free name beside it", path)
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("reject checkpoint %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("reject checkpoint %s: %w", path, err)
	}
	rel := aside
	if r, err := filepath.Rel(d.path, aside); err == nil {
		rel = r
	}
	d.note("checkpoint %s rejected (%s): moved aside to %s", filepath.Base(path), reason, rel)
	if err := d.LogEvent(Event{Type: EventCheckpointRejected, Rollout: max(rollout, 0), Checkpoint: aside, Message: reason}); err != nil {
		return aside, err
	}
	return aside, nil
}
