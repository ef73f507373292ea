package tasks

import (
	"fmt"

	"stx.dev/stx/schema"
)

// Tests read datasets and build tasks through these shorthands of the
// loaders and of NewFor, with the default field names and difficulty.

func LoadJSONL(path string) ([]Example, error) {
	exs, _, err := loadJSONLCols(path, newColumns(schema.Columns{}))
	return exs, err
}

func LoadJSON(path string) ([]Example, error) {
	exs, _, err := loadJSONCols(path, newColumns(schema.Columns{}))
	return exs, err
}

func LoadParquet(path string) ([]Example, error) {
	exs, _, err := loadParquetCols(path, newColumns(schema.Columns{}))
	return exs, err
}

// LoadDataset reads a dataset file of format ("jsonl", "json" or
// "parquet") with the given field names (empty ones take the defaults).
func LoadDataset(format, path string, cols schema.Columns) ([]Example, error) {
	load, ok := datasetLoaders[format]
	if !ok {
		return nil, fmt.Errorf("unknown dataset format %q (known: jsonl, json, parquet)", format)
	}
	exs, _, err := load(path, newColumns(cols))
	return exs, err
}

func New(t schema.Task, seed int) (Task, error) {
	return NewFor(t, schema.Knobs{Seed: seed})
}
