package safetensors

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Encode writes tensors and metadata in the safetensors format.
//
// Tensors are laid out in descending element size, then by name: the order
// the reference implementation uses, so that every tensor starts at a multiple
// of its element size (the header is padded with spaces to 8 bytes) and
// readers that view the bytes in place, such as PyTorch, accept the file. When
// all tensors share an element size this is plain name order. Metadata keys
// are written sorted; empty metadata is omitted. The output depends only on
// the arguments.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ordered, err := layout(tensors)
	if err != nil {
		return err
	}
	header, err := encodeHeader(ordered, metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	if _, err := w.Write(n[:]); err != nil {
		return fmt.Errorf("safetensors: writing header length: %w", err)
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("safetensors: writing header: %w", err)
	}
	for _, t := range ordered {
		data, err := t.bytes()
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("safetensors: writing tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// layout validates the tensors and returns them in file order.
func layout(tensors []Tensor) ([]Tensor, error) {
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if t.Name == "" {
			return nil, fmt.Errorf("safetensors: a tensor has an empty name")
		}
		if t.Name == metadataKey {
			return nil, fmt.Errorf("safetensors: tensor name %q is reserved", metadataKey)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("safetensors: duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return nil, err
		}
	}
	ordered := slices.Clone(tensors)
	slices.SortFunc(ordered, func(a, b Tensor) int {
		if c := cmp.Compare(b.DType.Size(), a.DType.Size()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return ordered, nil
}

// encodeHeader builds the JSON header for tensors already in file order,
// padded with spaces to a multiple of 8 bytes.
func encodeHeader(ordered []Tensor, metadata map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	// Not HTML-escaped, so names with <, > or & read as they do in files
	// written by the reference implementation.
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	str := func(s string) {
		_ = enc.Encode(s) // encoding a string cannot fail
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			buf.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		str(metadataKey)
		buf.WriteString(":{")
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				buf.WriteByte(',')
			}
			str(k)
			buf.WriteByte(':')
			str(metadata[k])
		}
		buf.WriteByte('}')
	}
	var off uint64
	for _, t := range ordered {
		sep()
		str(t.Name)
		buf.WriteString(`:{"dtype":`)
		str(string(t.DType))
		buf.WriteString(`,"shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(d))
		}
		end := off + uint64(t.Size())
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	if buf.Len() > maxHeaderSize {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds the limit of %d", buf.Len(), maxHeaderSize)
	}
	return buf.Bytes(), nil
}

// WriteFile writes tensors and metadata to path atomically: the content goes
// to a temporary file in the same directory, is flushed to disk, and is then
// renamed over path, so readers see either the old file or the complete new one.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	// Validate before touching the file system.
	if _, err := layout(tensors); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeAtomic(path, func(w io.Writer) error { return Encode(w, tensors, metadata) })
}

// writeAtomic writes a file through fill via a synced temporary file and a rename.
func writeAtomic(path string, fill func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := fill(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; give it the usual permissions of a written file.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("safetensors: syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: closing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	// Persist the rename itself; some file systems cannot sync a directory,
	// which leaves the file written but the rename possibly not yet durable.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
