package specializations

import (
	"testing"

	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// BenchmarkActorPrepareBatch measures the host side of an actor step: GRPO advantages,
// padding, shifting and loss_agg_mode counts of 8 rows.
func BenchmarkActorPrepareBatch(b *testing.B) {
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: "actor", Trainable: true}, Knobs: defaultKnobs()}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	data := rolloutWith(b, s.Contract().Requires(cfg), 1)
	for b.Loop() {
		if _, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 4, Pad: 256}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkActorStep measures one PPO optimizer step of the tiny model on 8 rows in two
// micro-batches (graphs compiled before the timer starts).
func BenchmarkActorStep(b *testing.B) {
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: "actor", Trainable: true}, Knobs: defaultKnobs()}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	mbs, err := s.PrepareBatch(rolloutWith(b, s.Contract().Requires(cfg), 1), BatchOptions{MicroBatchSize: 4, Pad: 256})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := runtime.NewTrainer(testBackend(b), tinyModel(b, false), s.(LM).Loss(),
		runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 1e-4}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tr.Step(mbs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := tr.Step(mbs); err != nil {
			b.Fatal(err)
		}
	}
}
