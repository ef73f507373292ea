package safetensors

import (
	"fmt"
	"io"
)

// TensorInfo is what a header says of one tensor, without its data.
type TensorInfo struct {
	DType DType
	Shape []int
	File  string // the file holding it (ReadHeaders)
}

// ReadHeader reads the tensor entries of the safetensors file at path
// without reading their data, with the checks ReadFile makes: the header
// length within the limit and the file, known dtypes, and data offsets that
// match dtype × shape and tile the rest of the file exactly, so that reading
// the file afterwards allocates no more than its header describes.
func ReadHeader(path string) (map[string]TensorInfo, error) {
	f, size, n, err := openChecked(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	header := make([]byte, n)
	if _, err := io.ReadFull(f, header); err != nil {
		return nil, fmt.Errorf("%s: safetensors: reading the header: %w", path, err)
	}
	_, entries, err := decodeHeader(header, uint64(size)-8-n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]TensorInfo, len(entries))
	for _, e := range entries {
		e.File = path
		out[e.name] = e.TensorInfo
	}
	return out, nil
}

// ReadDirHeaders is ReadHeader for a model directory laid out as ReadDir
// reads it (model.safetensors, else the shards of
// model.safetensors.index.json), with ReadDir's checks of the index.
func ReadDirHeaders(dir string) (map[string]TensorInfo, error) {
	out := map[string]TensorInfo{}
	err := walkDir(dir, func(path string) (map[string]struct{}, error) {
		infos, err := ReadHeader(path)
		if err != nil {
			return nil, err
		}
		names := make(map[string]struct{}, len(infos))
		for name, info := range infos {
			out[name] = info
			names[name] = struct{}{}
		}
		return names, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
