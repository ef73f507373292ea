package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestGradientsMatchFiniteDifferences checks the graph's gradients of a loss mixing per-token
// log-probs, entropies and value-head outputs against central finite differences of the float64
// reference model, for entries of every parameter tensor.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := smallGQA()
	cfg.HasValueHead = true
	cfg.Layers = 1
	m, err := NewModel(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, p := range m.Params() {
		if len(p.Shape) == 1 { // give biases and norms non-trivial values
			v := make([]float32, p.Shape[0])
			for i := range v {
				v[i] = float32(1 + 0.3*rng.NormFloat64())
				if p.Name[len(p.Name)-4:] == "bias" {
					v[i] -= 1
				}
			}
			if err := m.SetParam(p.Name, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	const rows, length = 2, 8
	seqs := randomSeqs(rng, cfg.VocabSize, length, 6)
	tokens, mask, _ := PadTokens(seqs, rows, length, 0)
	targets, tmask := ShiftTargets(tokens, mask, rows, length, 0)
	w1 := make([]float32, rows*length) // per-token weights of the log-probs (0 where masked)
	w2 := make([]float32, rows*length) // per-token weights of the values
	w3 := make([]float32, rows*length) // per-token weights of the entropies
	for i := range w1 {
		w1[i] = tmask[i] * float32(rng.NormFloat64())
		w2[i] = mask[i] * float32(rng.NormFloat64())
		w3[i] = tmask[i] * float32(rng.NormFloat64())
	}
	vars := m.Variables()
	b := testBackend(t)
	exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		hidden := m.Forward(ctx, in[0])
		logits := m.Logits(ctx, hidden)
		lp := LogProbs(logits, in[1])
		loss := Add(ReduceAllSum(Mul(lp, in[2])), ReduceAllSum(Mul(m.ValueHead(ctx, hidden), in[3])))
		loss = Add(loss, ReduceAllSum(Mul(Entropy(logits), in[4])))
		params := make([]*Node, len(vars))
		for i, v := range vars {
			params[i] = v.ValueGraph(loss.Graph())
		}
		return Gradient(loss, params...)
	})
	if err != nil {
		t.Fatal(err)
	}
	grads, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length), tensors.FromFlatDataAndDimensions(targets, rows, length),
		tensors.FromFlatDataAndDimensions(w1, rows, length), tensors.FromFlatDataAndDimensions(w2, rows, length),
		tensors.FromFlatDataAndDimensions(w3, rows, length))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := newRefModel(m)
	if err != nil {
		t.Fatal(err)
	}
	refLoss := func() float64 {
		total := 0.0
		for r, s := range seqs {
			lp, ent := ref.logProbs(s)
			for j, v := range lp {
				total += float64(w1[r*length+j])*v + float64(w3[r*length+j])*ent[j]
			}
			for j, v := range ref.values(s) {
				total += float64(w2[r*length+j]) * v
			}
		}
		return total
	}
	const h = 1e-5
	checked := 0
	for i, p := range m.Params() {
		g := tensors.MustCopyFlatData[float32](grads[i])
		w := ref.w[p.Name]
		for range 3 {
			k := rng.IntN(len(w))
			if p.Name == "model.embed_tokens.weight" { // pick a row of a token that occurs
				k = int(seqs[0][rng.IntN(len(seqs[0]))])*cfg.Hidden + rng.IntN(cfg.Hidden)
			}
			orig := w[k]
			w[k] = orig + h
			up := refLoss()
			w[k] = orig - h
			down := refLoss()
			w[k] = orig
			fd := (up - down) / (2 * h)
			if math.Abs(float64(g[k])-fd) > 2e-4+2e-3*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %v, finite difference %v", p.Name, k, g[k], fd)
			}
			checked++
		}
	}
	t.Logf("checked %d gradient entries across %d tensors", checked, len(m.Params()))
}
