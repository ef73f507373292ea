package tasks

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// FuzzLoadJSONL feeds arbitrary bytes to the JSONL dataset reader: it must
// never panic, an error must name the file (and the line, for a record),
// and what it accepts must be usable: every example has a prompt. Run
// longer with: go test -run '^$' -fuzz FuzzLoadJSONL -fuzztime 60s ./engine/tasks
func FuzzLoadJSONL(f *testing.F) {
	f.Add([]byte(`{"prompt": "1+1=", "answer": "2"}` + "\n" + `{"prompt": "2+2=", "answer": "4", "id": 7}`))
	f.Add([]byte("\xef\xbb\xbf" + `{"prompt": "p", "completion": "c", "data_source": "x"}` + "\n\n"))
	f.Add([]byte(`{"prompt": "p", "chosen": "a", "rejected": "b"}` + "\n" + `{"prompt": "p", "answer": "a"}`))
	f.Add([]byte(`{"prompt": "p", "completion": "c", "label": true}` + "\n" + `{"prompt": "", "completion": "c", "label": 1}`))
	f.Add([]byte(`{"prompt": "p", "answer": "a"} {"x": 1}`))
	f.Add([]byte(`[1, 2]`))
	f.Add([]byte(`{"prompt": "p", "answer": 1e999, "id": 123456789012345678901234567890}`))
	f.Add([]byte{})
	path := filepath.Join(f.TempDir(), "data.jsonl")
	lineErr := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `(:\d+)?: `)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		exs, err := LoadJSONL(path)
		if err != nil {
			if !lineErr.MatchString(err.Error()) && !strings.Contains(err.Error(), path) {
				t.Fatalf("error names neither the file nor the line: %v", err)
			}
			return
		}
		if len(exs) == 0 {
			t.Fatal("no error and no examples")
		}
		for i, ex := range exs {
			if ex.Prompt == "" {
				t.Fatalf("example %d has an empty prompt", i)
			}
		}
	})
}
