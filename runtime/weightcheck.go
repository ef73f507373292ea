package runtime

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"stx.dev/stx/runtime/safetensors"
)

// Limits of what readTensorHeaders reads before the config has vetted a file: the header
// length limit of the safetensors format, and a bound on the shard index.
const (
	maxTensorHeader = 100_000_000
	maxIndexFile    = 64 << 20
)

// tensorHeader is one tensor entry of a safetensors header, read without its data.
type tensorHeader struct {
	DType safetensors.DType
	Shape []int
	File  string // the file holding it, for error messages
}

// readTensorHeaders reads the tensor entries of a model directory's safetensors headers
// (model.safetensors, else the shards model.safetensors.index.json names) without reading
// any tensor data. Each file's length must be what its header describes, so that reading it
// afterwards allocates no more than the config-checked tensors.
func readTensorHeaders(dir string) (map[string]tensorHeader, error) {
	single := filepath.Join(dir, safetensors.SingleFileName)
	out := map[string]tensorHeader{}
	err := readFileHeader(single, out)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return out, err
	}
	idxPath := filepath.Join(dir, safetensors.IndexFileName)
	st, err := os.Stat(idxPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has neither %s nor %s", dir, safetensors.SingleFileName, safetensors.IndexFileName)
	}
	if err != nil {
		return nil, err
	}
	if st.Size() > maxIndexFile {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d an index may have", idxPath, st.Size(), maxIndexFile)
	}
	raw, err := os.ReadFile(idxPath)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: malformed index: %w", idxPath, err)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			return nil, fmt.Errorf("%s: tensor %q maps to %q, which is not a file name in the directory", idxPath, name, shard)
		}
		shards[shard] = true
	}
	for _, shard := range slices.Sorted(maps.Keys(shards)) {
		if err := readFileHeader(filepath.Join(dir, shard), out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readFileHeader adds the tensor entries of one safetensors file's header to out.
func readFileHeader(path string, out map[string]tensorHeader) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return fmt.Errorf("%s: truncated file: no header length (%d bytes)", path, st.Size())
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxTensorHeader || n > uint64(st.Size()-8) {
		return fmt.Errorf("%s: header length %d does not fit the file's %d bytes (or the limit of %d)", path, n, st.Size(), maxTensorHeader)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(f, header); err != nil {
		return fmt.Errorf("%s: reading header: %w", path, err)
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(header, &entries); err != nil {
		return fmt.Errorf("%s: malformed header: %w", path, err)
	}
	var total uint64
	for name, raw := range entries {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType string  `json:"dtype"`
			Shape []int64 `json:"shape"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("%s: tensor %q: malformed header entry: %w", path, name, err)
		}
		dt := safetensors.DType(e.DType)
		size := uint64(dt.Size())
		if size == 0 {
			return fmt.Errorf("%s: tensor %q: unknown dtype %q", path, name, e.DType)
		}
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || (d > 0 && size > math.MaxInt64/uint64(d)) {
				return fmt.Errorf("%s: tensor %q: shape %v is negative or too large", path, name, e.Shape)
			}
			shape[i] = int(d)
			size *= uint64(d)
		}
		if total > math.MaxInt64-size {
			return fmt.Errorf("%s: the tensors' sizes overflow", path)
		}
		total += size
		if prev, ok := out[name]; ok {
			return fmt.Errorf("%s: tensor %q is also in %s", path, name, prev.File)
		}
		out[name] = tensorHeader{DType: dt, Shape: shape, File: path}
	}
	if data := uint64(st.Size()) - 8 - n; data != total {
		return fmt.Errorf("%s: the header describes %d bytes of tensor data, but the file has %d (truncated or corrupt file?)", path, total, data)
	}
	return nil
}

// checkTensorHeaders matches the tensors of a checkpoint's headers against the tensors the
// config implies: every one present with its shape and a float dtype, and nothing else but
// rotary inv_freq buffers and a tied model's lm_head copy.
func checkTensorHeaders(c Config, heads map[string]tensorHeader) error {
	want := map[string]bool{}
	for _, p := range paramList(c) {
		want[p.Name] = true
		h, ok := heads[p.Name]
		switch {
		case !ok:
			return fmt.Errorf("missing tensor %q (a %s model has it)", p.Name, c.Architecture)
		case !slices.Equal(h.Shape, p.Shape):
			return fmt.Errorf("%s: tensor %q has shape %v, want %v", h.File, p.Name, h.Shape, p.Shape)
		case !h.DType.IsFloat():
			return fmt.Errorf("%s: tensor %q has dtype %s, want a float type (F32, F16, BF16, F64)", h.File, p.Name, h.DType)
		}
	}
	var extra []string
	for name := range heads {
		if !want[name] && !strings.HasSuffix(name, "rotary_emb.inv_freq") && !(name == "lm_head.weight" && c.TieEmbeddings) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		if len(extra) > 5 {
			extra = append(extra[:5], "...")
		}
		return fmt.Errorf("unexpected tensors for a %s model: %s", c.Architecture, strings.Join(extra, ", "))
	}
	return nil
}
