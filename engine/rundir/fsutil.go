package rundir

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// tmpPrefix starts the name of every temporary file or directory the
// package creates. Names with this prefix are never part of a run's
// committed state, so Clean may remove them and readers ignore them.
const tmpPrefix = ".tmp-"

// writeFileAtomic replaces path with data so that a reader (or a crash)
// sees either the old content or the new one, never a mix: the bytes go to
// a temporary file in the same directory (rename is only atomic within a
// file system), which is synced and then renamed over path; the directory
// is synced last so the rename itself survives a power loss.
func writeFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, tmpPrefix+base+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	return syncDir(dir)
}

// syncDir fsyncs a directory so that entries created, renamed or removed
// in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !isSyncUnsupported(err) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// truncatePartialLine cuts a JSONL file back to its last newline. A record
// is written with one write call ending in '\n', so bytes after the last
// newline can only be a record a crash interrupted (or, after a power loss,
// the zeros of a block the file system allocated but never filled). It
// returns how many bytes were removed.
func truncatePartialLine(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("repair %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("repair %s: %w", path, err)
	}
	size := st.Size()
	// Scan backwards in blocks for the last newline.
	const block = 64 << 10
	buf := make([]byte, block)
	end := size
	for end > 0 {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && int64(n) != end-start {
			return 0, fmt.Errorf("repair %s: %w", path, err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return 0, nil
			}
			return size - keep, truncateSync(f, path, keep)
		}
		end = start
	}
	if size == 0 {
		return 0, nil
	}
	return size, truncateSync(f, path, 0)
}

func truncateSync(f *os.File, path string, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("repair %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("repair %s: sync: %w", path, err)
	}
	return nil
}
