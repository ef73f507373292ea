// Package safetensors reads and writes the Hugging Face safetensors format and
// Hugging Face model directories (one file or shards with an index).
//
// A file is an 8-byte little-endian header length N, N bytes of JSON header
// ({"__metadata__": {string: string}, "<name>": {"dtype", "shape",
// "data_offsets": [begin, end]}, ...}, padded with spaces), then the tensors'
// raw little-endian bytes, offsets relative to the end of the header.
//
// The package is written from the format description rather than wrapping
// github.com/nlpodyssey/safetensors (evaluated at its latest pseudo-version,
// v0.0.0-20250209183917): that library silently keeps the last of duplicated
// tensor names (it decodes the header into a Go map), its errors name neither
// the file nor, for most checks, the tensor, it has no bf16/f16 conversions
// and no atomic file writes, and it has no tagged release.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"stx.dev/stx/internal/plainfile"
)

// maxHeaderSize bounds the JSON header, as the reference implementation does,
// so a corrupt length cannot ask for an absurd allocation.
const maxHeaderSize = 100_000_000

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// File is the decoded content of one safetensors file.
type File struct {
	Metadata map[string]string
	Tensors  map[string]Tensor
}

// ReadFile reads and decodes the safetensors file at path. Errors name the file.
// The header length is checked against the file's size before the file is
// read, and only a regular file is read (a FIFO or a device named like a
// weights file would block or never end).
func ReadFile(path string) (*File, error) {
	data, err := readChecked(path)
	if err != nil {
		return nil, err
	}
	f, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// readChecked reads a whole safetensors file after checking, from its size
// and its first 8 bytes, that the header it announces fits in it.
func readChecked(path string) ([]byte, error) {
	f, size, n, err := openChecked(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if uint64(size) > uint64(maxInt) {
		return nil, fmt.Errorf("%s: safetensors: %d bytes is more than this platform can address", path, size)
	}
	data := make([]byte, size)
	binary.LittleEndian.PutUint64(data, n)
	if _, err := io.ReadFull(f, data[8:]); err != nil {
		return nil, fmt.Errorf("%s: safetensors: reading %d bytes: %w", path, size, err)
	}
	return data, nil
}

// openChecked opens a regular safetensors file and reads its header length,
// checked against the limit and the file's size; the file is left just past
// those 8 bytes.
func openChecked(path string) (f *os.File, size int64, n uint64, err error) {
	f, st, err := plainfile.Open(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	size = st.Size()
	if size < 8 {
		return nil, 0, 0, fmt.Errorf("%s: safetensors: truncated file: %d bytes, need at least 8 for the header length", path, size)
	}
	var head [8]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: safetensors: %w", path, err)
	}
	if n = binary.LittleEndian.Uint64(head[:]); n > maxHeaderSize {
		return nil, 0, 0, fmt.Errorf("%s: safetensors: header length %d exceeds the limit of %d bytes", path, n, maxHeaderSize)
	} else if n > uint64(size-8) {
		return nil, 0, 0, fmt.Errorf("%s: safetensors: truncated file: header length %d is beyond the file's %d bytes", path, n, size)
	}
	return f, size, n, nil
}

// tensorInfo is one tensor entry of the header as written in JSON.
type tensorInfo struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// Decode parses a whole safetensors file held in memory. The returned tensors'
// Data alias data. The file must be well formed: header length within the
// file, valid JSON with each tensor named once, known dtypes, and data offsets
// that tile the data section exactly (no gaps, overlaps or trailing bytes, as
// the reference implementation requires) and match dtype × shape.
func Decode(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors: truncated file: %d bytes, need at least 8 for the header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeaderSize {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the limit of %d bytes", n, maxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("safetensors: truncated file: header length %d is beyond the file's %d bytes", n, len(data))
	}
	header := data[8 : 8+n]
	body := data[8+n:]
	meta, entries, err := decodeHeader(header, uint64(len(body)))
	if err != nil {
		return nil, err
	}
	f := &File{Metadata: meta, Tensors: make(map[string]Tensor, len(entries))}
	for _, e := range entries {
		f.Tensors[e.name] = Tensor{Name: e.name, DType: e.DType, Shape: e.Shape, Data: body[e.begin:e.end:e.end]}
	}
	return f, nil
}

// entry is one tensor of a header, checked against the data section.
type entry struct {
	name string
	TensorInfo
	begin, end uint64
}

// decodeHeader parses a JSON header and checks its entries against a data
// section of bodyLen bytes: known dtypes, data offsets that match dtype ×
// shape and tile the section exactly (no gaps, overlaps or trailing bytes,
// as the reference implementation requires).
func decodeHeader(header []byte, bodyLen uint64) (map[string]string, []entry, error) {
	meta, infos, err := parseHeader(header)
	if err != nil {
		return nil, nil, err
	}
	entries := make([]entry, 0, len(infos))
	for _, ti := range infos {
		name := ti.name
		dt := DType(*ti.info.DType)
		if !dt.Valid() {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, dt)
		}
		shape := make([]int, len(*ti.info.Shape))
		for i, d := range *ti.info.Shape {
			if d > uint64(maxInt) {
				return nil, nil, fmt.Errorf("safetensors: tensor %q: dimension %d too large", name, d)
			}
			shape[i] = int(d)
		}
		want, err := byteSize(dt, shape)
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		offs := *ti.info.DataOffsets
		if len(offs) != 2 {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets has %d numbers, want 2", name, len(offs))
		}
		b, e := offs[0], offs[1]
		if b > e {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] end before they begin", name, b, e)
		}
		if e > bodyLen {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] out of range: the data section has %d bytes (truncated file?)",
				name, b, e, bodyLen)
		}
		if e-b != want {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] span %d bytes, but %s%v needs %d",
				name, b, e, e-b, dt, shape, want)
		}
		entries = append(entries, entry{name: name, TensorInfo: TensorInfo{DType: dt, Shape: shape}, begin: b, end: e})
	}

	// The spans must tile [0, bodyLen) in offset order.
	spans := slices.Clone(entries)
	slices.SortFunc(spans, func(x, y entry) int {
		if x.begin != y.begin {
			return cmp.Compare(x.begin, y.begin)
		}
		return cmp.Compare(x.end, y.end)
	})
	var pos uint64
	prev := ""
	for _, s := range spans {
		switch {
		case s.begin < pos:
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d",
				s.name, s.begin, s.end, prev, pos)
		case s.begin > pos:
			return nil, nil, fmt.Errorf("safetensors: tensor %q: data_offsets begin at %d, leaving a gap after byte %d", s.name, s.begin, pos)
		}
		pos, prev = s.end, s.name
	}
	if pos != bodyLen {
		return nil, nil, fmt.Errorf("safetensors: the tensors cover %d data bytes, but the file has %d after the header", pos, bodyLen)
	}
	return meta, entries, nil
}

const maxInt = int(^uint(0) >> 1)

type namedInfo struct {
	name string
	info tensorInfo
}

// parseHeader walks the header's top-level object token by token, so that a
// name given twice is an error rather than silently overwritten.
func parseHeader(header []byte) (map[string]string, []namedInfo, error) {
	// Unknown fields in a tensor entry are ignored, as the reference
	// implementation ignores them.
	dec := json.NewDecoder(bytes.NewReader(header))
	bad := func(err error) error {
		return fmt.Errorf("safetensors: malformed JSON header: %w", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, bad(err)
	}
	if tok != json.Delim('{') {
		return nil, nil, bad(fmt.Errorf("it does not start with an object"))
	}
	var meta map[string]string
	var infos []namedInfo
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, bad(err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, bad(fmt.Errorf("unexpected %v", tok))
		}
		if name == "" {
			return nil, nil, fmt.Errorf("safetensors: header has a tensor with an empty name")
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("safetensors: header names %q twice", name)
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, bad(fmt.Errorf("%s: %w", metadataKey, err))
			}
			continue
		}
		var ti tensorInfo
		if err := dec.Decode(&ti); err != nil {
			return nil, nil, bad(fmt.Errorf("tensor %q: %w", name, err))
		}
		var missing []string
		if ti.DType == nil {
			missing = append(missing, "dtype")
		}
		if ti.Shape == nil {
			missing = append(missing, "shape")
		}
		if ti.DataOffsets == nil {
			missing = append(missing, "data_offsets")
		}
		if len(missing) > 0 {
			return nil, nil, fmt.Errorf("safetensors: tensor %q: header entry lacks %s", name, strings.Join(missing, ", "))
		}
		infos = append(infos, namedInfo{name, ti})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, nil, bad(err)
	}
	// Only padding may follow the object.
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("unexpected %v after the header object", tok)
		}
		return nil, nil, bad(err)
	}
	return meta, infos, nil
}
