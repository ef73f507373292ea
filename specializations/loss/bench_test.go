package loss

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// benchEval compiles build once (float32, the device dtype) and times its execution.
func benchEval(b *testing.B, inputs []arr, build func(in []*Node) (graphOutputs, error)) {
	ev, err := newEvaluator(backend(b), true, build)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.exec.Finalize()
	if _, err := ev.run(inputs); err != nil { // compile outside the timed loop
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := ev.run(inputs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPPOLossAndGrad: PPO (dual clip) + its gradient on an 8×256 token batch.
func BenchmarkPPOLossAndGrad(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	logp, old := randomArr(rng, -3, 0, 8, 256), randomArr(rng, -3, 0, 8, 256)
	adv, mask := randomArr(rng, -1, 1, 8, 256), randomMask(rng, 0.8, 8, 256)
	benchEval(b, []arr{logp, old, adv, mask}, func(in []*Node) (graphOutputs, error) {
		res, err := PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]},
			PPOConfig{EpsLow: 0.2, EpsHigh: 0.28, DualClipC: 3}, Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
	})
}

// BenchmarkGKDLossAndGrad: generalized JSD (β = 0.5) + its gradient over full
// logits, 2×64 positions × 2048 vocabulary.
func BenchmarkGKDLossAndGrad(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	student, teacher := randomArr(rng, -5, 5, 2, 64, 2048), randomArr(rng, -5, 5, 2, 64, 2048)
	mask := randomMask(rng, 0.8, 2, 64)
	benchEval(b, []arr{student, teacher, mask}, func(in []*Node) (graphOutputs, error) {
		res, err := GeneralizedJSD(in[0], in[1], in[2], DefaultGKDConfig(), Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
	})
}
