package rundir

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// InitialDir holds, per role, the initial weights a resumed run needs but
// no checkpoint saves: those of frozen roles and of a role's frozen
// reference (initial/<role>/, in Hugging Face layout), so that resuming
// does not depend on the model directories the run started from.
const InitialDir = "initial"

// InitialPath is where KeepInitial puts a role's initial weights; the
// directory exists only if they were kept.
func (d *Dir) InitialPath(role string) string { return filepath.Join(d.path, InitialDir, role) }

// KeepInitial keeps a role's initial model files (name → the file to keep
// under that name) in InitialPath(role): as hard links where the file system
// allows (no space used; writers replace model files rather than rewrite
// them in place), else as copies. It returns the bytes copied. The
// directory appears complete or not at all.
func (d *Dir) KeepInitial(role string, files map[string]string) (copied int64, err error) {
	if role == "" || role == "." || role == ".." || strings.ContainsAny(role, `/\`) {
		return 0, fmt.Errorf("keep initial weights: invalid role name %q", role)
	}
	if d.replica {
		return 0, nil
	}
	root := filepath.Join(d.path, InitialDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return 0, fmt.Errorf("keep initial weights of %s: %w", role, err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+role+"-")
	if err != nil {
		return 0, fmt.Errorf("keep initial weights of %s: %w", role, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			return copied, fmt.Errorf("keep initial weights of %s: invalid file name %q", role, name)
		}
		dst := filepath.Join(tmp, name)
		if err := os.Link(files[name], dst); err == nil {
			continue
		}
		n, err := copyFile(files[name], dst)
		copied += n
		if err != nil {
			return copied, fmt.Errorf("keep initial weights of %s: %w", role, err)
		}
	}
	if err := syncDir(tmp); err != nil {
		return copied, err
	}
	if err := os.Rename(tmp, d.InitialPath(role)); err != nil {
		return copied, fmt.Errorf("keep initial weights of %s: %w", role, err)
	}
	return copied, syncDir(root)
}

// copyFile copies a regular file and syncs the copy.
func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, errors.Join(fmt.Errorf("copy %s: %w", src, err), os.Remove(dst))
	}
	return n, nil
}
