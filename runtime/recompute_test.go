package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestActivationCheckpointingMatches: with every layer checkpointed, a weighted sum of
// log-probs (chunked head and not) has the same value and the same gradient with respect to
// every weight as without, for a Qwen2-shaped model (biases, tied head) and a Qwen3-shaped one
// (q/k norms, untied head); and a trainer's steps give the same losses.
func TestActivationCheckpointingMatches(t *testing.T) {
	b := testBackend(t)
	qwen3 := smallGQA()
	qwen3.Architecture, qwen3.AttentionBias, qwen3.QKNorm, qwen3.TieEmbeddings = ArchQwen3, false, true, false
	qwen3.HeadDimension = 16
	for _, cfg := range []Config{smallGQA(), qwen3} {
		const rows, length = 2, 8
		rng := rand.New(rand.NewPCG(9, 10))
		tokens := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		targets := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		weights := make([]float32, rows*length)
		for i := range weights {
			weights[i] = float32(rng.NormFloat64())
		}
		in := []any{tensors.FromFlatDataAndDimensions(tokens, rows, length),
			tensors.FromFlatDataAndDimensions(targets, rows, length), tensors.FromFlatDataAndDimensions(weights, rows, length)}
		run := func(checkpoint bool, chunk int) [][]float32 {
			m, err := NewModel(cfg, 4)
			if err != nil {
				t.Fatal(err)
			}
			m.ActivationCheckpointing, m.HeadChunkRows = checkpoint, chunk
			vars := m.Variables()
			exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
				loss := ReduceAllSum(Mul(m.TokenLogProbs(ctx, in[0], in[1]), in[2]))
				params := make([]*Node, len(vars))
				for i, v := range vars {
					params[i] = v.ValueGraph(loss.Graph())
				}
				return append([]*Node{loss}, Gradient(loss, params...)...)
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Exec(in...)
			if err != nil {
				t.Fatal(err)
			}
			var flat [][]float32
			for _, o := range out {
				flat = append(flat, tensors.MustCopyFlatData[float32](o))
			}
			return flat
		}
		for _, chunk := range []int{0, 5} {
			plain, ckpt := run(false, chunk), run(true, chunk)
			worst := 0.0
			for k := range plain {
				for i := range plain[k] {
					d := math.Abs(float64(plain[k][i] - ckpt[k][i]))
					worst = max(worst, d)
					if d > 1e-5+1e-4*math.Abs(float64(plain[k][i])) {
						name := "loss"
						if k > 0 {
							name = cfg.Architecture + " " + paramList(cfg)[k-1].Name
						}
						t.Fatalf("%s[%d] (chunk %d): checkpointed %v, plain %v", name, i, chunk, ckpt[k][i], plain[k][i])
					}
				}
			}
			t.Logf("%s, chunk %d: loss %.6f, max |checkpointed − plain| = %.3g", cfg.Architecture, chunk, plain[0][0], worst)
		}

		steps := func(checkpoint bool) []float64 {
			m, err := NewModel(cfg, 4)
			if err != nil {
				t.Fatal(err)
			}
			m.ActivationCheckpointing = checkpoint
			tr, err := NewTrainer(b, m, func(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
				return Neg(MaskedMean(m.TokenLogProbs(ctx, batch["tokens"], batch["targets"]), batch["mask"])), nil
			}, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{Kind: "constant", BaseLR: 1e-2}})
			if err != nil {
				t.Fatal(err)
			}
			var losses []float64
			for range 3 {
				res, err := tr.Step([]map[string]*tensors.Tensor{{"tokens": in[0].(*tensors.Tensor),
					"targets": in[1].(*tensors.Tensor), "mask": in[2].(*tensors.Tensor)}})
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, res.Loss)
			}
			return losses
		}
		plain, ckpt := steps(false), steps(true)
		for i := range plain {
			if math.Abs(plain[i]-ckpt[i]) > 1e-5*(1+math.Abs(plain[i])) {
				t.Fatalf("%s: step %d loss checkpointed %v, plain %v", cfg.Architecture, i, ckpt, plain)
			}
		}
	}
}
