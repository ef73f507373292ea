package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"stx.dev/stx/internal/plainfile"
)

// maxModelFile bounds a side file of a model directory (tokenizer.json,
// merges.txt, ...): the largest real tokenizers are tens of megabytes.
const maxModelFile = 512 << 20

// ReadModelFile reads the side file name of model directory dir, to be
// copied along with saved weights. It refuses a symbolic link that leads
// outside dir (a checkpoint must not pick up, say, ~/.ssh/id_rsa linked as
// tokenizer.json) or, for a Hugging Face cache snapshot, outside its
// repository folder, and anything but a regular file. A missing file is an
// error satisfying errors.Is(err, fs.ErrNotExist).
func ReadModelFile(dir, name string) ([]byte, error) {
	path, err := ResolveModelFile(dir, name)
	if err != nil {
		return nil, err
	}
	return plainfile.ReadFile(path, maxModelFile)
}

// ResolveModelFile returns the file that dir/name is, following symbolic
// links only as far as ReadModelFile does, and checks that it is a regular
// file.
func ResolveModelFile(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	st, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		root, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", err
		}
		if filepath.Base(filepath.Dir(root)) == "snapshots" {
			// A Hugging Face cache snapshot (<repo>/snapshots/<revision>)
			// links every file to <repo>/blobs: the repository is the model.
			root = filepath.Dir(filepath.Dir(root))
		}
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		rel, err := filepath.Rel(root, target)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
			return "", fmt.Errorf("%s is a symbolic link to %s, outside the model directory: not copied", path, target)
		}
		path = target
	}
	if st, err = os.Stat(path); err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %w", path, plainfile.ErrNotRegular)
	}
	return path, nil
}
