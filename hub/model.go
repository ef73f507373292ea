package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ModelSideFiles are the files of a model repository besides its weights that
// stx downloads when the repository has them: the config, the generation
// config (stop tokens), the tokenizer and the chat template.
var ModelSideFiles = []string{
	"config.json", "generation_config.json",
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"tokenizer.model", "vocab.json", "merges.txt",
	"chat_template.jinja", "chat_template.json",
}

// indexFile lists the shards of a sharded safetensors model.
const indexFile = "model.safetensors.index.json"

// Model returns the snapshot directory of model repository id at revision
// ("" is "main": a branch, a tag or a commit sha). The cache is looked at
// first: a snapshot that holds config.json and all of its safetensors weights
// is returned without a request. Otherwise, unless the client is offline, the
// files a model needs (ModelSideFiles and the *.safetensors weights, through
// model.safetensors.index.json when sharded) are downloaded into the cache.
func (c *Client) Model(ctx context.Context, id, revision string) (string, error) {
	return c.model(ctx, id, revision, true)
}

// PullModel is Model without the cache look-up: it asks the Hub which commit
// revision is now (a branch moves) and downloads what that commit's snapshot
// lacks. Offline, it is Model.
func (c *Client) PullModel(ctx context.Context, id, revision string) (string, error) {
	return c.model(ctx, id, revision, c.Offline)
}

func (c *Client) model(ctx context.Context, id, revision string, cacheFirst bool) (string, error) {
	if err := CheckRepoID(id); err != nil {
		return "", err
	}
	if revision == "" {
		revision = DefaultRevision
	}
	if err := validRevision(revision); err != nil {
		return "", err
	}
	r := repo{Model, id}
	if cacheFirst {
		if sha, ok := c.cachedCommit(r, revision); ok && c.completeModel(r, sha) {
			return c.SnapshotDir(Model, id, sha), nil
		}
	}
	if c.Offline {
		return "", c.offlineError(r, revision, "the model", "stx pull "+id+revisionFlag(revision))
	}
	info, err := c.info(ctx, r, revision)
	if err != nil {
		return "", err
	}
	// The ref is written once the snapshot exists: huggingface_hub's scan_cache_dir calls a
	// ref to a commit without a snapshot a corrupted cache.
	if c.completeModel(r, info.SHA) {
		return c.SnapshotDir(Model, id, info.SHA), c.writeRef(r, revision, info.SHA)
	}
	files, shardedBy, err := modelFiles(info.files())
	if err != nil {
		return "", &Error{Kind: Model, Repo: id, Revision: revision, Msg: err.Error()}
	}
	if shardedBy != "" {
		// The index names the shards: fetch it first (it is linked with the rest).
		if err := c.fetch(ctx, r, info.SHA, []string{shardedBy}); err != nil {
			return "", err
		}
		shards, err := readIndex(c.snapshotFile(r, info.SHA, shardedBy))
		if err != nil {
			return "", &Error{Kind: Model, Repo: id, Revision: revision, File: shardedBy, Msg: err.Error()}
		}
		have := info.files()
		for _, s := range shards {
			if !slices.Contains(have, s) {
				return "", &Error{Kind: Model, Repo: id, Revision: revision, File: shardedBy,
					Msg: fmt.Sprintf("names shard %q, which the repository does not hold", s)}
			}
		}
		files = append(files, shards...)
	}
	if err := c.fetch(ctx, r, info.SHA, files); err != nil {
		return "", err
	}
	return c.SnapshotDir(Model, id, info.SHA), c.writeRef(r, revision, info.SHA)
}

func revisionFlag(rev string) string {
	if rev == DefaultRevision {
		return ""
	}
	return " --revision " + rev
}

// modelFiles picks from a repository's file list what stx downloads, in
// order: config.json first (it is linked last, so that its presence says the
// snapshot is complete), the side files, then the weights: the index of a
// sharded model (its shards are read from it: shardedBy), else
// model.safetensors, else every top-level *.safetensors but consolidated ones.
func modelFiles(have []string) (files []string, shardedBy string, err error) {
	if !slices.Contains(have, "config.json") {
		return nil, "", fmt.Errorf("the repository has no config.json: not a transformers model (files: %s)", listSome(have))
	}
	for _, f := range ModelSideFiles {
		if slices.Contains(have, f) {
			files = append(files, f)
		}
	}
	switch {
	case slices.Contains(have, indexFile):
		return files, indexFile, nil
	case slices.Contains(have, "model.safetensors"):
		return append(files, "model.safetensors"), "", nil
	}
	var weights []string
	for _, f := range have {
		if !strings.Contains(f, "/") && strings.HasSuffix(f, ".safetensors") && !strings.HasPrefix(f, "consolidated") {
			weights = append(weights, f)
		}
	}
	if len(weights) == 0 {
		return nil, "", fmt.Errorf("the repository has no safetensors weights (stx reads *.safetensors, not PyTorch .bin files; files: %s)", listSome(have))
	}
	sort.Strings(weights)
	return append(files, weights...), "", nil
}

func listSome(files []string) string {
	if len(files) > 12 {
		return strings.Join(files[:12], ", ") + fmt.Sprintf(", ... (%d in all)", len(files))
	}
	if len(files) == 0 {
		return "none"
	}
	return strings.Join(files, ", ")
}

// readIndex reads the shard file names of model.safetensors.index.json.
func readIndex(p string) ([]string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("not a safetensors index: %w", err)
	}
	var shards []string
	for _, s := range idx.WeightMap {
		if s != path.Base(s) || s == "." || s == ".." || !strings.HasSuffix(s, ".safetensors") {
			return nil, fmt.Errorf("shard %q is not a .safetensors file beside the index", s)
		}
		if !slices.Contains(shards, s) {
			shards = append(shards, s)
		}
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("the index maps no tensors")
	}
	sort.Strings(shards)
	return shards, nil
}

// completeModel reports whether the snapshot of sha holds config.json and all
// of its safetensors weights (every shard its index names, or at least one
// *.safetensors file).
func (c *Client) completeModel(r repo, sha string) bool {
	if !c.cachedFile(r, sha, "config.json") {
		return false
	}
	if c.cachedFile(r, sha, indexFile) {
		shards, err := readIndex(c.snapshotFile(r, sha, indexFile))
		if err != nil {
			return false
		}
		for _, s := range shards {
			if !c.cachedFile(r, sha, s) {
				return false
			}
		}
		return true
	}
	weights, _ := filepath.Glob(filepath.Join(c.SnapshotDir(r.kind, r.id, sha), "*.safetensors"))
	for _, w := range weights {
		if st, err := os.Stat(w); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}
