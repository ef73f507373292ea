package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestChunkedLogProbsMatchPlain compares ChunkedLogProbs (chunks of 3 rows of 16, the last one
// short) with the plain log-softmax and gather: values, and the gradients of a weighted sum of
// them with respect to every parameter, for tied and untied heads.
func TestChunkedLogProbsMatchPlain(t *testing.T) {
	b := testBackend(t)
	for _, tied := range []bool{true, false} {
		cfg := smallGQA()
		cfg.TieEmbeddings = tied
		cfg.Layers = 1
		m, err := NewModel(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		const rows, length = 2, 8
		rng := rand.New(rand.NewPCG(5, 6))
		tokens := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		targets := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		weights := make([]float32, rows*length)
		for i := range weights {
			weights[i] = float32(rng.NormFloat64())
		}
		vars := m.Variables()
		run := func(chunk int) (lp []float32, grads [][]float32) {
			exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
				h := m.Forward(ctx, in[0])
				lp := ChunkedLogProbs(h, m.headWeight(ctx, h.Graph()), in[1], chunk)
				loss := ReduceAllSum(Mul(lp, in[2]))
				params := make([]*Node, len(vars))
				for i, v := range vars {
					params[i] = v.ValueGraph(loss.Graph())
				}
				return append([]*Node{lp}, Gradient(loss, params...)...)
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
				tensors.FromFlatDataAndDimensions(targets, rows, length), tensors.FromFlatDataAndDimensions(weights, rows, length))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out[1:] {
				grads = append(grads, tensors.MustCopyFlatData[float32](o))
			}
			return tensors.MustCopyFlatData[float32](out[0]), grads
		}
		lpPlain, gPlain := run(0)
		lpChunk, gChunk := run(3)
		for i := range lpPlain {
			if d := math.Abs(float64(lpPlain[i] - lpChunk[i])); d > 1e-6 {
				t.Fatalf("tied %v: log-prob %d: chunked %v, plain %v", tied, i, lpChunk[i], lpPlain[i])
			}
		}
		worst := 0.0
		for k, p := range m.Params() {
			for i := range gPlain[k] {
				d := math.Abs(float64(gPlain[k][i] - gChunk[k][i]))
				worst = max(worst, d)
				if d > 1e-5+1e-4*math.Abs(float64(gPlain[k][i])) {
					t.Fatalf("tied %v: %s[%d]: chunked gradient %v, plain %v", tied, p.Name, i, gChunk[k][i], gPlain[k][i])
				}
			}
		}
		t.Logf("tied %v: max |chunked − plain gradient| = %.3g", tied, worst)
	}
}
