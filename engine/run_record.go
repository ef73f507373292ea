package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/engine/tensorboard"
)

// logEpisodes writes up to 8 sampled rows of rollout id to episodes.jsonl.
func (l *loop) logEpisodes(id int, b *batch) error {
	if b.wf != nil {
		return b.wf.logEpisodes(l, id)
	}
	d := b.data
	for i := 0; i < d.Len() && i < 8; i++ {
		ep := map[string]any{"rollout": id, "task_id": d.TaskID[i], "reward": d.Reward[i]}
		if i < len(l.rowAdv) {
			ep["advantage"] = l.rowAdv[i]
		}
		if i < len(b.exs) && b.exs[i].Prompt != "" {
			ep["prompt"] = b.exs[i].Prompt
		}
		if i < len(b.completions) {
			ep["completion"] = b.completions[i]
		} else if l.gen.tok != nil {
			ep["completion"] = l.gen.tok.Decode(d.Tokens[i][d.PromptLen[i]:])
		}
		if err := l.dir.LogEpisode(ep); err != nil {
			return err
		}
	}
	return nil
}

// TensorBoardDir is the directory of a run's TensorBoard event files.
const TensorBoardDir = "tb"

// Tags of the text summaries.
const (
	tbRecipeTag   = "recipe"   // config.cue, at step 0
	tbEpisodesTag = "episodes" // a logged rollout's episodes, at its last step
)

// tbLog writes a run's TensorBoard event files in <run>/tb/: every
// metrics.jsonl record as scalars at its step (it mirrors the run
// directory's metrics stream), the episodes a rollout logs as one text
// summary of a row each at the rollout's last step, and the recipe the run
// started with as text at step 0. Events are flushed to the file at every
// rollout boundary and at the end. A resumed run first cuts the steps past
// its checkpoint from the existing files (the run writes them again) and
// then writes a new file. The first error (a full disk) is reported once,
// on the console and as a warning in events.jsonl, and ends TensorBoard
// output for the run; training goes on.
type tbLog struct {
	l        *loop
	mu       sync.Mutex
	w        *tensorboard.Writer // nil once closed or failed
	episodes []string            // the current rollout's, written at its boundary
	rollout  int                 // the rollout in progress (events' rollout field)
}

// openTensorBoard starts the run's TensorBoard output unless the options
// turn it off; it follows l.ckpt.open (the run directory is open and, on
// resume, the loop state restored).
func (l *loop) openTensorBoard() {
	if l.opts.NoTensorBoard || l.dir == nil || !l.dir.Writes() {
		return
	}
	t := &tbLog{l: l, rollout: max(l.state.Rollout+1, 0)}
	if err := t.open(); err != nil {
		t.warn(err)
		return
	}
	l.tb = t
	l.dir.SetMirror(t)
}

func (t *tbLog) open() error {
	l := t.l
	dir := filepath.Join(l.dir.Path(), TensorBoardDir)
	files, err := tensorboard.EventFiles(dir)
	if err != nil {
		return err
	}
	resumed := l.ckpt != nil && l.ckpt.resume != nil
	if resumed {
		for _, f := range files {
			dropped, cut, err := tensorboard.TruncateAfter(f, int64(l.state.Step))
			if err != nil {
				return err
			}
			if dropped > 0 || cut > 0 {
				l.con.printf("resume: %s: removed %d events past step %d (written again now) and %d bytes of a damaged last record\n",
					filepath.Join(TensorBoardDir, filepath.Base(f)), dropped, l.state.Step, cut)
			}
		}
	}
	if t.w, err = tensorboard.Create(dir, time.Now()); err != nil {
		return err
	}
	if resumed && len(files) > 0 {
		return nil // the steps up to the checkpoint are in the files already
	}
	// A new run, or a run resumed that has no event files yet (it was started
	// with --tensorboard=false, or by an stx without them): the recipe it
	// started with at step 0 and, resumed, the metrics recorded so far.
	var text []byte
	if resumed {
		text, err = l.dir.ReadRecipe(1)
	} else {
		text, err = l.dir.Config()
	}
	if err != nil {
		return err
	}
	if err := t.w.Write(tensorboard.Event{Values: []tensorboard.Value{tensorboard.TextValue(tbRecipeTag, codeBlock(string(text), "cue"))}}); err != nil {
		return err
	}
	if resumed {
		recs, err := rundir.ReadMetrics(l.dir.MetricsPath())
		if err != nil {
			return err
		}
		for _, r := range recs {
			values := map[string]float64{}
			for k, v := range r {
				if f, ok := v.(float64); ok && k != rundir.StepKey {
					values[k] = f
				}
			}
			if err := t.w.Write(scalarEvent(int(r[rundir.StepKey].(float64)), values)); err != nil {
				return err
			}
		}
	}
	return t.w.Flush()
}

// MirrorMetrics writes a metrics record as scalars at its step.
func (t *tbLog) MirrorMetrics(step int, values map[string]float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		if err := t.w.Write(scalarEvent(step, values)); err != nil {
			t.failLocked(err)
		}
	}
}

// MirrorEpisode keeps an episode for the rollout's text summary.
func (t *tbLog) MirrorEpisode(v any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		t.episodes = append(t.episodes, episodeText(v))
	}
}

// flush ends rollout id: its episodes become one text summary at the step
// reached, and the events go to the file.
func (t *tbLog) flush(id int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flushLocked()
	t.rollout = id + 1
}

func (t *tbLog) flushLocked() {
	if t.w == nil {
		return
	}
	if len(t.episodes) > 0 {
		err := t.w.Write(tensorboard.Event{Step: int64(t.l.state.Step), Values: []tensorboard.Value{tensorboard.TextList(tbEpisodesTag, t.episodes)}})
		t.episodes = nil
		if err != nil {
			t.failLocked(err)
			return
		}
	}
	if err := t.w.Flush(); err != nil {
		t.failLocked(err)
	}
}

// close flushes and closes the event file; the run directory stops
// mirroring to it.
func (t *tbLog) close() {
	if t == nil {
		return
	}
	t.l.dir.SetMirror(nil)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flushLocked()
	if t.w != nil {
		if err := t.w.Close(); err != nil {
			t.failLocked(err)
		}
		t.w = nil
	}
}

// failLocked drops the writer after its first error and reports it.
func (t *tbLog) failLocked(err error) {
	t.w.Close()
	t.w, t.episodes = nil, nil
	t.warn(err)
}

// warn reports that TensorBoard output stopped (or never started).
func (t *tbLog) warn(err error) {
	msg := fmt.Sprintf("%v: no TensorBoard events are written from here on (metrics.jsonl and episodes.jsonl have every record)", err)
	if !strings.HasPrefix(msg, "tensorboard") {
		msg = "tensorboard: " + msg
	}
	t.l.con.printf("warning: %s\n", msg)
	t.l.dir.LogEvent(rundir.Event{Type: rundir.EventWarning, Rollout: t.rollout, Message: msg})
}

// scalarEvent is a metrics record as an event of scalars, in tag order.
func scalarEvent(step int, values map[string]float64) tensorboard.Event {
	tags := make([]string, 0, len(values))
	for k := range values {
		tags = append(tags, k)
	}
	slices.Sort(tags)
	e := tensorboard.Event{Step: int64(step), Values: make([]tensorboard.Value, len(tags))}
	for i, k := range tags {
		e.Values[i] = tensorboard.ScalarValue(k, values[k])
	}
	return e
}

// episodeOrder puts an episode's identifying fields first; the others follow by name.
var episodeOrder = []string{"rollout", "episode", "task_id", "reward", "correct", "advantage", "prompt", "completion"}

// episodeText renders an episode record for TensorBoard's text dashboard
// (Markdown): one "field: value" line each, in a code block so that the
// prompt and completion show as they are. A string spanning lines is
// written as an indented block after "field: |".
func episodeText(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return codeBlock(fmt.Sprint(v), "")
	}
	var rec map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if dec.Decode(&rec) != nil || rec == nil {
		return codeBlock(string(data), "json")
	}
	keys := make([]string, 0, len(rec))
	for k := range rec {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		if i := slices.Index(episodeOrder, k); i >= 0 {
			return i
		}
		return len(episodeOrder)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := rank(keys[i]), rank(keys[j])
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		switch x := rec[k].(type) {
		case string:
			if strings.Contains(x, "\n") {
				b.WriteString(k + ": |\n  " + strings.ReplaceAll(x, "\n", "\n  ") + "\n")
			} else {
				b.WriteString(k + ": " + x + "\n")
			}
		default:
			val, _ := json.Marshal(x)
			b.WriteString(k + ": " + string(val) + "\n")
		}
	}
	return codeBlock(strings.TrimSuffix(b.String(), "\n"), "")
}

// codeBlock fences text as a Markdown code block, with a fence longer than
// any run of backticks in it.
func codeBlock(text, lang string) string {
	longest, run := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + lang + "\n" + strings.TrimSuffix(text, "\n") + "\n" + fence
}
