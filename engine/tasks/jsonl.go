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

// LoadJSONL reads a JSONL dataset, one JSON object per line (blank lines
// are skipped). The first record fixes the file's shape:
//
//	{"prompt", "answer"}                 RL (Answer)
//	{"prompt", "completion"}             SFT (Answer = completion)
//	{"prompt", "chosen", "rejected"}     preference
//	{"prompt", "completion", "label"}    KTO (Answer = completion, Label)
//
// Each record may add "id" (string or integer; default: a hash of the
// prompt) and "data_source" (string; default "jsonl"); other fields are
// ignored. Text fields are strings, label a bool, prompt non-empty. Mixed
// shapes, bad JSON, missing fields and wrong types are errors naming
// file:line.
func LoadJSONL(path string) ([]Example, error) {
	exs, _, err := loadJSONL(path)
	return exs, err
}

func loadJSONL(path string) ([]Example, shape, error) {
	f, err := openDataFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("read dataset: %w", err)
	}
	defer f.Close()
	var (
		exs       []Example
		fileShape shape
		firstLine int
	)
	rd := bufio.NewReader(f)
	for lineNo := 1; ; lineNo++ {
		line, rerr := rd.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, 0, fmt.Errorf("%s:%d: %w", path, lineNo, rerr)
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // UTF-8 BOM
		}
		if len(bytes.TrimSpace(line)) > 0 {
			ex, s, err := parseRecord(line)
			if err != nil {
				return nil, 0, fmt.Errorf("%s:%d: %w", path, lineNo, err)
			}
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
	return exs, fileShape, nil
}

// parseRecord decodes one JSONL line into an example and its shape.
func parseRecord(line []byte) (Example, shape, error) {
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
	has := func(k string) bool { _, ok := rec[k]; return ok }
	var s shape
	switch {
	case has("chosen") || has("rejected"):
		s = shapePreference
		if k := firstOf(rec, "answer", "completion", "label"); k != "" {
			return Example{}, 0, fmt.Errorf("record mixes chosen/rejected with %q", k)
		}
	case has("label"):
		s = shapeKTO
		if has("answer") {
			return Example{}, 0, errors.New(`record mixes "label" with "answer" (KTO records have "completion")`)
		}
	case has("completion"):
		s = shapeSFT
		if has("answer") {
			return Example{}, 0, errors.New(`record has both "answer" and "completion"`)
		}
	case has("answer"):
		s = shapeRL
	default:
		return Example{}, 0, errors.New(`record has no "answer", "completion" or "chosen"/"rejected" field`)
	}
	var ex Example
	var err error
	str := func(k string, dst *string) {
		if err != nil {
			return
		}
		x, ok := rec[k]
		if !ok {
			err = fmt.Errorf("%s record has no %q field", s, k)
			return
		}
		if *dst, ok = x.(string); !ok {
			err = fmt.Errorf("field %q is a JSON %s, want a string", k, jsonType(x))
		}
	}
	str("prompt", &ex.Prompt)
	switch s {
	case shapeRL:
		str("answer", &ex.Answer)
	case shapeSFT, shapeKTO:
		str("completion", &ex.Answer)
	case shapePreference:
		str("chosen", &ex.Chosen)
		str("rejected", &ex.Rejected)
	}
	if err != nil {
		return Example{}, 0, err
	}
	if ex.Prompt == "" {
		return Example{}, 0, errors.New(`field "prompt" is empty`)
	}
	if s == shapeKTO {
		if ex.Label, ok = rec["label"].(bool); !ok {
			return Example{}, 0, fmt.Errorf(`field "label" is a JSON %s, want a bool`, jsonType(rec["label"]))
		}
		ex.HasLabel = true
	}
	switch id := rec["id"].(type) {
	case nil:
		if has("id") {
			return Example{}, 0, errors.New(`field "id" is null, want a string or an integer`)
		}
		ex.ID = promptID(ex.Prompt)
	case string:
		if id == "" {
			return Example{}, 0, errors.New(`field "id" is empty`)
		}
		ex.ID = id
	case json.Number:
		if _, err := id.Int64(); err != nil {
			return Example{}, 0, fmt.Errorf(`field "id" is %s, want a string or an integer`, id)
		}
		ex.ID = id.String()
	default:
		return Example{}, 0, fmt.Errorf(`field "id" is a JSON %s, want a string or an integer`, jsonType(id))
	}
	ex.DataSource = "jsonl"
	if has("data_source") {
		if ex.DataSource, ok = rec["data_source"].(string); !ok {
			return Example{}, 0, fmt.Errorf(`field "data_source" is a JSON %s, want a string`, jsonType(rec["data_source"]))
		}
	}
	return ex, s, nil
}

// firstOf returns the first of keys present in rec, or "".
func firstOf(rec map[string]any, keys ...string) string {
	for _, k := range keys {
		if _, ok := rec[k]; ok {
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

// jsonlTask is the "jsonl" task: a user dataset with a held-out split.
type jsonlTask struct {
	shape      shape
	train, val []Example
}

// newJSONLTask reads task.path and task.validation_path. Without a
// validation file it holds out about 10% of the distinct prompts (at least
// one), chosen with the seed; splitting by prompt rather than by record
// keeps a prompt's several records (preference pairs, KTO completions) on
// one side. train_size and validation_size do not apply: every record is
// used. Relative paths are taken as given (relative to the working
// directory); the caller resolves them against the recipe if it wants to.
func newJSONLTask(t schema.Task, k schema.Knobs) (Task, error) {
	seed := k.Seed
	if t.Path == "" {
		return nil, errors.New(`the "jsonl" task needs a path`)
	}
	train, s, err := loadJSONL(t.Path)
	if err != nil {
		return nil, err
	}
	if t.ValidationPath != "" {
		val, vs, err := loadJSONL(t.ValidationPath)
		if err != nil {
			return nil, err
		}
		if vs != s {
			return nil, fmt.Errorf("%s is %s but %s is %s", t.ValidationPath, vs, t.Path, s)
		}
		return &jsonlTask{shape: s, train: train, val: val}, nil
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
		return nil, fmt.Errorf("%s: %d distinct prompt(s): too few to hold out a validation split; give validation_path", t.Path, len(prompts))
	}
	nVal := max(1, int(math.Round(0.1*float64(len(prompts)))))
	r := newRand("jsonl", seed)
	held := map[string]bool{}
	for _, i := range r.Perm(len(prompts))[:nVal] {
		held[prompts[i]] = true
	}
	task := &jsonlTask{shape: s}
	for _, ex := range train { // file order is kept within each split
		if held[ex.Prompt] {
			task.val = append(task.val, ex)
		} else {
			task.train = append(task.train, ex)
		}
	}
	return task, nil
}

func (t *jsonlTask) Name() string                 { return "jsonl" }
func (t *jsonlTask) Kinds() []Kind                { return t.shape.kinds() }
func (t *jsonlTask) Train() []Example             { return slices.Clone(t.train) }
func (t *jsonlTask) Validation() []Example        { return slices.Clone(t.val) }
func (t *jsonlTask) DefaultReward() schema.Reward { return exactMatch }
