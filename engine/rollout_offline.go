package engine

import (
	"fmt"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/rollout"
	"stx.dev/stx/specializations"
)

// offline lays out rollout_batch_size dataset examples of its kind: SFT
// rows, (chosen, rejected) pairs, or KTO rows followed by their mismatched
// rows. Nothing is sampled.
type offline struct{ kind tasks.Kind }

// unit is 1: a preference pair is its data kind's unit (datakind.go), not the strategy's.
func (offline) unit() int { return 1 }

func (s offline) generate(g *rolloutGen, _ int, _ uint64) (*batch, error) {
	kind := s.kind
	exs, err := tasks.ForKind(g.feed.next(g.rec.Knobs.RolloutBatchSize), kind)
	if err != nil {
		return nil, err
	}
	b := newRows()
	for _, ex := range exs {
		p := g.enc.prompt(ex.Prompt)
		switch kind {
		case tasks.KindPreference:
			i := b.add(p, g.enc.completion(ex.Chosen), ex, g.role)
			b.setRow(rollout.KeyChosen, i, 1)
			j := b.add(p, g.enc.completion(ex.Rejected), ex, g.role)
			b.setRow(rollout.KeyChosen, j, 0)
		case tasks.KindKTO:
			i := b.add(p, g.enc.completion(ex.Answer), ex, g.role)
			label := 0.0
			if ex.Label {
				label = 1
			}
			b.setRow(rollout.KeyLabel, i, label)
		default:
			b.add(p, g.enc.completion(ex.Answer), ex, g.role)
		}
	}
	data := b.r
	if kind == tasks.KindKTO {
		if data, err = specializations.AddKTOMismatched(data); err != nil {
			return nil, err
		}
	}
	if err := data.Validate(); err != nil {
		return nil, fmt.Errorf("rollout data: %w", err)
	}
	return &batch{data: data, exs: b.exs, metrics: map[string]float64{}}, nil
}
