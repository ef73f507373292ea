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

// BenchmarkPackedSFTStep measures SFT optimizer steps of the bench model on 16 rows in
// micro-batches of 8, packed (runtime.PackAuto's rows) and unpacked, alternating in one process
// so that both see the same machine load; it reports each one's real tokens per second, the
// ratio and the padding shares. Rows of 16–256 tokens (SFT data of mixed lengths), and of
// 20–40 (short RL-like rows, bucketed to 64).
func BenchmarkPackedSFTStep(b *testing.B) {
	for _, c := range []struct {
		name   string
		lo, hi int
	}{{"mixed_16-256", 16, 256}, {"short_20-40", 20, 40}} {
		b.Run(c.name, func(b *testing.B) { benchPacked(b, mixedLengthRollout(16, c.lo, c.hi, 1)) })
	}
}

func benchPacked(b *testing.B, data *rollout.Rollout) {
	cfg := RoleConfig{Role: schema.Role{Name: "r", Specialization: "sft", Trainable: true}, Knobs: defaultKnobs()}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	mcfg, _ := runtime.BuiltinConfig("bench")
	tokens := 0
	for _, t := range data.Tokens {
		tokens += len(t)
	}
	var arms [2]struct {
		tr   *runtime.Trainer
		mbs  []map[string]*tensors.Tensor
		took time.Duration
		pad  float64
	}
	for i := range arms {
		m, err := runtime.NewModel(mcfg, 7)
		if err != nil {
			b.Fatal(err)
		}
		a := &arms[i]
		if a.mbs, err = s.PrepareBatch(data, BatchOptions{MicroBatchSize: 8, Pad: int32(mcfg.PAD), Pack: i == 1}); err != nil {
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
	unpacked := float64(tokens*b.N) / arms[0].took.Seconds()
	packed := float64(tokens*b.N) / arms[1].took.Seconds()
	b.ReportMetric(unpacked, "unpacked_tok/s")
	b.ReportMetric(packed, "packed_tok/s")
	b.ReportMetric(packed/unpacked, "speedup")
	b.ReportMetric(arms[0].pad, "unpacked_pad_frac")
	b.ReportMetric(arms[1].pad, "packed_pad_frac")
}
