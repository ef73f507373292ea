package tasks

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"stx.dev/stx/hub/hubtest"
	"stx.dev/stx/schema"
)

type gsmRow struct {
	Question string `parquet:"question"`
	Answer   string `parquet:"answer"`
}

// parquetBytes writes rows "q<from>".."q<to-1>" as a Parquet file.
func parquetBytes(t *testing.T, from, to int) []byte {
	t.Helper()
	var rows []gsmRow
	for i := from; i < to; i++ {
		rows = append(rows, gsmRow{Question: fmt.Sprintf("q%d", i), Answer: fmt.Sprintf("#### %d", i)})
	}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hubEnv starts a fake hub holding openai/gsm8k (config main: train in two shards, test in
// one) and points the environment at it with an empty cache.
func hubEnv(t *testing.T) *hubtest.Server {
	t.Helper()
	s := hubtest.New()
	t.Cleanup(s.Close)
	s.Commit("dataset", "openai/gsm8k", "main", []hubtest.File{
		{Path: "README.md", Data: []byte("# gsm8k\n")},
		{Path: "main/train-00000-of-00002.parquet", Data: parquetBytes(t, 0, 6)},
		{Path: "main/train-00001-of-00002.parquet", Data: parquetBytes(t, 6, 10)},
		{Path: "main/test-00000-of-00001.parquet", Data: parquetBytes(t, 100, 103)},
	})
	t.Setenv("HF_ENDPOINT", s.URL())
	t.Setenv("HF_HUB_CACHE", filepath.Join(t.TempDir(), "hub"))
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	return s
}

func prompts(exs []Example) []string {
	var out []string
	for _, ex := range exs {
		out = append(out, ex.Prompt)
	}
	return out
}

func TestHubDatasetTask(t *testing.T) {
	s := hubEnv(t)
	task := schema.Task{Name: "parquet", Dataset: "openai/gsm8k", Config: "main", Split: "train", ValidationSplitName: "test",
		Columns: schema.Columns{Prompt: "question"}}
	tk, err := NewFor(task, schema.Knobs{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := prompts(tk.Train()), []string{"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"}; !slices.Equal(got, want) {
		t.Errorf("train %v, want %v (the two shards in order)", got, want)
	}
	if got, want := prompts(tk.Validation()), []string{"q100", "q101", "q102"}; !slices.Equal(got, want) {
		t.Errorf("validation %v, want %v", got, want)
	}
	if o := tk.Train()[7].Origin; !strings.Contains(o, filepath.Join("datasets--openai--gsm8k", "snapshots")) || !strings.HasSuffix(o, "train-00001-of-00002.parquet: row 2") {
		t.Errorf("origin %q", o)
	}

	// Offline, from the cache, without a request; a held-out fraction without validation_split_name.
	t.Setenv("HF_HUB_OFFLINE", "1")
	s.Reset()
	task.ValidationSplitName = ""
	tk, err = NewFor(task, schema.Knobs{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, v := len(tk.Train()), len(tk.Validation()); n != 9 || v != 1 {
		t.Errorf("%d train and %d validation examples, want 9 and 1", n, v)
	}
	if r := s.Requests(); len(r) != 0 {
		t.Errorf("offline task made %d requests", len(r))
	}
	// A split not in the cache: a clear error.
	task.Config = "socratic"
	if _, err := NewFor(task, schema.Knobs{Seed: 1}); err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), "dataset openai/gsm8k") {
		t.Errorf("offline, not cached: %v", err)
	}
}

func TestHubPathTask(t *testing.T) {
	hubEnv(t)
	task := schema.Task{Name: "parquet", Path: "hf://datasets/openai/gsm8k/main/train-*.parquet",
		ValidationPath: "hf://datasets/openai/gsm8k@main/main/test-00000-of-00001.parquet", Columns: schema.Columns{Prompt: "question"}}
	tk, err := NewFor(task, schema.Knobs{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(tk.Train()) != 10 || len(tk.Validation()) != 3 {
		t.Errorf("%d train, %d validation", len(tk.Train()), len(tk.Validation()))
	}
	task.Path = "hf://datasets/openai/gsm8k/main/nothing-*.parquet"
	if _, err := NewFor(task, schema.Knobs{Seed: 1}); err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Errorf("no match: %v", err)
	}
	task.Path = "hf://datasets/openai/missing/x.parquet"
	if _, err := NewFor(task, schema.Knobs{Seed: 1}); err == nil || !strings.Contains(err.Error(), "dataset openai/missing: repository not found") {
		t.Errorf("missing repo: %v", err)
	}
}

// TestLoadFiles: shards are one dataset: one shape, ids unique across files.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.jsonl", `{"prompt": "p1", "answer": "1", "id": 1}`+"\n")
	b := writeFile(t, dir, "b.jsonl", `{"prompt": "p2", "answer": "2", "id": 2}`+"\n")
	dup := writeFile(t, dir, "dup.jsonl", `{"prompt": "p3", "answer": "3", "id": 1}`+"\n")
	sft := writeFile(t, dir, "sft.jsonl", `{"prompt": "p4", "completion": "4"}`+"\n")
	load := datasetLoaders["jsonl"]
	exs, _, err := loadFiles(load, []string{a, b}, newColumns(schema.Columns{}))
	if err != nil || len(exs) != 2 || exs[1].Prompt != "p2" {
		t.Errorf("two files: %v, %+v", err, exs)
	}
	if _, _, err := loadFiles(load, []string{a, dup}, newColumns(schema.Columns{})); err == nil || !strings.Contains(err.Error(), `id "1" repeats`) {
		t.Errorf("duplicate id across files: %v", err)
	}
	if _, _, err := loadFiles(load, []string{a, sft}, newColumns(schema.Columns{})); err == nil || !strings.Contains(err.Error(), "one shape") {
		t.Errorf("shapes: %v", err)
	}
}
