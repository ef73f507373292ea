package tasks

import (
	"context"
	"fmt"
	"os"
	"strings"

	"stx.dev/stx/hub"
	"stx.dev/stx/schema"
)

// dataFileSet is what a dataset task reads: its train files (several shards
// are one dataset, read in order) and validation files (none: a fraction of
// the train split is held out), with the names errors give them.
type dataFileSet struct {
	train, val         []string
	trainName, valName string
}

// hubClient is the Hugging Face Hub client of dataset tasks: configured from
// the environment (HF_ENDPOINT, HF_TOKEN, HF_HUB_CACHE, HF_HUB_OFFLINE, ...),
// with a line on stderr per file downloaded.
var hubClient = func() *hub.Client {
	c := hub.FromEnv()
	c.Progress = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "stx: "+format, args...) }
	return c
}

// dataFiles resolves a dataset task's files. task.path and validation_path
// are taken as given, except hf:// paths, whose files (a pattern may name
// several) are read from the Hugging Face cache, downloaded into it when
// missing. task.dataset names the Parquet files of its split and, with
// validation_split_name, of its held-out split (see hub.Client.DatasetFiles).
func dataFiles(t schema.Task) (dataFileSet, error) {
	fs := dataFileSet{trainName: t.Path, valName: t.ValidationPath}
	ctx := context.Background()
	if t.Dataset != "" {
		if t.Path != "" {
			return fs, fmt.Errorf("task: give either path or dataset (%q), not both", t.Dataset)
		}
		split := t.Split
		if split == "" {
			split = "train"
		}
		config := t.Config
		if config == "" {
			config = hub.DefaultConfig
		}
		c := hubClient()
		var err error
		if fs.train, err = c.DatasetFiles(ctx, t.Dataset, t.Revision, config, split); err != nil {
			return fs, err
		}
		fs.trainName = fmt.Sprintf("dataset %s (config %s, split %s)", t.Dataset, config, split)
		if v := t.ValidationSplitName; v != "" {
			if fs.val, err = c.DatasetFiles(ctx, t.Dataset, t.Revision, config, v); err != nil {
				return fs, err
			}
			fs.valName = fmt.Sprintf("dataset %s (config %s, split %s)", t.Dataset, config, v)
		}
		return fs, nil
	}
	var err error
	if fs.train, err = pathFiles(ctx, t.Path); err != nil {
		return fs, err
	}
	if t.ValidationPath != "" {
		if fs.val, err = pathFiles(ctx, t.ValidationPath); err != nil {
			return fs, err
		}
	}
	return fs, nil
}

// pathFiles is a path as given, or the files an hf:// path names.
func pathFiles(ctx context.Context, path string) ([]string, error) {
	if !hub.IsPath(path) {
		return []string{path}, nil
	}
	p, err := hub.ParsePath(path)
	if err != nil {
		return nil, err
	}
	return hubClient().Files(ctx, p)
}

// loadFiles reads files of one format as one dataset, in order: every file
// must have the first one's shape, and ids given in the records must be
// unique across the files.
func loadFiles(load datasetLoader, files []string, cols columns) ([]Example, shape, error) {
	if len(files) == 1 {
		return load(files[0], cols)
	}
	var (
		all   []Example
		first shape
	)
	for i, f := range files {
		exs, s, err := load(f, cols)
		if err != nil {
			return nil, 0, err
		}
		if i == 0 {
			first = s
		} else if s != first {
			return nil, 0, fmt.Errorf("%s is %s but %s is %s: the files of one dataset have one shape", f, s, files[0], first)
		}
		all = append(all, exs...)
	}
	if len(all) == 0 {
		return nil, 0, fmt.Errorf("%s: no records", strings.Join(files, ", "))
	}
	if err := uniqueIDs(all); err != nil {
		return nil, 0, err
	}
	return all, first, nil
}

// LocalDataFiles returns the local files a dataset task reads, train then validation:
// task.path and validation_path as given, hf:// paths and task.dataset resolved through
// the Hugging Face cache (downloading what it lacks). A synthetic task reads none. The
// cache key of a starting model trained on the task hashes them.
func LocalDataFiles(t schema.Task) ([]string, error) {
	if t.Path == "" && t.ValidationPath == "" && t.Dataset == "" {
		return nil, nil
	}
	fs, err := dataFiles(t)
	if err != nil {
		return nil, err
	}
	return append(fs.train, fs.val...), nil
}
