package tasks

import (
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
)

// loadParquetCols reads a Parquet dataset: one record per row, the columns
// named as loadJSONLCols's fields (strings, a boolean label, an integer or
// string id, a list of {role, content} structs for chat messages, nested
// groups reached by dotted column names such as
// "reward_model.ground_truth"). A null value counts as an absent field.
// Errors name the file and the row (1-based): "data.parquet: row 12: …".
func loadParquetCols(path string, cols columns) (exs []Example, s shape, err error) {
	f, err := openDataFile(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("read dataset: %w", err)
	}
	row := 0
	// parquet-go may panic on a corrupt file rather than fail: a bad
	// dataset is the user's error to fix, not a crash.
	defer func() {
		if r := recover(); r != nil {
			exs, err = nil, fmt.Errorf("%s: row %d: corrupt Parquet data: %v", path, row+1, r)
		}
	}()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, 0, fmt.Errorf("%s: not a Parquet file: %w", path, err)
	}
	rd := parquet.NewReader(pf)
	defer rd.Close()
	first := 0
	for ; ; row++ {
		var v any
		if rerr := rd.Read(&v); rerr != nil {
			if errors.Is(rerr, io.EOF) {
				break
			}
			return nil, 0, fmt.Errorf("%s: row %d: %w", path, row+1, rerr)
		}
		rec, ok := v.(map[string]any)
		if !ok {
			return nil, 0, fmt.Errorf("%s: row %d is a %T, want a record", path, row+1, v)
		}
		for k, x := range rec {
			if x == nil {
				delete(rec, k)
			}
		}
		ex, rs, perr := parseFields(rec, cols, "parquet")
		if perr != nil {
			return nil, 0, fmt.Errorf("%s: row %d: %w", path, row+1, perr)
		}
		ex.Origin = fmt.Sprintf("%s: row %d", path, row+1)
		if len(exs) == 0 {
			s, first = rs, row
		} else if rs != s {
			return nil, 0, fmt.Errorf("%s: row %d is %s but the file is %s (row %d)", path, row+1, rs, s, first+1)
		}
		exs = append(exs, ex)
	}
	if len(exs) == 0 {
		return nil, 0, fmt.Errorf("%s: no records", path)
	}
	if err := uniqueIDs(exs); err != nil {
		return nil, 0, err
	}
	return exs, s, nil
}
