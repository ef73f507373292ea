package tasks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf8"

	"stx.dev/stx/schema"
)

// shape is the record layout of a JSONL file; one file has one shape.
type shape int

const (
	shapeRL         shape = iota // prompt, answer
	shapeSFT                     // prompt, completion
	shapePreference              // prompt, chosen, rejected
	shapeKTO                     // prompt, completion, label
)

func (s shape) String() string {
	return [...]string{"prompt/answer (RL)", "prompt/completion (SFT)",
		"prompt/chosen/rejected (preference)", "prompt/completion/label (KTO)"}[s]
}

// kinds are the data kinds a file of this shape serves: RL and SFT files
// both hold a prompt and its target; a preference file also serves SFT on
// the chosen completions and KTO (ForKind keeps one side of each pair).
func (s shape) kinds() []Kind {
	switch s {
	case shapeRL, shapeSFT:
		return []Kind{KindRL, KindSFT}
	case shapePreference:
		return []Kind{KindPreference, KindSFT, KindKTO}
	default:
		return []Kind{KindKTO}
	}
}

// loadJSONLCols reads a JSONL dataset, one JSON object per line (blank lines
// are skipped). The first record fixes the file's shape:
//
//	{"prompt", "answer"}                 RL (Answer)
//	{"prompt", "completion"}             SFT (Answer = completion)
//	{"prompt", "chosen", "rejected"}     preference
//	{"prompt", "completion", "label"}    KTO (Answer = completion, Label)
//
// The prompt may instead be chat messages, a list of {"role", "content"}
// (in "messages", or as the value of "prompt"); a conversation whose last
// message is the assistant's and that has no other target is an SFT
// record with that message as the completion. Each record may add "id"
// (string or integer; default: a hash of the prompt), "data_source"
// (string; default "jsonl") and "metadata" (any JSON, for external
// rewards); other fields are ignored. Text fields are strings, label a
// bool, prompt non-empty. Mixed shapes, bad JSON, missing fields and wrong
// types are errors naming file:line. cols renames the fields (task.columns).
func loadJSONLCols(path string, cols columns) ([]Example, shape, error) {
	f, err := openDataFile(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var (
		exs       []Example
		fileShape shape
		firstLine int
	)
	rd := bufio.NewReader(f)
	for lineNo := 1; ; lineNo++ {
		line, rerr := readLine(rd, maxLineBytes)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, 0, fmt.Errorf("%s:%d: %w", path, lineNo, rerr)
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // UTF-8 BOM
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if col, b, ok := invalidUTF8(line); ok {
				return nil, 0, fmt.Errorf("%s:%d:%d: invalid UTF-8 (byte 0x%02x): the file must be UTF-8", path, lineNo, col, b)
			}
			ex, s, err := parseRecord(line, cols)
			if err != nil {
				return nil, 0, fmt.Errorf("%s:%d: %w", path, lineNo, err)
			}
			ex.Origin = fmt.Sprintf("%s:%d", path, lineNo)
			if len(exs) == 0 {
				fileShape, firstLine = s, lineNo
			} else if s != fileShape {
				return nil, 0, fmt.Errorf("%s:%d: record is %s but the file is %s (line %d)",
					path, lineNo, s, fileShape, firstLine)
			}
			exs = append(exs, ex)
		}
		if rerr != nil { // io.EOF after the last line
			break
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

// invalidUTF8 finds the first byte of b that is not valid UTF-8: its column
// (bytes, from 1) and value. JSON decoding would replace it with U+FFFD
// without a word.
func invalidUTF8(b []byte) (col int, bad byte, found bool) {
	if utf8.Valid(b) {
		return 0, 0, false
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i + 1, b[i], true
		}
		i += n
	}
	return 0, 0, false
}

// maxLineBytes bounds one JSONL record: a multi-gigabyte file without a
// newline is refused instead of filling memory.
const maxLineBytes = 64 << 20

// readLine reads one line (with its '\n'), at most max bytes of it.
func readLine(rd *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := rd.ReadSlice('\n')
		if len(line)+len(part) > max {
			return nil, fmt.Errorf("line longer than %d MiB", max>>20)
		}
		line = append(line, part...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// parseRecord decodes one JSONL line into an example and its shape.
func parseRecord(line []byte, cols columns) (Example, shape, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // integer ids stay exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return Example{}, 0, fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Example{}, 0, errors.New("bad JSON: data after the record")
	}
	rec, ok := v.(map[string]any)
	if !ok {
		return Example{}, 0, fmt.Errorf("record is a JSON %s, want an object", jsonType(v))
	}
	return parseFields(rec, cols, "jsonl")
}

// firstOf returns the first of keys present in rec, or "".
func firstOf(rec map[string]any, keys ...string) string {
	for _, k := range keys {
		if _, ok := lookup(rec, k); ok {
			return k
		}
	}
	return ""
}

// jsonType names the JSON type of a decoded value for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// datasetTask is a user dataset (the jsonl, json and parquet tasks) with
// a held-out split.
type datasetTask struct {
	name       string
	shape      shape
	train, val []Example
}

// datasetLoader reads one file of a dataset format.
type datasetLoader func(path string, cols columns) ([]Example, shape, error)

// datasetLoaders are the dataset formats by task name.
var datasetLoaders = map[string]datasetLoader{
	"jsonl":   loadJSONLCols,
	"json":    loadJSONCols,
	"parquet": loadParquetCols,
}

// newDatasetFactory is the Factory of a dataset format. It reads task.path
// and task.validation_path. Without a validation file it holds out
// validation_split (default 0.1) of the distinct prompts (at least one),
// chosen with the seed; splitting by prompt rather than by record keeps a
// prompt's several records (preference pairs, KTO completions) on one
// side. train_size and validation_size do not apply: every record is used.
// Relative paths are taken as given (relative to the working directory).
func newDatasetFactory(name string) Factory {
	return func(t schema.Task, k schema.Knobs) (Task, error) {
		return newDatasetTask(name, t, k)
	}
}

func newDatasetTask(name string, t schema.Task, k schema.Knobs) (Task, error) {
	seed := k.Seed
	load := datasetLoaders[name]
	if t.Path == "" && t.Dataset == "" {
		return nil, fmt.Errorf("the %q task needs a path", name)
	}
	// The files: task.path and validation_path, or, for a Hugging Face Hub dataset or an
	// hf:// path, the files downloaded into the Hugging Face cache (hubdata.go).
	files, err := dataFiles(t)
	if err != nil {
		return nil, err
	}
	cols := newColumns(t.Columns)
	train, s, err := loadFiles(load, files.train, cols)
	if err != nil {
		return nil, err
	}
	if len(files.val) > 0 {
		val, vs, err := loadFiles(load, files.val, cols)
		if err != nil {
			return nil, err
		}
		if vs != s {
			return nil, fmt.Errorf("%s is %s but %s is %s", files.valName, vs, files.trainName, s)
		}
		return &datasetTask{name: name, shape: s, train: train, val: val}, nil
	}
	split := t.ValidationSplit
	if split == 0 {
		split = 0.1
	}
	if !(split > 0 && split < 1) {
		return nil, fmt.Errorf("validation_split %g must be in (0, 1)", split)
	}
	var prompts []string
	seen := map[string]bool{}
	for _, ex := range train {
		if !seen[ex.Prompt] {
			seen[ex.Prompt] = true
			prompts = append(prompts, ex.Prompt)
		}
	}
	if len(prompts) < 2 {
		return nil, fmt.Errorf("%s: %d distinct prompt(s): too few to hold out a validation split; give validation_path", files.trainName, len(prompts))
	}
	nVal := min(max(1, int(math.Round(split*float64(len(prompts))))), len(prompts)-1)
	// The "jsonl" stream name keeps the splits of existing runs.
	r := newRand("jsonl", seed)
	held := map[string]bool{}
	for _, i := range r.Perm(len(prompts))[:nVal] {
		held[prompts[i]] = true
	}
	task := &datasetTask{name: name, shape: s}
	for _, ex := range train { // file order is kept within each split
		if held[ex.Prompt] {
			task.val = append(task.val, ex)
		} else {
			task.train = append(task.train, ex)
		}
	}
	return task, nil
}

func (t *datasetTask) Name() string                 { return t.name }
func (t *datasetTask) Kinds() []Kind                { return t.shape.kinds() }
func (t *datasetTask) Train() []Example             { return cloneExamples(t.train) }
func (t *datasetTask) Validation() []Example        { return cloneExamples(t.val) }
func (t *datasetTask) DefaultReward() schema.Reward { return exactMatch }
func (t *datasetTask) verifiedByTerms()             {}

// cloneExamples copies a split so that callers may re-render prompts.
func cloneExamples(exs []Example) []Example { return slices.Clone(exs) }
