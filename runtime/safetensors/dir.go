package safetensors

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"stx.dev/stx/internal/plainfile"
)

// File names of a Hugging Face model directory.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// shardPattern matches the shard names WriteDir produces (and transformers'
// save_pretrained does), so that stale shards of an earlier write can be removed.
var shardPattern = regexp.MustCompile(`^model-\d{5}-of-\d{5}\.safetensors$`)

// hfMetadata returns the metadata written into every file of a model
// directory: transformers refuses safetensors files whose metadata lacks a
// known "format".
func hfMetadata() map[string]string { return map[string]string{"format": "pt"} }

// index is the JSON layout of model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// ReadDir reads the weights of a Hugging Face model directory: model.safetensors
// if present (transformers prefers it too), otherwise the shards listed by
// model.safetensors.index.json. Every tensor the index maps must be in its
// shard, and every tensor of a shard must be mapped to that shard.
func ReadDir(dir string) (map[string]Tensor, error) {
	out := map[string]Tensor{}
	err := walkDir(dir, func(path string) (map[string]struct{}, error) {
		f, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		names := make(map[string]struct{}, len(f.Tensors))
		for name, t := range f.Tensors {
			out[name] = t
			names[name] = struct{}{}
		}
		return names, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// maxIndexSize bounds model.safetensors.index.json, read before any check.
const maxIndexSize = 64 << 20

// walkDir calls read on model.safetensors in dir, else on each shard that
// model.safetensors.index.json names, in name order; read returns the
// tensor names the file holds. The index must map every tensor of a shard to
// that shard, and every tensor it maps must be there.
func walkDir(dir string, read func(path string) (map[string]struct{}, error)) error {
	single := filepath.Join(dir, SingleFileName)
	_, err := read(single)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	idxPath := filepath.Join(dir, IndexFileName)
	raw, err := plainfile.ReadFile(idxPath, maxIndexSize)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("safetensors: %s has neither %s nor %s", dir, SingleFileName, IndexFileName)
	}
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	var idx index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("safetensors: %s: malformed index: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("safetensors: %s: empty or missing weight_map", idxPath)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		// Shards are plain file names beside the index, never paths elsewhere.
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			return fmt.Errorf("safetensors: %s: tensor %q maps to %q, which is not a file name in the directory", idxPath, name, shard)
		}
		shards[shard] = true
	}
	seen := make(map[string]bool, len(idx.WeightMap))
	for _, shard := range slices.Sorted(maps.Keys(shards)) {
		p := filepath.Join(dir, shard)
		names, err := read(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("safetensors: %s names shard %s, which is missing", idxPath, shard)
		}
		if err != nil {
			return err
		}
		for name := range names {
			if want, ok := idx.WeightMap[name]; !ok || want != shard {
				return fmt.Errorf("safetensors: %s holds tensor %q, which %s does not map to it", p, name, IndexFileName)
			}
			seen[name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		if !seen[name] {
			return fmt.Errorf("safetensors: %s maps tensor %q to %s, which lacks it", idxPath, name, idx.WeightMap[name])
		}
	}
	return nil
}

// WriteDir writes tensors into dir (created if needed) as Hugging Face does:
// one model.safetensors when maxShardBytes is 0 or the tensors' data fits in
// it, otherwise shards model-0000i-of-0000N.safetensors of at most
// maxShardBytes of tensor data each (a larger tensor gets a shard of its own),
// filled in name order, plus model.safetensors.index.json with
// metadata.total_size and the weight_map. Each file is written atomically, the
// index after its shards; model files of an earlier write that the new set
// does not use are removed afterwards.
func WriteDir(dir string, tensors []Tensor, maxShardBytes int64) error {
	if maxShardBytes < 0 {
		return fmt.Errorf("safetensors: negative shard size %d", maxShardBytes)
	}
	if _, err := layout(tensors); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	var total int64
	for _, t := range tensors {
		total += t.Size()
	}
	if maxShardBytes == 0 || total <= maxShardBytes {
		if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, hfMetadata()); err != nil {
			return err
		}
		return removeStale(dir, map[string]bool{SingleFileName: true})
	}

	byName := slices.SortedFunc(slices.Values(tensors), func(a, b Tensor) int {
		return cmp.Compare(a.Name, b.Name)
	})
	var groups [][]Tensor
	var size int64
	for _, t := range byName {
		n := t.Size()
		if len(groups) == 0 || (size > 0 && size+n > maxShardBytes) {
			groups = append(groups, nil)
			size = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], t)
		size += n
	}
	idx := index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	keep := map[string]bool{IndexFileName: true}
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		if err := WriteFile(filepath.Join(dir, name), g, hfMetadata()); err != nil {
			return err
		}
		for _, t := range g {
			idx.WeightMap[t.Name] = name
		}
		keep[name] = true
	}
	js, err := json.MarshalIndent(idx, "", "  ") // map keys come out sorted
	if err != nil {
		return fmt.Errorf("safetensors: encoding index: %w", err)
	}
	js = append(js, '\n')
	if err := writeAtomic(filepath.Join(dir, IndexFileName), func(w io.Writer) error {
		_, err := w.Write(js)
		return err
	}); err != nil {
		return err
	}
	return removeStale(dir, keep)
}

// removeStale deletes model weight files in dir that are not in keep, so that
// a directory rewritten with a different sharding reads back as written.
func removeStale(dir string, keep map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if keep[n] || e.IsDir() {
			continue
		}
		if n == SingleFileName || n == IndexFileName || shardPattern.MatchString(n) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("safetensors: removing stale %s: %w", n, err)
			}
		}
	}
	return nil
}
