package hub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// repo is one repository of one kind.
type repo struct {
	kind Kind
	id   string
}

func (r repo) String() string { return fmt.Sprintf("%s %s", r.kind, r.id) }

// folder is the repository's folder name in the cache ("models--Qwen--Qwen2.5-0.5B").
func (r repo) folder() string {
	return r.kind.plural() + "--" + strings.ReplaceAll(r.id, "/", "--")
}

// storage is the repository's folder in the cache.
func (c *Client) storage(r repo) string { return filepath.Join(c.Cache, r.folder()) }

// SnapshotDir is where the cache keeps the files of commit sha of a repository.
func (c *Client) SnapshotDir(kind Kind, id, sha string) string {
	return filepath.Join(c.storage(repo{kind, id}), "snapshots", sha)
}

// cachedCommit is the commit a revision names in the cache: the revision itself
// when it is a commit sha, else the contents of refs/<revision>.
func (c *Client) cachedCommit(r repo, rev string) (string, bool) {
	if IsCommit(rev) {
		return rev, true
	}
	data, err := os.ReadFile(filepath.Join(c.storage(r), "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	sha := strings.TrimSpace(string(data))
	if !IsCommit(sha) {
		return "", false
	}
	return sha, true
}

// writeRef records that revision rev is commit sha (refs/<rev>, no newline, as
// huggingface_hub writes it), atomically. Nothing is written for a commit sha.
func (c *Client) writeRef(r repo, rev, sha string) error {
	if rev == sha {
		return nil
	}
	path := filepath.Join(c.storage(r), "refs", filepath.FromSlash(rev))
	if data, err := os.ReadFile(path); err == nil && string(data) == sha {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return writeAtomic(path, []byte(sha))
}

// writeAtomic writes data to a temporary file beside path and renames it there.
func writeAtomic(path string, data []byte) error {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	tmp := fmt.Sprintf("%s.%s.tmp", path, hex.EncodeToString(nonce[:]))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// snapshotFile is the snapshot path of file (a repository path) at commit sha.
func (c *Client) snapshotFile(r repo, sha, file string) string {
	return filepath.Join(c.storage(r), "snapshots", sha, filepath.FromSlash(file))
}

// cachedFile reports whether the snapshot of sha holds file (a link that leads
// to an existing file, or a file copied there where links cannot be made).
func (c *Client) cachedFile(r repo, sha, file string) bool {
	st, err := os.Stat(c.snapshotFile(r, sha, file))
	return err == nil && st.Mode().IsRegular()
}

// blobPath is the blob of etag in the repository's folder.
func (c *Client) blobPath(r repo, etag string) string {
	return filepath.Join(c.storage(r), "blobs", etag)
}

// link makes the snapshot file of sha a relative symbolic link to blob, as
// huggingface_hub does ("../../blobs/<etag>", one more "../" per folder of the
// file's path), replacing what was there. Where the file system has no
// symbolic links the blob is copied instead, as huggingface_hub does.
func (c *Client) link(r repo, sha, file, blob string) error {
	pointer := c.snapshotFile(r, sha, file)
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Remove(pointer); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Symlink(rel, pointer); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if t, rerr := os.Readlink(pointer); rerr == nil && t == rel {
				return nil // another process linked it between the remove and the link
			}
		}
		if cerr := copyFile(blob, pointer); cerr != nil {
			return fmt.Errorf("cache: link %s: %v; copy: %w", pointer, err, cerr)
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := to + ".tmp"
	dst, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		os.Remove(tmp)
		return err
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, to)
}

// lockBlob takes the lock huggingface_hub takes before writing a blob,
// .locks/<repo folder>/<etag>.lock, so that stx and Python processes never
// write one blob at once. It waits for the lock.
func (c *Client) lockBlob(r repo, etag string) (unlock func(), err error) {
	path := filepath.Join(c.Cache, ".locks", r.folder(), etag+".lock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o664)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cache: lock %s: %w", path, err)
	}
	return func() {
		unlockFile(f)
		f.Close()
	}, nil
}

// SnapshotRoot is the snapshot directory (".../snapshots/<sha>") that holds
// file, a path this client returned; "" when file is not in a snapshot.
func SnapshotRoot(file string) string {
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		parent := filepath.Dir(dir)
		if filepath.Base(parent) == "snapshots" && IsCommit(filepath.Base(dir)) {
			return dir
		}
		if parent == dir {
			return ""
		}
	}
}
