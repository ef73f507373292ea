package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"stx.dev/stx/engine/rundir"
)

// save writes the checkpoint of rollout id: every trainable role's model
// (Hugging Face layout), optimizer and RNG state, and the loop state.
func (l *loop) save(id int) error {
	t := time.Now()
	defer func() { l.res.Phases["checkpoint"] += time.Since(t) }()
	l.state.Rollout = id
	l.state.Version = l.version
	l.state.Cursor = l.gen.feed.Cursor
	rng, err := l.rng.MarshalBinary()
	if err != nil {
		return err
	}
	l.state.RNG = rng
	p, err := l.dir.BeginCheckpoint(id)
	if err != nil {
		return err
	}
	defer p.Abort()
	for _, r := range l.roles {
		if !r.trainable() {
			continue
		}
		dir, err := p.RoleDir(r.name())
		if err != nil {
			return err
		}
		if r.flow != nil {
			if err := r.flow.save(dir); err != nil {
				return fmt.Errorf("checkpoint role %q: %w", r.name(), err)
			}
			continue
		}
		if err := r.trainer.SaveCheckpoint(dir, rng); err != nil {
			return fmt.Errorf("checkpoint role %q: %w", r.name(), err)
		}
		if err := writeSideFiles(r.side, dir); err != nil {
			return fmt.Errorf("checkpoint role %q: %w", r.name(), err)
		}
	}
	data, err := json.Marshal(l.state)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.Path(), engineFile), data, 0o644); err != nil {
		return err
	}
	if err := p.Commit(); err != nil {
		return err
	}
	if err := l.dir.LogEvent(rundir.Event{Type: rundir.EventCheckpointSaved, Rollout: id, Checkpoint: p.Target(),
		Metrics: map[string]float64{"time_s": time.Since(t).Seconds()}}); err != nil {
		return err
	}
	_, err = l.dir.Prune(l.rec.Knobs.KeepCheckpoints)
	return err
}

// writeSideFiles puts a role's tokenizer and generation files (read when
// the run started) beside the saved weights, so that the saved role opens
// in other tools unchanged.
func writeSideFiles(side map[string][]byte, to string) error {
	for name, data := range side {
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

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
