package schema

import (
	"errors"
	"strings"
	"testing"
)

// TestHubChecks: Hub dataset and model fields are checked with positions in the user's file.
func TestHubChecks(t *testing.T) {
	enums := Enums{Specializations: []string{"sft"}, Estimators: []string{"grpo"}, Tasks: []string{"arithmetic", "parquet", "jsonl"}}
	role := `roles: [{name: "p", specialization: "sft"}]`
	for _, c := range []struct {
		name, body string
		want       []string // substrings, one per error, in order; none: valid
	}{
		{name: "dataset ok", body: `task: {name: "parquet", dataset: "openai/gsm8k", config: "main", split: "train", validation_split_name: "test", revision: "main"}`},
		{name: "hf path ok", body: `task: {name: "parquet", path: "hf://datasets/openai/gsm8k/main/train-*.parquet", validation_path: "hf://datasets/openai/gsm8k@refs/convert/parquet/main/test/0000.parquet"}`},
		{name: "model revision ok", body: `roles: [{name: "p", specialization: "sft", model: {source: "Qwen/Qwen2.5-0.5B-Instruct", revision: "7ae557604adf67be50417f59c2c2f167def9a775"}}]`},
		{name: "dataset needs parquet", body: `task: {name: "jsonl", dataset: "openai/gsm8k"}`,
			want: []string{`r.cue:4:33: recipes.a.task.dataset: a Hub dataset is read from its Parquet files: task name must be "parquet" (is "jsonl")`}},
		{name: "dataset and path", body: `task: {name: "parquet", dataset: "openai/gsm8k", path: "x.parquet", validation_path: "y.parquet"}`,
			want: []string{"task.path: give either path or dataset, not both", "task.validation_path: a Hub dataset holds out a split of its own"}},
		{name: "bad dataset id", body: `task: {name: "parquet", dataset: "gsm8k"}`,
			want: []string{`task.dataset: "gsm8k" is not a Hugging Face repository id`}},
		{name: "split fields without dataset", body: `task: {name: "parquet", path: "x.parquet", split: "train", revision: "v1"}`,
			want: []string{"task.split: split applies to a Hub dataset", "task.revision: revision applies to a Hub dataset"}},
		{name: "validation split is the train split", body: `task: {name: "parquet", dataset: "a/b", validation_split_name: "train"}`,
			want: []string{`task.validation_split_name: validation_split_name "train" is the split trained on`}},
		{name: "bad hf path", body: `task: {name: "parquet", path: "hf://datasets/openai/gsm8k"}`,
			want: []string{"task.path: \"hf://datasets/openai/gsm8k\" names a repository, not a file in it"}},
		{name: "revision without a hub id", body: `roles: [{name: "p", specialization: "sft", model: {source: "tiny", revision: "main"}}]`,
			want: []string{`roles[0].model.revision: revision applies to a Hugging Face Hub model id ("namespace/name"), and model.source "tiny" is not one`}},
		{name: "hf model source", body: `roles: [{name: "p", specialization: "sft", model: {source: "hf://Qwen/Qwen3-0.6B"}}]`,
			want: []string{`roles[0].model.source: a Hub model is named by its id alone: "Qwen/Qwen3-0.6B"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if !strings.HasPrefix(body, "roles:") {
				body = role + "\n\t" + body
			}
			src := "package x\nrecipes: a: {\n\t" + body + "\n}\n"
			_, err := Load([]string{"r.cue"}, Options{Dir: t.TempDir(), Enums: enums, Sources: map[string][]byte{"r.cue": []byte(src)}})
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var l List
			if !errors.As(err, &l) {
				t.Fatalf("got %v, want errors %q", err, c.want)
			}
			if len(l) != len(c.want) {
				t.Fatalf("got %d errors:\n%v\nwant %q", len(l), l, c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(l[i].Error(), w) {
					t.Errorf("error %d: %q, want it to contain %q", i, l[i].Error(), w)
				}
			}
		})
	}
}
