package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestHeadRowsMatchesPlain: HeadRows in chunks of 3 positions of 16 (the last one short) gives
// the per-row vectors of the whole logits at once, per-row inputs sliced with their rows.
func TestHeadRowsMatchesPlain(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	cfg.Layers = 1
	m, err := NewModel(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	const rows, length = 2, 8
	rng := rand.New(rand.NewPCG(7, 8))
	tokens := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
	targets := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
	f := func(z *Node, in []*Node) *Node { // [rows, 3]: the target's log-prob, the largest logit and log-prob
		top := ReduceAndKeep(LogSoftmaxLast(z), ReduceMax, -1)
		return Concatenate([]*Node{ExpandAxes(LogProbs(z, in[0]), -1), ReduceAndKeep(z, ReduceMax, -1), top}, -1)
	}
	run := func(chunk int) []float32 {
		m.HeadChunkRows = chunk
		exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, tok, tgt *Node) *Node {
			return m.HeadRows(ctx, m.Forward(ctx, tok), []*Node{tgt}, f)
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
			tensors.FromFlatDataAndDimensions(targets, rows, length))
		if err != nil {
			t.Fatal(err)
		}
		if d := out[0].Shape().Dimensions; len(d) != 3 || d[0] != rows || d[1] != length || d[2] != 3 {
			t.Fatalf("HeadRows shape %v, want [%d %d 3]", d, rows, length)
		}
		return tensors.MustCopyFlatData[float32](out[0])
	}
	plain, chunked := run(rows*length), run(3)
	for i := range plain {
		if math.Abs(float64(chunked[i]-plain[i])) > 1e-5*(1+math.Abs(float64(plain[i]))) {
			t.Fatalf("element %d: chunked %g, plain %g", i, chunked[i], plain[i])
		}
	}
}
