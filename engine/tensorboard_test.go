package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stx.dev/stx/internal/pyref"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/engine/tensorboard"
)

// tbSFT: 3 SFT rollouts of one step each on the tiny model, validation before training
// (step 0) and after the last rollout, episodes logged every rollout, a checkpoint each.
var tbSFT = []string{"knobs.num_rollout=3", "knobs.rollout_batch_size=4", "knobs.micro_batch_size=4",
	"knobs.eval_every=0", "knobs.save_every=1", "knobs.keep_checkpoints=0", "knobs.log_episodes_every=1",
	"task.validation_size=4"}

// tbRead is what a run's tb/ directory holds, read back with engine/tensorboard's reader.
type tbRead struct {
	files    []string
	scalars  map[string]map[int64]float32 // tag → step → value
	texts    map[string]map[int64][]string
	dups     []string // "tag@step" written more than once
	versions []string // file_version of each file's first event
}

func readTB(t *testing.T, runDir string) tbRead {
	t.Helper()
	dir := filepath.Join(runDir, TensorBoardDir)
	files, err := tensorboard.EventFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := tbRead{files: files, scalars: map[string]map[int64]float32{}, texts: map[string]map[int64][]string{}}
	for _, f := range files {
		evs, tail, err := tensorboard.ReadEvents(f)
		if err != nil {
			t.Fatal(err)
		}
		if tail != 0 {
			t.Errorf("%s: %d bytes of a damaged last record", f, tail)
		}
		if len(evs) == 0 {
			t.Fatalf("%s: no events", f)
		}
		r.versions = append(r.versions, evs[0].FileVersion)
		for _, e := range evs[1:] {
			if e.FileVersion != "" {
				t.Errorf("%s: file_version in a later event", f)
			}
			for _, v := range e.Values {
				seen := false
				if v.IsText() {
					if v.Plugin != tensorboard.TextPlugin {
						t.Errorf("text %q has plugin %q", v.Tag, v.Plugin)
					}
					if r.texts[v.Tag] == nil {
						r.texts[v.Tag] = map[int64][]string{}
					}
					_, seen = r.texts[v.Tag][e.Step]
					r.texts[v.Tag][e.Step] = v.Text
				} else {
					if r.scalars[v.Tag] == nil {
						r.scalars[v.Tag] = map[int64]float32{}
					}
					_, seen = r.scalars[v.Tag][e.Step]
					r.scalars[v.Tag][e.Step] = v.Scalar
				}
				if seen {
					r.dups = append(r.dups, fmt.Sprintf("%s@%d", v.Tag, e.Step))
				}
			}
		}
	}
	return r
}

// sameFloat32 compares a metrics.jsonl value with TensorBoard's float32 of it.
func sameFloat32(want float64, got float32) bool {
	w := float32(want)
	return w == got || math.IsNaN(float64(w)) && math.IsNaN(float64(got))
}

// checkScalarsEqualMetrics requires the scalars to be metrics.jsonl exactly: every value of
// every record at its step, and nothing else.
func checkScalarsEqualMetrics(t *testing.T, runDir string, scalars map[string]map[int64]float32) {
	t.Helper()
	n := 0
	for _, rec := range metrics(t, runDir) {
		step := int64(rec[rundir.StepKey].(float64))
		for k, v := range rec {
			if k == rundir.StepKey {
				continue
			}
			n++
			got, ok := scalars[k][step]
			if !ok {
				t.Errorf("metric %s at step %d (%v) is not in TensorBoard", k, step, v)
			} else if !sameFloat32(v.(float64), got) {
				t.Errorf("metric %s at step %d: metrics.jsonl %v, TensorBoard %v", k, step, v, got)
			}
		}
	}
	m := 0
	for _, steps := range scalars {
		m += len(steps)
	}
	if m != n {
		t.Errorf("TensorBoard holds %d scalars, metrics.jsonl %d values", m, n)
	}
}

func TestTensorBoardEventFiles(t *testing.T) {
	res, err := Run(context.Background(), runCatalog(t, "sft", tbSFT...), "sft", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tb := readTB(t, res.Dir)
	if len(tb.files) != 1 || tb.versions[0] != tensorboard.FileVersion {
		t.Fatalf("event files %v, file versions %q", tb.files, tb.versions)
	}
	if len(tb.dups) > 0 {
		t.Errorf("written twice: %v", tb.dups)
	}
	checkScalarsEqualMetrics(t, res.Dir, tb.scalars)
	for _, key := range []string{"val/accuracy", "policy/loss"} {
		if len(tb.scalars[key]) == 0 {
			t.Errorf("no %s scalars", key)
		}
	}
	if _, ok := tb.scalars["val/accuracy"][0]; !ok {
		t.Errorf("no validation before training at step 0: %v", tb.scalars["val/accuracy"])
	}
	config, err := os.ReadFile(filepath.Join(res.Dir, rundir.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.texts[tbRecipeTag]; len(got) != 1 || len(got[0]) != 1 || got[0][0] != codeBlock(string(config), "cue") {
		t.Errorf("recipe text %v, want config.cue at step 0 in a code block", got)
	}
	// Each rollout's episodes: one text summary at the rollout's last step, a row per episode.
	eps, err := rundir.ReadEpisodes(filepath.Join(res.Dir, rundir.EpisodesFile))
	if err != nil {
		t.Fatal(err)
	}
	perRollout := map[int64]int{}
	for _, ep := range eps {
		perRollout[int64(ep["rollout"].(float64))+1]++ // one step per rollout: rollout id+1
	}
	got := tb.texts[tbEpisodesTag]
	if len(got) != 3 || len(perRollout) != 3 {
		t.Fatalf("episode summaries at steps %v, episodes per rollout %v", got, perRollout)
	}
	for step, n := range perRollout {
		rows := got[step]
		if len(rows) != n {
			t.Errorf("step %d: %d episode rows, episodes.jsonl has %d", step, len(rows), n)
		}
		for _, row := range rows {
			if !strings.HasPrefix(row, "```\nrollout: ") || !strings.Contains(row, "\ncompletion: ") {
				t.Errorf("episode row %q", row)
			}
		}
	}
}

// TestTensorBoardResume: a run whose last checkpoint is gone resumes from the one before;
// the steps past it, which it trains again, are cut from the first file and written once, in
// a second file.
func TestTensorBoardResume(t *testing.T) {
	res, err := Run(context.Background(), runCatalog(t, "sft", tbSFT...), "sft", RunOptions{RunsDir: t.TempDir(), NoEvalBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(res.Dir, rundir.CheckpointsDir, "000002")); err != nil {
		t.Fatal(err)
	}
	first := readTB(t, res.Dir)
	if _, ok := first.scalars["policy/loss"][3]; !ok {
		t.Fatalf("step 3 not written before the resume: %v", first.scalars["policy/loss"])
	}
	cat := runCatalog(t, "sft", append(tbSFT, "knobs.num_rollout=4")...)
	res2, err := Run(context.Background(), cat, "sft", RunOptions{Resume: res.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Rollouts != 2 {
		t.Fatalf("resumed run did %d rollouts, want 2", res2.Rollouts)
	}
	tb := readTB(t, res.Dir)
	if len(tb.files) != 2 || tb.files[0] != first.files[0] || tb.versions[1] != tensorboard.FileVersion {
		t.Fatalf("event files %v (versions %q), want %s and a new one", tb.files, tb.versions, first.files[0])
	}
	if len(tb.dups) > 0 {
		t.Errorf("written twice: %v", tb.dups)
	}
	checkScalarsEqualMetrics(t, res.Dir, tb.scalars)
	evs, _, err := tensorboard.ReadEvents(tb.files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Step > 2 {
			t.Errorf("the first file still has step %d, past the checkpoint (step 2)", e.Step)
		}
	}
	if len(tb.texts[tbRecipeTag]) != 1 || len(tb.texts[tbEpisodesTag]) != 4 {
		t.Errorf("recipe texts at %v, episodes at %v", keys(tb.texts[tbRecipeTag]), keys(tb.texts[tbEpisodesTag]))
	}
}

// TestTensorBoardOffThenResumed: --tensorboard=false writes no tb/; resuming such a run with
// TensorBoard on writes the recipe and the metrics so far, then goes on.
func TestTensorBoardOffThenResumed(t *testing.T) {
	sets := append(append([]string{}, tbSFT...), "knobs.num_rollout=2", "knobs.log_episodes_every=0")
	res, err := Run(context.Background(), runCatalog(t, "sft", sets...), "sft", RunOptions{RunsDir: t.TempDir(), NoTensorBoard: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(res.Dir, TensorBoardDir)); !os.IsNotExist(err) {
		t.Fatalf("tb/ with --tensorboard=false: %v", err)
	}
	if _, err := Run(context.Background(), runCatalog(t, "sft", append(sets, "knobs.num_rollout=3")...), "sft", RunOptions{Resume: res.Dir}); err != nil {
		t.Fatal(err)
	}
	tb := readTB(t, res.Dir)
	if len(tb.files) != 1 || len(tb.dups) > 0 {
		t.Fatalf("event files %v, written twice %v", tb.files, tb.dups)
	}
	checkScalarsEqualMetrics(t, res.Dir, tb.scalars)
	if len(tb.scalars["policy/loss"]) != 3 {
		t.Errorf("policy/loss at steps %v, want 1, 2, 3", keys(tb.scalars["policy/loss"]))
	}
	v1, err := os.ReadFile(filepath.Join(res.Dir, rundir.RecipesDir, "v1.cue"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.texts[tbRecipeTag][0]; len(got) != 1 || got[0] != codeBlock(string(v1), "cue") {
		t.Errorf("recipe text %q", got)
	}
}

func keys[V any](m map[int64]V) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// tbTestLoop is the part of a loop that tbLog uses: a run directory, its console and state.
func tbTestLoop(t *testing.T) *loop {
	t.Helper()
	d, err := rundir.Create(t.TempDir(), "sft", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRecipe(1, []byte("recipes: sft: {}\n")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &loop{env: &env{con: &console{}, dir: d}}
}

func warnings(t *testing.T, d *rundir.Dir) []string {
	t.Helper()
	evs, err := rundir.ReadEvents(d.EventsPath())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Type == rundir.EventWarning {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestTensorBoardWriteErrorWarnsOnce: a full disk (/dev/full) is one warning in events.jsonl;
// the records keep going to metrics.jsonl and episodes.jsonl without an error.
func TestTensorBoardWriteErrorWarnsOnce(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	l := tbTestLoop(t)
	tb := &tbLog{l: l, w: tensorboard.NewWriter(full)}
	l.tb = tb
	l.dir.SetMirror(tb)
	for id := range 3 {
		l.state.Step = id + 1
		if err := l.dir.LogEpisode(map[string]any{"rollout": id, "completion": "7"}); err != nil {
			t.Fatal(err)
		}
		if err := l.dir.LogMetrics(id+1, map[string]float64{"policy/loss": 1}); err != nil {
			t.Fatal(err)
		}
		tb.flush(id)
	}
	tb.close()
	w := warnings(t, l.dir)
	if len(w) != 1 || !strings.Contains(w[0], "no space left on device") || !strings.Contains(w[0], "metrics.jsonl") {
		t.Fatalf("warnings %q, want one about the full disk", w)
	}
	if recs := metrics(t, l.dir.Path()); len(recs) != 3 {
		t.Errorf("%d metrics records, want 3", len(recs))
	}
}

// TestTensorBoardOpenErrorWarns: a tb/ that is not a directory is a warning, not a failure.
func TestTensorBoardOpenErrorWarns(t *testing.T) {
	l := tbTestLoop(t)
	if err := os.WriteFile(filepath.Join(l.dir.Path(), TensorBoardDir), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.openTensorBoard()
	if l.tb != nil {
		t.Fatal("TensorBoard output started over a file")
	}
	if w := warnings(t, l.dir); len(w) != 1 || !strings.HasPrefix(w[0], "tensorboard: ") {
		t.Fatalf("warnings %q", w)
	}
	l.tb.flush(0) // nil-safe, as the loop calls them
	l.tb.close()
	if err := l.dir.LogMetrics(1, map[string]float64{"x": 1}); err != nil {
		t.Fatal(err)
	}
}

// TestTensorBoardReadsRun: TensorBoard's own reader (EventAccumulator, through
// scripts/tb-read.py) reads a run's tb/ directory: every metrics.jsonl value at its step as a
// float32 scalar, the recipe as text at step 0, the episodes as text. It skips when TensorBoard
// is not installed (scripts/fetch-tensorboard.sh), except under CI=true, where that fails.
func TestTensorBoardReadsRun(t *testing.T) {
	ref := pyref.Require(t, "tensorboard", os.Getenv("STX_TENSORBOARD_DIR"), "tensorboard", "fetch-tensorboard.sh")
	res, err := Run(context.Background(), runCatalog(t, "sft", tbSFT...), "sft", RunOptions{RunsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ref.Python, filepath.Join("..", "scripts", "tb-read.py"), filepath.Join(res.Dir, TensorBoardDir))
	cmd.Env = append(os.Environ(), "STX_TENSORBOARD_DIR="+ref.Dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tb-read.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		FileVersion float64                         `json:"file_version"`
		Scalars     map[string][][2]json.RawMessage `json:"scalars"`
		Texts       map[string][]struct {
			Step  int64    `json:"step"`
			Shape []int    `json:"shape"`
			Text  []string `json:"text"`
		} `json:"texts"`
		Plugins map[string]string `json:"plugins"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("tb-read.py printed %.300s: %v", out, err)
	}
	if got.FileVersion != 2 {
		t.Errorf("file version %v, want 2", got.FileVersion)
	}
	scalars := map[string]map[int64]float32{}
	for tag, points := range got.Scalars {
		scalars[tag] = map[int64]float32{}
		for _, p := range points {
			var step int64
			var v any
			if json.Unmarshal(p[0], &step) != nil || json.Unmarshal(p[1], &v) != nil {
				t.Fatalf("%s: point %s", tag, p)
			}
			if _, dup := scalars[tag][step]; dup {
				t.Errorf("%s: step %d twice", tag, step)
			}
			switch x := v.(type) {
			case float64:
				scalars[tag][step] = float32(x)
			case string:
				f, ok := map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)}[x]
				if !ok {
					t.Fatalf("%s: value %q", tag, x)
				}
				scalars[tag][step] = float32(f)
			}
		}
	}
	checkScalarsEqualMetrics(t, res.Dir, scalars)
	config, err := os.ReadFile(filepath.Join(res.Dir, rundir.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	recipe := got.Texts[tbRecipeTag]
	if len(recipe) != 1 || recipe[0].Step != 0 || len(recipe[0].Text) != 1 || !strings.Contains(recipe[0].Text[0], string(config)) {
		t.Errorf("TensorBoard reads the recipe as %+v, want config.cue at step 0", recipe)
	}
	eps := got.Texts[tbEpisodesTag]
	if len(eps) != 3 || len(eps[0].Shape) != 1 || eps[0].Shape[0] != len(eps[0].Text) || !strings.Contains(eps[0].Text[0], "completion: ") {
		t.Errorf("TensorBoard reads the episodes as %+v", eps)
	}
	for _, tag := range []string{tbRecipeTag, tbEpisodesTag} {
		if got.Plugins[tag] != tensorboard.TextPlugin {
			t.Errorf("%s: plugin %q, want text", tag, got.Plugins[tag])
		}
	}
}
