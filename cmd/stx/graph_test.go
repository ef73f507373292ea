package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/gonum/graph/formats/dot"
)

// TestGraphDOTParses renders every catalog recipe as DOT and parses it with
// an independent DOT parser (gonum's), so the output is valid DOT, not just
// DOT-looking text.
func TestGraphDOTParses(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	var out, errb bytes.Buffer
	if code := run([]string{"stx", "ls", filepath.Join(root, "recipes.cue")}, &out, &errb); code != 0 {
		t.Fatalf("ls: %s", errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")[1:]
	if len(lines) < 25 {
		t.Fatalf("ls listed %d recipes", len(lines))
	}
	for _, line := range lines {
		name := strings.Fields(line)[0]
		out.Reset()
		errb.Reset()
		if code := run([]string{"stx", "graph", filepath.Join(root, "recipes.cue"), "-a", name, "--format", "dot"}, &out, &errb); code != 0 {
			t.Fatalf("graph %s: %s", name, errb.String())
		}
		f, err := dot.ParseString(out.String())
		if err != nil {
			t.Errorf("graph %s: invalid DOT: %v\n%s", name, err, out.String())
			continue
		}
		if len(f.Graphs) != 1 || !f.Graphs[0].Directed || f.Graphs[0].ID != `"`+name+`"` {
			t.Errorf("graph %s: want one digraph named %q, got %+v", name, name, f.Graphs)
		}
	}
}
