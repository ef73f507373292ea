package tasks

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"

	"stx.dev/stx/schema"
)

func TestLoadJSON(t *testing.T) {
	dir := t.TempDir()
	want := []Example{
		{ID: "1", Prompt: "1+1=", Answer: "2", DataSource: "json"},
		{ID: promptID("2+2="), Prompt: "2+2=", Answer: "4", DataSource: "gsm", Metadata: []byte(`{"level":3}`)},
	}
	for name, content := range map[string]string{
		"array.json":   "[\n {\"prompt\":\"1+1=\",\"answer\":\"2\",\"id\":1},\n {\"prompt\":\"2+2=\",\"answer\":\"4\",\"data_source\":\"gsm\",\"metadata\":{\"level\":3}}\n]\n",
		"wrapped.json": "\ufeff{\"version\": 2, \"data\": [{\"prompt\":\"1+1=\",\"answer\":\"2\",\"id\":1}, {\"prompt\":\"2+2=\",\"answer\":\"4\",\"data_source\":\"gsm\",\"metadata\":{\"level\":3}}], \"info\": {\"a\": [1]}}",
	} {
		got, err := LoadJSON(writeFile(t, dir, name, content))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(bare(got), want) {
			t.Errorf("%s: got %+v\nwant %+v", name, got, want)
		}
	}
	good := `{"prompt":"a","answer":"1"}`
	for _, tc := range []struct{ name, content, want string }{
		{"bad record line", "[\n" + good + ",\n" + good + ",\n  {\"prompt\": 3, \"answer\": \"x\"}\n]", `:4: record [2]: field "prompt" is a JSON number, want a string`},
		{"not an object", "[" + good + ",\n\n 7]", `:3: record [1] is a JSON number, want an object`},
		{"mixed shapes", "[" + good + ",\n{\"prompt\":\"b\",\"completion\":\"c\"}]", `:2: record [1] is prompt/completion (SFT) but the file is prompt/answer (RL) (record [0])`},
		{"truncated", "[" + good + ",\n{\"prompt\":", `:2: record [1]: bad JSON`},
		{"trailing data", "[" + good + "]\n[]", `:2: bad JSON: data after the top-level array`},
		{"scalar", "42", `:1: the file is a JSON 42, want an array`},
		{"two lists", `{"train": [], "test": []}`, `: the top-level object has 2 lists (test, train); keep one`},
		{"no list", `{"a": 1}`, `: the top-level object has no list of records`},
		{"empty array", "[]", `: no records`},
		{"empty file", "  \n", `: no records (empty file)`},
	} {
		p := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".json", tc.content)
		if _, err := LoadJSON(p); err == nil || !strings.HasPrefix(err.Error(), p+tc.want) {
			t.Errorf("%s: error %v\nwant prefix %s", tc.name, err, p+tc.want)
		}
	}
}

func TestColumnsAndMessages(t *testing.T) {
	dir := t.TempDir()
	// verl-style GSM8K rows: a chat prompt under "prompt", the reference
	// answer nested in reward_model.
	p := writeFile(t, dir, "verl.jsonl",
		`{"data_source":"openai/gsm8k","prompt":[{"role":"system","content":"Be brief."},{"role":"user","content":"2+3?"}],"reward_model":{"ground_truth":"5"},"extra_info":{"index":7}}`+"\n"+
			`{"data_source":"openai/gsm8k","prompt":[{"role":"user","content":"4+4?"}],"reward_model":{"ground_truth":"8"},"extra_info":{"index":8}}`+"\n")
	cols := schema.Columns{Answer: "reward_model.ground_truth", ID: "extra_info.index", Metadata: "extra_info"}
	exs, err := LoadDataset("jsonl", p, cols)
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := []Message{{"system", "Be brief."}, {"user", "2+3?"}}
	if !reflect.DeepEqual(exs[0].Messages, wantMsgs) || exs[0].Answer != "5" || exs[0].ID != "7" ||
		exs[0].DataSource != "openai/gsm8k" || string(exs[0].Metadata) != `{"index":7}` {
		t.Errorf("verl row: %+v", exs[0])
	}
	if exs[0].Prompt != "system: Be brief.\nuser: 2+3?\nassistant: " {
		t.Errorf("plain rendering %q", exs[0].Prompt)
	}
	// Renamed columns and a conversation whose last turn is the target.
	p2 := writeFile(t, dir, "renamed.jsonl",
		`{"question":"Capital of France?","final":"Paris"}`+"\n"+
			`{"question":"Capital of Italy?","final":"Rome"}`+"\n")
	exs, err = LoadDataset("jsonl", p2, schema.Columns{Prompt: "question", Answer: "final"})
	if err != nil || exs[1].Prompt != "Capital of Italy?" || exs[1].Answer != "Rome" {
		t.Fatalf("renamed columns: %+v, %v", exs, err)
	}
	p3 := writeFile(t, dir, "chat.jsonl",
		`{"conversation":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`+"\n")
	exs, s, err := loadJSONLCols(p3, newColumns(schema.Columns{Messages: "conversation"}))
	if err != nil || s != shapeSFT || exs[0].Answer != "hello" || len(exs[0].Messages) != 1 {
		t.Fatalf("chat SFT: %+v %v %v", exs, s, err)
	}
	// RenderPrompts swaps in the model's template.
	if err := RenderPrompts(exs, upperRenderer{}); err != nil || exs[0].Prompt != "<USER:hi>" {
		t.Errorf("RenderPrompts: %q, %v", exs[0].Prompt, err)
	}
	for _, tc := range []struct{ content, want string }{
		{`{"messages":"hi","answer":"1"}`, `field "messages" is a JSON string, want a list`},
		{`{"messages":[],"answer":"1"}`, `field "messages" is an empty list`},
		{`{"messages":[{"content":"x"}],"answer":"1"}`, `message 0 has no string "role"`},
		{`{"messages":[{"role":"user","content":5}],"answer":"1"}`, `message 0 has no string "content"`},
		{`{"messages":[{"role":"user","content":"x"}]}`, `record has no "answer"`},
	} {
		p := writeFile(t, dir, "bad.jsonl", tc.content)
		if _, err := LoadJSONL(p); err == nil || !strings.Contains(err.Error(), p+":1: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.content, err, tc.want)
		}
	}
}

type upperRenderer struct{}

func (upperRenderer) Render(ms []Message, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "<%s:%s>", strings.ToUpper(m.Role), m.Content)
	}
	return b.String(), nil
}

type pqMsg struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

func (r pqRow) Messages2() []Message {
	var ms []Message
	for _, m := range r.Messages {
		ms = append(ms, Message{m.Role, m.Content})
	}
	return ms
}

type pqRow struct {
	Question string  `parquet:"question"`
	Answer   *string `parquet:"answer,optional"`
	ID       int64   `parquet:"id"`
	Source   string  `parquet:"data_source"`
	Messages []pqMsg `parquet:"messages,list"`
}

func TestLoadParquet(t *testing.T) {
	dir := t.TempDir()
	str := func(s string) *string { return &s }
	path := filepath.Join(dir, "d.parquet")
	rows := []pqRow{
		{Question: "1+2=", Answer: str("3"), ID: 10, Source: "pq"},
		{Question: "", Answer: str("#### 72"), ID: 11, Source: "pq", Messages: []pqMsg{{"user", "How many?"}}},
	}
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	// The prompt column is "question"; the second row's empty question
	// makes it fail unless messages are read: map prompt to a column that
	// does not exist so that messages are used.
	exs, err := LoadDataset("parquet", path, schema.Columns{Prompt: "question"})
	if err == nil || !strings.HasPrefix(err.Error(), path+`: row 2: field "question" is empty`) {
		t.Fatalf("empty prompt: %v", err)
	}
	rows[1].Question = "72?"
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	if exs, err = LoadDataset("parquet", path, schema.Columns{Prompt: "question"}); err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{ID: "10", Prompt: "1+2=", Answer: "3", DataSource: "pq"},
		{ID: "11", Prompt: "72?", Answer: "#### 72", DataSource: "pq"},
	}
	if !reflect.DeepEqual(bare(exs), want) {
		t.Errorf("got %+v\nwant %+v", exs, want)
	}
	// Messages when the prompt column is absent; an empty list is an error.
	if _, err = LoadDataset("parquet", path, schema.Columns{}); err == nil ||
		!strings.HasPrefix(err.Error(), path+`: row 1: field "messages" is an empty list`) {
		t.Errorf("empty messages: %v", err)
	}
	rows[0].Messages = []pqMsg{{"system", "Add."}, {"user", "1+2="}}
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	if exs, err = LoadDataset("parquet", path, schema.Columns{}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(exs[0].Messages, rows[0].Messages2()) || exs[1].Prompt != "user: How many?\nassistant: " {
		t.Errorf("parquet messages: %+v", exs)
	}
	// A null answer is an absent field: row 2 then has no target.
	rows[1].Answer = nil
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDataset("parquet", path, schema.Columns{Prompt: "question"}); err == nil ||
		!strings.HasPrefix(err.Error(), path+`: row 2: record has no "answer"`) {
		t.Errorf("null answer: %v", err)
	}
	// Not Parquet at all, and a truncated file.
	junk := writeFile(t, dir, "junk.parquet", "this is not parquet")
	if _, err := LoadParquet(junk); err == nil || !strings.Contains(err.Error(), "junk.parquet") {
		t.Errorf("junk: %v", err)
	}
	data, _ := os.ReadFile(path)
	trunc := writeFile(t, dir, "trunc.parquet", string(data[:len(data)/2]))
	if _, err := LoadParquet(trunc); err == nil || !strings.Contains(err.Error(), "trunc.parquet") {
		t.Errorf("truncated: %v", err)
	}
}

func TestDataFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, format := range []string{"jsonl", "json", "parquet"} {
		for _, p := range []string{fifo, "/dev/zero", dir} {
			_, err := LoadDataset(format, p, schema.Columns{})
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s %s: %v", format, p, err)
			}
		}
	}
}

func TestDatasetTasks(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("[")
	for i := range 40 {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"q":"%d+1=","a":"#### %d"}`, i, i+1)
	}
	b.WriteString("]")
	path := writeFile(t, dir, "d.json", b.String())
	task, err := New(schema.Task{Name: "json", Path: path, ValidationSplit: 0.25,
		Columns: schema.Columns{Prompt: "q", Answer: "a"}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if task.Name() != "json" || len(task.Train()) != 30 || len(task.Validation()) != 10 {
		t.Errorf("split %s %d/%d, want 30/10", task.Name(), len(task.Train()), len(task.Validation()))
	}
	if _, err := New(schema.Task{Name: "json", Path: path, ValidationSplit: 1.5}, 3); err == nil {
		t.Error("validation_split 1.5 accepted")
	}
	// A math reward on the dataset.
	rw, err := NewReward([]schema.Reward{{Fn: "math", Weight: 1, Tolerance: 1e-6}}, task)
	if err != nil {
		t.Fatal(err)
	}
	ex := task.Train()[0]
	rs, oks, err := rw.ScoreBatch([]string{"it is " + strings.TrimPrefix(ex.Answer, "#### "), "no idea"}, []Example{ex, ex})
	if err != nil || rs[0] != 1 || rs[1] != 0 || !oks[0] || oks[1] {
		t.Errorf("math on %+v: %v, %v, %v (the math term is the dataset's test of correct)", ex, rs, oks, err)
	}
	// Several weighted terms: the sum, each term, and their names.
	rw, err = NewReward([]schema.Reward{{Fn: "math", Weight: 1}, {Fn: "regex", Weight: 0.5, Pattern: "it"},
		{Fn: "regex", Weight: -2, Pattern: "idea"}}, task)
	if err != nil {
		t.Fatal(err)
	}
	good := "it is " + strings.TrimPrefix(ex.Answer, "#### ")
	rs, _, terms, err := rw.ScoreTerms([]string{good, "no idea"}, []Example{ex, ex})
	if err != nil || fmt.Sprint(rs) != "[1.5 -2]" || fmt.Sprint(terms) != "[[1 0] [1 0] [0 1]]" ||
		fmt.Sprint(rw.TermNames()) != "[math regex regex_2]" {
		t.Errorf("terms: %v %v %v %v", rs, terms, rw.TermNames(), err)
	}
}

func TestJSONLLongLine(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"prompt":"a","answer":"1"}` + "\n")
	b.WriteString(strings.Repeat("x", 300))
	p := writeFile(t, t.TempDir(), "long.jsonl", b.String())
	rd := bufio.NewReaderSize(strings.NewReader(b.String()), 16)
	if l, err := readLine(rd, 100); err != nil || string(l) != `{"prompt":"a","answer":"1"}`+"\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	if _, err := readLine(rd, 100); err == nil || !strings.Contains(err.Error(), "line longer than") {
		t.Errorf("long line: %v", err)
	}
	if _, err := LoadJSONL(p); err == nil || !strings.HasPrefix(err.Error(), p+":2: bad JSON") {
		t.Errorf("load: %v", err)
	}
}
