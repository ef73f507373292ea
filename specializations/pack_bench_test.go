package specializations

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// mixedLengthRollout is rows of SFT data on the bench model's byte vocabulary, lengths drawn
// uniformly from [lo, hi] (a prompt of a quarter, masked out).
func mixedLengthRollout(rows, lo, hi int, seed uint64) *rollout.Rollout {
	rng := rand.New(rand.NewPCG(seed, 3))
	r := &rollout.Rollout{Tok: map[string][][]float32{}, Row: map[string][]float64{}}
	for i := range rows {
		n := lo + rng.IntN(hi-lo+1)
		tok := make([]int32, n)
		mask := make([]float32, n)
		for j := range tok {
			tok[j] = int32(rng.IntN(256))
			if j >= n/4 {
				mask[j] = 1
			}
		}
		r.Tokens = append(r.Tokens, tok)
		r.Mask = append(r.Mask, mask)
		r.PromptLen = append(r.PromptLen, n/4)
		r.GroupID = append(r.GroupID, string(rune('a'+i)))
	}
	return r
}

// BenchmarkPackedSFTStep measures SFT optimizer steps of the bench model on 32 rows with
// micro_batch_size 8 three ways, alternating in one process so that all see the same machine
// load: unpacked, packed inside fixed micro-batches of 8 sequences (the layout before token-budget
// micro-batches; a specialization whose loss couples a micro-batch's rows still trains so), and
// packed into token-budget micro-batches of 8 rows of the padded length. It reports each one's
// real tokens per second, micro-batches per step and padding share. Rows of 16–256 tokens (SFT
// data of mixed lengths), and of 20–40 (short RL-like rows, bucketed to 64).
func BenchmarkPackedSFTStep(b *testing.B) {
	for _, c := range []struct {
		name   string
		lo, hi int
	}{{"mixed_16-256", 16, 256}, {"short_20-40", 20, 40}} {
		b.Run(c.name, func(b *testing.B) { benchPacked(b, mixedLengthRollout(32, c.lo, c.hi, 1)) })
	}
}

// BenchmarkPackedGRPOStep is BenchmarkPackedSFTStep for the actor's GRPO step (groups of 4 rows,
// rewards 0/1, sampler log-probs): the per-token policy loss with the mini-batch's token count.
func BenchmarkPackedGRPOStep(b *testing.B) {
	for _, c := range []struct {
		name   string
		lo, hi int
	}{{"mixed_32-256", 32, 256}, {"short_20-40", 20, 40}} {
		b.Run(c.name, func(b *testing.B) {
			data := mixedLengthRollout(32, c.lo, c.hi, 1)
			rng := rand.New(rand.NewPCG(2, 5))
			for i, t := range data.Tokens {
				data.GroupID[i] = string(rune('a' + i/4))
				data.Reward = append(data.Reward, float64(i%2))
				lp := make([]float32, len(t))
				for j := range lp {
					lp[j] = float32(-5 - rng.Float64())
				}
				data.Tok[rollout.KeySamplerLogProbs] = append(data.Tok[rollout.KeySamplerLogProbs], lp)
			}
			benchPackedSpec(b, "actor", data)
		})
	}
}

func benchPacked(b *testing.B, data *rollout.Rollout) { benchPackedSpec(b, "sft", data) }

func benchPackedSpec(b *testing.B, name string, data *rollout.Rollout) {
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: name, Trainable: true}, Knobs: defaultKnobs()}
	mcfg, _ := runtime.BuiltinConfig("bench")
	tokens := 0
	for _, t := range data.Tokens {
		tokens += len(t)
	}
	arms := []struct {
		name         string
		pack, within bool
		tr           *runtime.Trainer
		mbs          []map[string]*tensors.Tensor
		took         time.Duration
		pad          float64
	}{{name: "unpacked"}, {name: "within", pack: true, within: true}, {name: "budget", pack: true}}
	for i := range arms {
		a := &arms[i]
		s, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		switch s := s.(type) {
		case *sft:
			s.fixedRows = a.within
		case *actor:
			s.fixedRows = a.within
		}
		m, err := runtime.NewModel(mcfg, 7)
		if err != nil {
			b.Fatal(err)
		}
		if a.mbs, err = s.PrepareBatch(data, BatchOptions{MicroBatchSize: 8, Pad: int32(mcfg.PAD), Pack: a.pack, Temperature: 1}); err != nil {
			b.Fatal(err)
		}
		slots := 0
		for _, mb := range a.mbs {
			t := mb[runtime.PackIndexKey]
			if t == nil {
				t = mb[rollout.KeyTokens]
			}
			slots += t.Shape().Size()
		}
		a.pad = 1 - float64(tokens)/float64(slots)
		if a.tr, err = runtime.NewTrainer(testBackend(b), m, s.(LM).Loss(), runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(),
			Schedule: runtime.Schedule{Kind: "constant", BaseLR: 1e-4}}); err != nil {
			b.Fatal(err)
		}
		if _, err := a.tr.Step(a.mbs); err != nil { // compiles
			b.Fatal(err)
		}
	}
	for b.Loop() {
		for i := range arms {
			t0 := time.Now()
			if _, err := arms[i].tr.Step(arms[i].mbs); err != nil {
				b.Fatal(err)
			}
			arms[i].took += time.Since(t0)
		}
	}
	for _, a := range arms {
		b.ReportMetric(float64(tokens*b.N)/a.took.Seconds(), a.name+"_tok/s")
		b.ReportMetric(a.pad, a.name+"_pad_frac")
		b.ReportMetric(float64(len(a.mbs)), a.name+"_micro-batches")
	}
	b.ReportMetric(arms[0].took.Seconds()/arms[2].took.Seconds(), "budget_speedup")
	b.ReportMetric(arms[1].took.Seconds()/arms[2].took.Seconds(), "budget_vs_within")
}
