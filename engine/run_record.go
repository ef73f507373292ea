package engine

import ()

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
