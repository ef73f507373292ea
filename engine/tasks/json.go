package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// loadJSONCols reads a JSON dataset: an array of records, or an object with
// exactly one field that holds the array (e.g. {"data": [...]}, as some
// exports wrap it). Records are the objects loadJSONLCols reads, with
// data_source "json" by default. Errors name file:line and the record's
// index in the array ("data.json:7: record [2]: ...").
func loadJSONCols(path string, cols columns) ([]Example, shape, error) {
	f, err := openDataFile(path)
	if err != nil {
		return nil, 0, err
	}
	// A JSON array is read whole (JSONL is read line by line): bounded, so
	// that a huge file is refused at once (by its size) instead of filling
	// memory.
	tooBig := false
	if st, err := f.Stat(); err == nil && st.Size() > maxJSONBytes {
		tooBig = true
	}
	var data []byte
	if !tooBig {
		data, err = io.ReadAll(io.LimitReader(f, maxJSONBytes+1))
	}
	f.Close()
	if err != nil {
		return nil, 0, fmt.Errorf("read dataset %s: %w", path, err)
	}
	if tooBig || len(data) > maxJSONBytes {
		return nil, 0, fmt.Errorf("%s: a JSON dataset is read whole, and this one is over %d MiB: convert it to JSONL (one record per line), which is read line by line", path, maxJSONBytes>>20)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	lineAt := func(off int64) int { return 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n")) }
	if off, b, ok := invalidUTF8(data); ok {
		line := lineAt(int64(off - 1))
		col := off - bytes.LastIndexByte(data[:off-1], '\n') - 1
		return nil, 0, fmt.Errorf("%s:%d:%d: invalid UTF-8 (byte 0x%02x): the file must be UTF-8", path, line, col, b)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%s: no records (empty file)", path)
		}
		return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(dec.InputOffset()), err)
	}
	base := int64(0) // offset of the array within data
	arr := data
	topArray := false
	switch tok {
	case json.Delim('['):
		topArray = true // re-read from the start below
	case json.Delim('{'):
		var found []string
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(dec.InputOffset()), err)
			}
			start := skipSpace(data, dec.InputOffset(), ":")
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(dec.InputOffset()), err)
			}
			if len(raw) > 0 && raw[0] == '[' {
				found = append(found, fmt.Sprint(k))
				arr, base = raw, start
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(dec.InputOffset()), err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%s:%d: bad JSON: data after the top-level object", path, lineAt(dec.InputOffset()))
		}
		switch len(found) {
		case 0:
			return nil, 0, fmt.Errorf("%s: the top-level object has no list of records", path)
		case 1:
		default:
			sort.Strings(found)
			return nil, 0, fmt.Errorf("%s: the top-level object has %d lists (%s); keep one", path, len(found), strings.Join(found, ", "))
		}
	default:
		return nil, 0, fmt.Errorf("%s:1: the file is a JSON %v, want an array of records or an object holding one", path, tok)
	}
	d := json.NewDecoder(bytes.NewReader(arr))
	d.UseNumber()
	if _, err := d.Token(); err != nil { // '['
		return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(base+d.InputOffset()), err)
	}
	var (
		exs       []Example
		fileShape shape
		first     int
	)
	for i := 0; d.More(); i++ {
		at := lineAt(base + skipSpace(arr, d.InputOffset(), ","))
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: record [%d]: bad JSON: %v", path, at, i, err)
		}
		rec, ok := v.(map[string]any)
		if !ok {
			return nil, 0, fmt.Errorf("%s:%d: record [%d] is a JSON %s, want an object", path, at, i, jsonType(v))
		}
		ex, s, err := parseFields(rec, cols, "json")
		if err != nil {
			return nil, 0, fmt.Errorf("%s:%d: record [%d]: %w", path, at, i, err)
		}
		ex.Origin = fmt.Sprintf("%s:%d: record [%d]", path, at, i)
		if len(exs) == 0 {
			fileShape, first = s, i
		} else if s != fileShape {
			return nil, 0, fmt.Errorf("%s:%d: record [%d] is %s but the file is %s (record [%d])", path, at, i, s, fileShape, first)
		}
		exs = append(exs, ex)
	}
	if _, err := d.Token(); err != nil { // ']'
		return nil, 0, fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(base+d.InputOffset()), err)
	}
	if topArray {
		if _, err := d.Token(); !errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%s:%d: bad JSON: data after the top-level array", path, lineAt(d.InputOffset()))
		}
	}
	if len(exs) == 0 {
		return nil, 0, fmt.Errorf("%s: no records", path)
	}
	if err := uniqueIDs(exs); err != nil {
		return nil, 0, err
	}
	return exs, fileShape, nil
}

// maxJSONBytes bounds a JSON (not JSONL) dataset file, which is read whole.
const maxJSONBytes = 2 << 30

// skipSpace returns the offset of the first byte at or after off that is
// neither JSON whitespace nor one of the separators in sep.
func skipSpace(data []byte, off int64, sep string) int64 {
	for off < int64(len(data)) {
		c := data[off]
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' && !strings.ContainsRune(sep, rune(c)) {
			break
		}
		off++
	}
	return off
}
