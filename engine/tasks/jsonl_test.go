package tasks

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

// writeFile writes content to name under dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadJSONLShapes(t *testing.T) {
	dir := t.TempDir()
	yes, no := true, false
	tests := []struct {
		name    string
		content string
		want    []Example
		kinds   []Kind
	}{
		{"rl", "{\"prompt\":\"1+1=\",\"answer\":\"2\",\"id\":\"q1\",\"data_source\":\"gsm\"}\n\n{\"prompt\":\"2+2=\",\"answer\":\"4\",\"extra\":[1]}",
			[]Example{
				{ID: "q1", Prompt: "1+1=", Answer: "2", DataSource: "gsm"},
				{ID: promptID("2+2="), Prompt: "2+2=", Answer: "4", DataSource: "jsonl"},
			}, []Kind{KindRL, KindSFT}},
		{"sft", "\ufeff{\"prompt\":\"hi\",\"completion\":\"héllo 世界\",\"id\":7}\r\n",
			[]Example{{ID: "7", Prompt: "hi", Answer: "héllo 世界", DataSource: "jsonl"}}, []Kind{KindRL, KindSFT}},
		{"preference", `{"prompt":"p","chosen":"a","rejected":"b"}`,
			[]Example{{ID: promptID("p"), Prompt: "p", Chosen: "a", Rejected: "b", DataSource: "jsonl"}},
			[]Kind{KindPreference, KindSFT, KindKTO}},
		{"kto", "{\"prompt\":\"p\",\"completion\":\"a\",\"label\":true}\n{\"prompt\":\"p\",\"completion\":\"b\",\"label\":false}\n",
			[]Example{
				{ID: promptID("p"), Prompt: "p", Answer: "a", Label: yes, HasLabel: true, DataSource: "jsonl"},
				{ID: promptID("p"), Prompt: "p", Answer: "b", Label: no, HasLabel: true, DataSource: "jsonl"},
			}, []Kind{KindKTO}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, tc.name+".jsonl", tc.content)
			got, s, err := loadJSONL(p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(bare(got), tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(s.kinds(), tc.kinds) {
				t.Errorf("kinds %v, want %v", s.kinds(), tc.kinds)
			}
		})
	}
	if promptID("p") != promptID("p") || promptID("p") == promptID("q") || len(promptID("p")) != 17 {
		t.Errorf("promptID not a stable 16-hex hash: %q %q", promptID("p"), promptID("q"))
	}
}

func TestLoadJSONLErrors(t *testing.T) {
	dir := t.TempDir()
	good := `{"prompt":"a","answer":"1"}`
	tests := []struct {
		name    string
		content string
		want    string // the error after "<file>:"
	}{
		{"bad json", good + "\n{\"prompt\": \"b\",\n", `:2: bad JSON`},
		{"trailing data", good + "\n" + good + " 5\n", `:2: bad JSON: data after the record`},
		{"not an object", good + "\n\n[1,2]\n", `:3: record is a JSON array, want an object`},
		{"no target", `{"prompt":"a"}`, `:1: record has no "answer", "completion" or "chosen"/"rejected" field`},
		{"missing prompt", good + "\n" + `{"answer":"2"}`, `:2: prompt/answer (RL) record has no "prompt" field`},
		{"missing rejected", `{"prompt":"a","chosen":"x"}`, `:1: prompt/chosen/rejected (preference) record has no "rejected" field`},
		{"missing completion for label", `{"prompt":"a","label":true}`, `:1: prompt/completion/label (KTO) record has no "completion" field`},
		{"mixed shapes", good + "\n" + good + "\n" + `{"prompt":"b","completion":"2"}`,
			`:3: record is prompt/completion (SFT) but the file is prompt/answer (RL) (line 1)`},
		{"answer and completion", `{"prompt":"a","answer":"1","completion":"1"}`, `:1: record has both "answer" and "completion"`},
		{"pair with answer", `{"prompt":"a","chosen":"1","rejected":"2","answer":"1"}`, `:1: record mixes chosen/rejected with "answer"`},
		{"label with answer", `{"prompt":"a","answer":"1","label":true}`, `:1: record mixes "label" with "answer"`},
		{"number answer", `{"prompt":"a","answer":1}`, `:1: field "answer" is a JSON number, want a string`},
		{"null prompt", `{"prompt":null,"answer":"1"}`, `:1: field "prompt" is a JSON null, want a string`},
		{"empty prompt", `{"prompt":"","answer":"1"}`, `:1: field "prompt" is empty`},
		{"string label", `{"prompt":"a","completion":"1","label":"true"}`, `:1: field "label" is a JSON string, want a bool`},
		{"float id", `{"prompt":"a","answer":"1","id":1.5}`, `:1: field "id" is 1.5, want a string or an integer`},
		{"null id", `{"prompt":"a","answer":"1","id":null}`, `:1: field "id" is null`},
		{"bool id", `{"prompt":"a","answer":"1","id":true}`, `:1: field "id" is a JSON bool`},
		{"array data_source", `{"prompt":"a","answer":"1","data_source":["x"]}`, `:1: field "data_source" is a JSON array, want a string`},
		{"empty file", "\n  \n", `: no records`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, fmt.Sprintf("f%d.jsonl", i), tc.content)
			_, err := LoadJSONL(p)
			if err == nil || !strings.HasPrefix(err.Error(), p+tc.want) {
				t.Errorf("error %v\nwant prefix %s", err, p+tc.want)
			}
		})
	}
	if _, err := LoadJSONL(filepath.Join(dir, "missing.jsonl")); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}

func TestJSONLTask(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	// 50 prompts, two preference pairs each: the split must keep a
	// prompt's pairs together.
	for i := range 50 {
		for j := range 2 {
			fmt.Fprintf(&b, `{"prompt":"p%d","chosen":"c%d","rejected":"r%d"}`+"\n", i, j, j)
		}
	}
	path := writeFile(t, dir, "pref.jsonl", b.String())
	task, err := New(schema.Task{Name: "jsonl", Path: path}, 5)
	if err != nil {
		t.Fatal(err)
	}
	train, val := task.Train(), task.Validation()
	if len(train)+len(val) != 100 || len(val) != 10 {
		t.Fatalf("split %d/%d, want 90/10 records (5 of 50 prompts held out)", len(train), len(val))
	}
	inTrain := map[string]bool{}
	for _, ex := range train {
		inTrain[ex.Prompt] = true
	}
	for _, ex := range val {
		if inTrain[ex.Prompt] {
			t.Fatalf("validation prompt %q also in train", ex.Prompt)
		}
	}
	again, err := New(schema.Task{Name: "jsonl", Path: path}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Validation(), val) {
		t.Error("same seed, different validation split")
	}
	other, err := New(schema.Task{Name: "jsonl", Path: path}, 6)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(other.Validation(), val) {
		t.Error("different seeds, same validation split")
	}
	if !slices.Contains(task.Kinds(), KindPreference) || slices.Contains(task.Kinds(), KindRL) {
		t.Errorf("preference file kinds %v", task.Kinds())
	}
	rw, err := NewReward(nil, task)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := rw.Score("  x ", Example{Answer: "x"}); r != 1 || !ok {
		t.Errorf("jsonl default reward is not exact_match: %v, %v", r, ok)
	}

	// A validation file of the same shape is used as given.
	vpath := writeFile(t, dir, "val.jsonl", `{"prompt":"v","chosen":"a","rejected":"b"}`)
	withVal, err := New(schema.Task{Name: "jsonl", Path: path, ValidationPath: vpath}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(withVal.Train()) != 100 || len(withVal.Validation()) != 1 {
		t.Errorf("with validation_path: %d/%d", len(withVal.Train()), len(withVal.Validation()))
	}

	for _, tc := range []struct {
		name string
		task schema.Task
		want string
	}{
		{"no path", schema.Task{Name: "jsonl"}, "needs a path"},
		{"shape mismatch", schema.Task{Name: "jsonl", Path: path,
			ValidationPath: writeFile(t, dir, "rl.jsonl", `{"prompt":"v","answer":"a"}`)},
			"is prompt/answer (RL) but"},
		{"one prompt", schema.Task{Name: "jsonl", Path: writeFile(t, dir, "one.jsonl", `{"prompt":"v","answer":"a"}`)},
			"too few to hold out"},
		{"bad validation file", schema.Task{Name: "jsonl", Path: path,
			ValidationPath: writeFile(t, dir, "bad.jsonl", "{\n")}, "bad.jsonl:1: bad JSON"},
	} {
		if _, err := New(tc.task, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func loadJSONL(path string) ([]Example, shape, error) {
	return loadJSONLCols(path, newColumns(schema.Columns{}))
}

// bare drops what a loader records about where each example came from.
func bare(exs []Example) []Example {
	out := slices.Clone(exs)
	for i := range out {
		if !strings.Contains(out[i].Origin, ".") {
			panic("example without its origin: " + out[i].ID)
		}
		out[i].Origin, out[i].idGiven = "", false
	}
	return out
}

// TestDatasetInputFaults: bad bytes and repeated ids name file and line at
// load; data unfit for the recipe names the record.
func TestDatasetInputFaults(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"bad.jsonl", "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"b\xff\", \"answer\": \"2\"}\n", "bad.jsonl:2:14: invalid UTF-8 (byte 0xff)"},
		{"bad.json", "[{\"prompt\": \"a\", \"answer\": \"1\"},\n {\"prompt\": \"\xc3\", \"answer\": \"2\"}]", "bad.json:2:14: invalid UTF-8 (byte 0xc3)"},
		{"dup.jsonl", "{\"id\": 1, \"prompt\": \"a\", \"answer\": \"1\"}\n{\"id\": 2, \"prompt\": \"b\", \"answer\": \"2\"}\n{\"id\": 1, \"prompt\": \"c\", \"answer\": \"3\"}\n", "dup.jsonl:3: id \"1\" repeats the id of "},
		{"dup.json", "[{\"id\": \"x\", \"prompt\": \"a\", \"answer\": \"1\"}, {\"id\": \"x\", \"prompt\": \"b\", \"answer\": \"2\"}]", "dup.json:1: record [1]: id \"x\" repeats the id of "},
	} {
		name := tc.name[strings.IndexByte(tc.name, '.')+1:]
		_, err := LoadDataset(name, writeFile(t, dir, tc.name, tc.content), schema.Columns{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Without id fields, repeated prompts are fine (their ids are one hash).
	if _, err := LoadDataset("jsonl", writeFile(t, dir, "same.jsonl", "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"a\", \"answer\": \"1\"}\n"), schema.Columns{}); err != nil {
		t.Error(err)
	}
	// RL records are no preference pairs: the record is named.
	exs, err := LoadDataset("jsonl", writeFile(t, dir, "rl.jsonl", "{\"prompt\": \"a\", \"answer\": \"1\"}\n"), schema.Columns{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ForKind(exs, KindPreference); err == nil || !strings.Contains(err.Error(), "rl.jsonl:1: example ") {
		t.Errorf("ForKind: %v", err)
	}
}

// TestHugeJSONRefusedBySize: a JSON dataset larger than the bound (here a
// sparse file) is refused by its size, before anything is read.
func TestHugeJSONRefusedBySize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxJSONBytes + 1); err != nil {
		t.Skip("no sparse files here:", err)
	}
	f.Close()
	_, err = LoadDataset("json", p, schema.Columns{})
	if err == nil || !strings.Contains(err.Error(), "convert it to JSONL") {
		t.Errorf("got %v", err)
	}
}
