package engine

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runFiles lists the regular files under root with their sizes (nil when root does not exist).
func runFiles(t *testing.T, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			info, err := e.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out[rel] = info.Size()
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGroupNodeWritesRunDirectory: in a group of processes node 0 alone writes the run
// directory. Node 1 of 2 trains the same recipe and writes nothing, neither in the runs
// directory nor in its working directory; resuming, it reads node 0's checkpoint and leaves
// node 0's directory as it was.
func TestGroupNodeWritesRunDirectory(t *testing.T) {
	sets := []string{"knobs.num_rollout=3", "knobs.rollout_batch_size=8", "knobs.micro_batch_size=8",
		"knobs.eval_every=0", "knobs.save_every=0", "task.train_size=16", "task.validation_size=4"}
	runs0, runs1 := t.TempDir(), filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := &cancelAfter{line: "rollout 1/3", cancel: cancel}
	part, err := Run(ctx, runCatalog(t, "sft", sets...), "sft", RunOptions{RunsDir: runs0, Out: stop, NoEvalBefore: true,
		Group: GroupNode{Rank: 0, Nodes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if !part.Interrupted || part.Rollouts != 1 || filepath.Dir(part.Dir) != runs0 {
		t.Fatalf("node 0: %+v", part)
	}
	written := runFiles(t, part.Dir)
	for _, f := range []string{"run.json", "metrics.jsonl", "events.jsonl", "config.cue", "checkpoints/000000/COMPLETE"} {
		if _, ok := written[f]; !ok {
			t.Errorf("node 0's run directory has no %s: %v", f, written)
		}
	}

	// Node 1, started in an empty working directory, trains and writes nothing.
	fresh, resumed, resumed0 := runCatalog(t, "sft", sets...), runCatalog(t, "sft", sets...), runCatalog(t, "sft", sets...)
	work := t.TempDir()
	t.Chdir(work)
	res, err := Run(context.Background(), fresh, "sft", RunOptions{RunsDir: runs1, NoEvalBefore: true,
		Group: GroupNode{Rank: 1, Nodes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 3 || res.Dir != "" || res.Objective != nil {
		t.Errorf("node 1: %d steps, dir %q, objective %v; want 3 steps, no directory, no objective", res.Steps, res.Dir, res.Objective)
	}
	if got := runFiles(t, runs1); got != nil {
		t.Errorf("node 1 created its runs directory: %v", got)
	}
	if got := runFiles(t, work); len(got) != 0 {
		t.Errorf("node 1 wrote in its working directory: %v", got)
	}

	// Node 1 resumes node 0's run: from its checkpoint (rollout 1), the 2 rollouts left, nothing written.
	var out strings.Builder
	res, err = Run(context.Background(), resumed, "sft", RunOptions{Resume: part.Dir, Out: &out,
		Group: GroupNode{Rank: 1, Nodes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 2 || res.Steps != 3 || !strings.Contains(out.String(), "from the checkpoint of rollout 1") {
		t.Errorf("node 1 resumed: %d rollouts, %d steps (want 2, 3):\n%s", res.Rollouts, res.Steps, out.String())
	}
	if got := runFiles(t, part.Dir); !equalSizes(got, written) {
		t.Errorf("node 1's resume changed node 0's run directory:\nbefore %v\nafter  %v", written, got)
	}
	if got := runFiles(t, work); len(got) != 0 {
		t.Errorf("node 1 wrote in its working directory: %v", got)
	}

	// Node 0 resumes the same checkpoint and writes the rest of the run.
	res, err = Run(context.Background(), resumed0, "sft", RunOptions{Resume: part.Dir,
		Group: GroupNode{Rank: 0, Nodes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if recs := trainRecords(metrics(t, part.Dir)); res.Rollouts != 2 || len(recs) != 3 {
		t.Errorf("node 0 resumed: %d rollouts, %d step records; want 2 and 3", res.Rollouts, len(recs))
	}
}

func equalSizes(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestGroupNodeWritesRunDir(t *testing.T) {
	for _, c := range []struct {
		n    GroupNode
		want bool
	}{{GroupNode{}, true}, {GroupNode{Rank: 0, Nodes: 1}, true}, {GroupNode{Rank: 0, Nodes: 4}, true},
		{GroupNode{Rank: 1, Nodes: 2}, false}, {GroupNode{Rank: 3, Nodes: 4}, false}} {
		if got := c.n.WritesRunDir(); got != c.want {
			t.Errorf("%+v: WritesRunDir %v, want %v", c.n, got, c.want)
		}
	}
}
