// Package plainfile opens the files stx reads from users (recipes, datasets,
// weights) so that a named pipe, a device or a directory in their place is a
// clear error instead of a read that blocks forever or never ends.
//
// The mode is checked twice: with a stat before opening (opening a device
// can itself act, a tape rewinds), and with an fstat of the descriptor
// opened non-blocking (the name may have been replaced in between, and
// opening a FIFO for reading would otherwise wait for a writer).
package plainfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is returned (wrapped) for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading if it is a regular file (symbolic links are
// followed). The returned info is the open file's.
func Open(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := check(path, st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err = f.Stat()
	if err == nil {
		err = check(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadFile reads a whole regular file of at most limit bytes (limit ≤ 0: no
// limit). A larger file is an error before anything is allocated for it.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit > 0 && st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d this file may have", path, st.Size(), limit)
	}
	// The file may have grown since the fstat: the limit still holds.
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if limit > 0 && int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%s: more than the %d bytes this file may have", path, limit)
	}
	return buf.Bytes(), nil
}

// check refuses everything but a regular file, naming what it is.
func check(path string, st fs.FileInfo) error {
	m := st.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "a special file"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("%s: %s, %w", path, what, ErrNotRegular)
}
