package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// fetch puts files (repository paths of commit sha) in the snapshot of sha,
// downloading the blobs it lacks, and links them only once every blob is
// there, last to first: files[0], the one whose presence says a snapshot is
// complete, is linked last.
func (c *Client) fetch(ctx context.Context, r repo, sha string, files []string) error {
	type pending struct{ file, blob string }
	var links []pending
	for _, file := range files {
		if err := validRepoPath(file); err != nil {
			return &Error{Kind: r.kind, Repo: r.id, Revision: sha, Msg: err.Error()}
		}
		if c.cachedFile(r, sha, file) {
			continue
		}
		meta, err := c.head(ctx, r, sha, file)
		if err != nil {
			return err
		}
		blob := c.blobPath(r, meta.etag)
		if err := os.MkdirAll(c.blobPath(r, ""), 0o755); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
		unlock, err := c.lockBlob(r, meta.etag)
		if err != nil {
			return err
		}
		if _, err = os.Stat(blob); errors.Is(err, fs.ErrNotExist) {
			err = c.fetchBlob(ctx, r, file, meta, blob)
		}
		unlock()
		if err != nil {
			return err
		}
		links = append(links, pending{file, blob})
	}
	for i := len(links) - 1; i >= 0; i-- {
		if err := c.link(r, sha, links[i].file, links[i].blob); err != nil {
			return err
		}
	}
	return nil
}

// offlineError says that what was asked for is not in the cache and HF_HUB_OFFLINE forbids a download.
func (c *Client) offlineError(r repo, rev, what, pull string) error {
	return &Error{Kind: r.kind, Repo: r.id, Revision: rev, Err: ErrOffline,
		Msg: fmt.Sprintf("%s (revision %s) is not in the Hugging Face cache %s, and HF_HUB_OFFLINE=1 forbids downloading it: run `%s` where the Hub can be reached, or unset HF_HUB_OFFLINE",
			what, rev, c.Cache, pull)}
}
