package hub

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ParquetRevision is the branch where the Hub keeps its Parquet conversion of
// a dataset: {config}/{split}/0000.parquet, 0001.parquet, ... (a dataset too
// large to convert whole has {config}/partial-{split}/ instead).
const ParquetRevision = "refs/convert/parquet"

// DefaultConfig is a dataset's configuration when none is named.
const DefaultConfig = "default"

// DatasetFiles returns the local paths of the Parquet files of one split of a
// dataset configuration, in shard order, downloading them when the cache lacks
// them. split "" takes every split of the configuration.
//
// The files are found without the datasets-server, by their layout in the
// repository (listed with GET /api/datasets/{id}/tree/{sha}/{folder}):
//
//   - at revision (default "main"), the layout of datasets' push_to_hub and of
//     most Parquet datasets: {config}/{split}-00000-of-00002.parquet (or
//     {config}/{split}.parquet, {config}/{split}/*.parquet); for the config
//     "default" also data/{split}-*.parquet and {split}-*.parquet at the top;
//   - else, when no revision was given, at refs/convert/parquet, the Hub's own
//     Parquet conversion of every public dataset the viewer can read:
//     {config}/{split}/NNNN.parquet (older conversions:
//     {config}/<name>-{split}.parquet and <name>-{split}-NNNNN-of-NNNNN.parquet).
//
// The cache is looked at first, the same way: a split is complete there when
// its first shard is (shards are linked last to first) and, for shards named
// NNNNN-of-MMMMM, all M are.
func (c *Client) DatasetFiles(ctx context.Context, id, revision, config, split string) ([]string, error) {
	return c.datasetFiles(ctx, id, revision, config, split, true)
}

// PullDataset is DatasetFiles without the cache look-up (see PullModel).
func (c *Client) PullDataset(ctx context.Context, id, revision, config, split string) ([]string, error) {
	return c.datasetFiles(ctx, id, revision, config, split, c.Offline)
}

func (c *Client) datasetFiles(ctx context.Context, id, revision, config, split string, cacheFirst bool) ([]string, error) {
	if err := CheckRepoID(id); err != nil {
		return nil, err
	}
	if config == "" {
		config = DefaultConfig
	}
	for _, s := range []string{config, split} {
		if strings.ContainsAny(s, "/\\*?[") || s == "." || s == ".." {
			return nil, fmt.Errorf("dataset %s: %q is not a config or split name", id, s)
		}
	}
	revs := []string{revision}
	if revision == "" {
		revs = []string{DefaultRevision, ParquetRevision}
	}
	for _, rev := range revs {
		if err := validRevision(rev); err != nil {
			return nil, err
		}
	}
	r := repo{Dataset, id}
	what := fmt.Sprintf("config %q", config)
	if split != "" {
		what = fmt.Sprintf("split %q of config %q", split, config)
	}
	if cacheFirst {
		for _, rev := range revs {
			if sha, ok := c.cachedCommit(r, rev); ok {
				if files := c.cachedSplit(r, sha, config, split, rev == ParquetRevision); files != nil {
					return files, nil
				}
			}
		}
	}
	if c.Offline {
		cmd := fmt.Sprintf("stx pull --dataset %s --config %s", id, config)
		if split != "" {
			cmd += " --split " + split
		}
		if revision != "" {
			cmd += " --revision " + revision
		}
		return nil, c.offlineError(r, revs[0], "the Parquet files of "+what, cmd)
	}
	var looked []string
	for i, rev := range revs {
		info, err := c.info(ctx, r, rev)
		if err != nil {
			// A dataset the viewer never converted has no refs/convert/parquet.
			if i > 0 && errors.Is(err, ErrRevisionNotFound) {
				looked = append(looked, fmt.Sprintf("%s (no such branch)", rev))
				continue
			}
			return nil, err
		}
		files, seen, err := c.listSplit(ctx, r, info.SHA, config, split, rev == ParquetRevision)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			looked = append(looked, fmt.Sprintf("%s (%s)", rev, seen))
			continue
		}
		if strings.Contains(files[0], "/partial-") {
			c.say("%s: the Hub converted only part of %s to Parquet (%s): reading that part\n", r, what, path.Dir(files[0]))
		}
		if err := c.fetch(ctx, r, info.SHA, files); err != nil {
			return nil, err
		}
		if err := c.writeRef(r, rev, info.SHA); err != nil {
			return nil, err
		}
		out := make([]string, len(files))
		for i, f := range files {
			out[i] = c.snapshotFile(r, info.SHA, f)
		}
		return out, nil
	}
	return nil, &Error{Kind: Dataset, Repo: id, Revision: revs[0],
		Msg: fmt.Sprintf("no Parquet files of %s: looked at %s", what, strings.Join(looked, "; "))}
}

// splitDirs are the folders where a split's files may lie (see DatasetFiles).
func splitDirs(config string, convert bool) []string {
	if convert || config != DefaultConfig {
		return []string{config}
	}
	return []string{DefaultConfig, "data", ""}
}

// shardPattern is a shard's "-00000-of-00002" (datasets' naming) in a file name.
var shardPattern = regexp.MustCompile(`-(\d{5})-of-(\d{5})`)

// matchSplit picks, from the file paths of one folder dir (and of its
// subfolders one level down), the Parquet files of split ("" for every
// split), sorted.
func matchSplit(paths []string, dir, split string, convert bool) []string {
	var out []string
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	for _, p := range paths {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok || !strings.HasSuffix(rest, ".parquet") {
			continue
		}
		sub, base, nested := strings.Cut(rest, "/")
		if nested && strings.Contains(base, "/") {
			continue // deeper than one level
		}
		var keep bool
		switch {
		case split == "":
			keep = true
		case nested:
			keep = sub == split || convert && sub == "partial-"+split
		case convert:
			name := strings.TrimSuffix(rest, ".parquet")
			if m := shardPattern.FindStringIndex(name); m != nil && m[1] == len(name) {
				name = name[:m[0]]
			}
			keep = strings.HasSuffix(name, "-"+split)
		default:
			keep = rest == split+".parquet" || strings.HasPrefix(rest, split+"-")
		}
		if keep {
			out = append(out, p)
		}
	}
	// A full conversion wins over a partial one.
	var full []string
	for _, p := range out {
		if !strings.Contains(p, "/partial-") {
			full = append(full, p)
		}
	}
	if len(full) > 0 {
		out = full
	}
	sort.Strings(out)
	return out
}

// listSplit lists the Parquet files of a split at commit sha from the Hub.
// seen says what was looked at, for an error when nothing is found.
func (c *Client) listSplit(ctx context.Context, r repo, sha, config, split string, convert bool) ([]string, string, error) {
	var seen []string
	for _, dir := range splitDirs(config, convert) {
		entries, err := c.tree(ctx, r, sha, dir)
		if err != nil {
			return nil, "", err
		}
		var paths, subs, folders []string
		for _, e := range entries {
			switch e.Type {
			case "file":
				paths = append(paths, e.Path)
			case "directory":
				base := path.Base(e.Path)
				folders = append(folders, base)
				if split == "" && dir != "" || base == split || convert && base == "partial-"+split {
					subs = append(subs, e.Path)
				}
			}
		}
		for _, s := range subs {
			more, err := c.tree(ctx, r, sha, s)
			if err != nil {
				return nil, "", err
			}
			for _, e := range more {
				if e.Type == "file" {
					paths = append(paths, e.Path)
				}
			}
		}
		if files := matchSplit(paths, dir, split, convert); len(files) > 0 {
			return files, "", nil
		}
		where := dir + "/"
		if dir == "" {
			where = "the top folder"
		}
		found := listSome(parquetNames(paths, dir))
		if dir == "" && len(folders) > 0 {
			found += fmt.Sprintf(" (folders, which may be configs: %s)", strings.Join(folders, ", "))
		}
		seen = append(seen, fmt.Sprintf("%s: %s", where, found))
	}
	return nil, strings.Join(seen, "; "), nil
}

func parquetNames(paths []string, dir string) []string {
	var out []string
	for _, p := range paths {
		if strings.HasSuffix(p, ".parquet") {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
	}
	if out == nil {
		return []string{"no .parquet files"}
	}
	return out
}

// cachedSplit finds a split's Parquet files in the snapshot of sha: nil unless
// they look complete (see DatasetFiles).
func (c *Client) cachedSplit(r repo, sha, config, split string, convert bool) []string {
	snap := c.SnapshotDir(r.kind, r.id, sha)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return nil
	}
	for _, dir := range splitDirs(config, convert) {
		var paths []string
		top, err := os.ReadDir(filepath.Join(snap, filepath.FromSlash(dir)))
		if err != nil {
			continue
		}
		join := func(parts ...string) string {
			if dir == "" {
				return path.Join(parts...)
			}
			return path.Join(append([]string{dir}, parts...)...)
		}
		for _, e := range top {
			if e.IsDir() {
				sub, err := os.ReadDir(filepath.Join(snap, filepath.FromSlash(join(e.Name()))))
				if err != nil {
					continue
				}
				for _, s := range sub {
					paths = append(paths, join(e.Name(), s.Name()))
				}
				continue
			}
			paths = append(paths, join(e.Name()))
		}
		files := matchSplit(paths, dir, split, convert)
		if len(files) == 0 {
			continue
		}
		if !shardsComplete(files) {
			return nil
		}
		out := make([]string, len(files))
		for i, f := range files {
			if !c.cachedFile(r, sha, f) {
				return nil
			}
			out[i] = c.snapshotFile(r, sha, f)
		}
		return out
	}
	return nil
}

// shardsComplete checks that files named NNNNN-of-MMMMM hold every one of
// their M shards (per folder and name prefix).
func shardsComplete(files []string) bool {
	groups := map[string]map[int]bool{}
	totals := map[string]int{}
	for _, f := range files {
		m := shardPattern.FindStringSubmatchIndex(f)
		if m == nil {
			continue
		}
		key := f[:m[0]]
		i, _ := strconv.Atoi(f[m[2]:m[3]])
		n, _ := strconv.Atoi(f[m[4]:m[5]])
		if groups[key] == nil {
			groups[key] = map[int]bool{}
		}
		groups[key][i] = true
		if t, ok := totals[key]; ok && t != n {
			return false
		}
		totals[key] = n
	}
	for key, have := range groups {
		if len(have) != totals[key] {
			return false
		}
	}
	return true
}

// Path is a file of a repository named as huggingface_hub's HfFileSystem names
// it: hf://datasets/{id}[@{revision}]/{file} (hf://{id}/... for a model).
type Path struct {
	Kind     Kind
	Repo     string
	Revision string // "" when the path names none: "main"
	File     string // may hold glob patterns (*, ?, [...]) naming several files
}

// IsPath reports whether s is an hf:// path.
func IsPath(s string) bool { return strings.HasPrefix(s, "hf://") }

// ParsePath reads an hf:// path. A revision with slashes is written escaped
// (@refs%2Fconvert%2Fparquet) or, for refs/convert/* and refs/pr/*, as is.
func ParsePath(s string) (Path, error) {
	rest, ok := strings.CutPrefix(s, "hf://")
	if !ok {
		return Path{}, fmt.Errorf("%q is not an hf:// path", s)
	}
	p := Path{Kind: Model}
	switch first, after, _ := strings.Cut(rest, "/"); first {
	case "datasets":
		p.Kind, rest = Dataset, after
	case "models":
		rest = after
	case "spaces", "buckets":
		return Path{}, fmt.Errorf("%q: stx reads models and datasets, not %s", s, first)
	}
	ns, rest, ok1 := strings.Cut(rest, "/")
	name, rest, ok2 := strings.Cut(rest, "/")
	if !ok1 {
		return Path{}, fmt.Errorf("%q: want hf://datasets/namespace/name[@revision]/path/in/repo", s)
	}
	if n, rev, hasRev := strings.Cut(name, "@"); hasRev {
		name = n
		if rev == "refs" && ok2 {
			// refs/convert/parquet, refs/pr/12: the revision goes on for two more segments.
			parts := strings.SplitN(rest, "/", 3)
			if len(parts) >= 2 && (parts[0] == "convert" || parts[0] == "pr") {
				rev = "refs/" + parts[0] + "/" + parts[1]
				rest, ok2 = "", len(parts) == 3
				if ok2 {
					rest = parts[2]
				}
			}
		}
		u, err := unescape(rev)
		if err != nil || u == "" {
			return Path{}, fmt.Errorf("%q: bad revision %q", s, rev)
		}
		p.Revision = u
		if err := validRevision(u); err != nil {
			return Path{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	p.Repo = ns + "/" + name
	if err := CheckRepoID(p.Repo); err != nil {
		return Path{}, fmt.Errorf("%q: %w", s, err)
	}
	if !ok2 || rest == "" {
		return Path{}, fmt.Errorf("%q names a repository, not a file in it: add the file's path", s)
	}
	if err := validRepoPath(rest); err != nil {
		return Path{}, fmt.Errorf("%q: %w", s, err)
	}
	if _, err := path.Match(rest, ""); err != nil {
		return Path{}, fmt.Errorf("%q: bad pattern: %w", s, err)
	}
	p.File = rest
	return p, nil
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	return url.PathUnescape(s)
}

func (p Path) String() string {
	s := "hf://"
	if p.Kind == Dataset {
		s += "datasets/"
	}
	s += p.Repo
	if p.Revision != "" {
		s += "@" + strings.ReplaceAll(p.Revision, "/", "%2F")
	}
	return s + "/" + p.File
}

// hasGlob reports whether a path holds a glob pattern.
func hasGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// Files returns the local paths of the files p names, in order, downloading
// them when the cache lacks them. A path without a pattern is looked for in
// the cache first; a pattern is matched against the Hub's listing of its
// folder (against the cached snapshot when offline), and must match a file.
func (c *Client) Files(ctx context.Context, p Path) ([]string, error) {
	rev := p.Revision
	if rev == "" {
		rev = DefaultRevision
	}
	if err := validRevision(rev); err != nil {
		return nil, err
	}
	r := repo{p.Kind, p.Repo}
	glob := hasGlob(p.File)
	if sha, ok := c.cachedCommit(r, rev); ok && (!glob || c.Offline) {
		if !glob && c.cachedFile(r, sha, p.File) {
			return []string{c.snapshotFile(r, sha, p.File)}, nil
		}
		if glob {
			matches, err := filepath.Glob(filepath.Join(c.SnapshotDir(r.kind, r.id, sha), filepath.FromSlash(p.File)))
			if err == nil && len(matches) > 0 {
				sort.Strings(matches)
				return matches, nil
			}
		}
	}
	if c.Offline {
		return nil, c.offlineError(r, rev, p.String(), "stx pull "+p.String())
	}
	info, err := c.info(ctx, r, rev)
	if err != nil {
		return nil, err
	}
	files := []string{p.File}
	if glob {
		if files, err = c.glob(ctx, r, info.SHA, p.File); err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, &Error{Kind: r.kind, Repo: r.id, Revision: rev, File: p.File, Err: ErrEntryNotFound,
				Msg: fmt.Sprintf("no file matches at revision %s", rev)}
		}
	}
	if err := c.fetch(ctx, r, info.SHA, files); err != nil {
		return nil, err
	}
	if err := c.writeRef(r, rev, info.SHA); err != nil {
		return nil, err
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = c.snapshotFile(r, info.SHA, f)
	}
	return out, nil
}

// glob lists the files of commit sha that match pattern, walking down only the
// folders the pattern can match.
func (c *Client) glob(ctx context.Context, r repo, sha, pattern string) ([]string, error) {
	parts := strings.Split(pattern, "/")
	dirs := []string{""}
	for i, part := range parts {
		last := i == len(parts)-1
		var next []string
		for _, d := range dirs {
			entries, err := c.tree(ctx, r, sha, d)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				if ok, _ := path.Match(part, path.Base(e.Path)); !ok {
					continue
				}
				if last && e.Type == "file" || !last && e.Type == "directory" {
					next = append(next, e.Path)
				}
			}
		}
		dirs = next
	}
	sort.Strings(dirs)
	return dirs, nil
}
