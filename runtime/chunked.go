package runtime

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// logitChunkElements bounds the logits of one chunk (rows × vocab) that ChunkedLogProbs
// materialises at a time: 16 M float32, 64 MiB. A real vocabulary (Qwen's 151,936) makes the
// [batch·seq, vocab] logits of a 8 × 256 batch 1.2 GiB, and their gradient as much again.
const logitChunkElements = 16 << 20

// LogitChunkRows returns the rows per chunk ChunkedLogProbs uses for a vocabulary.
func LogitChunkRows(vocab int) int { return max(1, logitChunkElements/vocab) }

// ChunkedLogProbs is LogProbs(Linear(hidden, w), targets) — the log-probability of targets
// [...] under the LM head w [vocab, d] applied to hidden [..., d] — computed over chunks of
// chunkRows rows so that the logits exist one chunk at a time, in the forward pass and in the
// gradient: a custom gradient recomputes each chunk's softmax instead of keeping the [rows,
// vocab] logits (or their adjoint) of the whole batch. With chunkRows ≤ 0 or at least the
// number of rows it is the plain computation.
//
// The gradient is routed without slicing the adjoint (Slice's gradient needs Pad, which
// SimpleGo lacks): the result is the chunked forward value plus two terms that are exactly 0
// but whose gradients carry the incoming adjoint v into custom-gradient identities of hidden
// and w, which return the true gradients
//
//	∂/∂h_i = v_i·(w[t_i] − Σ_j p_ij·w_j),   ∂/∂w = Σ_i v_i·(onehot(t_i) − p_i) ⊗ h_i,
//
// p_i = softmax(h_i·wᵀ), both computed chunk by chunk.
func ChunkedLogProbs(hidden, w, targets *Node, chunkRows int) *Node {
	g := hidden.Graph()
	dims := hidden.Shape().Dimensions
	d := dims[len(dims)-1]
	n := hidden.Shape().Size() / d
	vocab := w.Shape().Dimensions[0]
	if chunkRows <= 0 || chunkRows >= n || n > vocab*d {
		return LogProbs(Linear(hidden, w), targets)
	}
	if targets.DType() != dtypes.Int32 {
		targets = ConvertDType(targets, dtypes.Int32)
	}
	h := Reshape(hidden, n, d)
	t := Reshape(targets, n)
	hs, ws := StopGradient(h), StopGradient(w)
	type span struct{ lo, hi int }
	var spans []span
	for lo := 0; lo < n; lo += chunkRows {
		spans = append(spans, span{lo, min(lo+chunkRows, n)})
	}
	rows := func(x *Node, s span) *Node { return Slice(x, AxisRange(s.lo, s.hi)) }

	parts := make([]*Node, len(spans))
	for i, s := range spans {
		parts[i] = LogProbs(Linear(rows(hs, s), ws), rows(t, s))
	}
	value := Concatenate(parts, 0) // [n]

	// The gradients, built once by whichever custom gradient runs first (both receive v).
	var dh, dw *Node
	grads := func(v *Node) {
		if dh != nil {
			return
		}
		vh := Mul(hs, InsertAxes(v, -1)) // v_i·h_i
		dw = ScatterSum(ZerosLike(ws), Reshape(t, n, 1), vh, false, false)
		wt := Gather(ws, Reshape(t, n, 1)) // w[t_i], [n, d]
		dhs := make([]*Node, len(spans))
		for i, s := range spans {
			p := Softmax(Linear(rows(hs, s), ws), -1)                          // [rows, vocab]
			pv := Mul(p, InsertAxes(rows(v, s), -1))                           // v_i·p_i
			expect := DotGeneralWithAxes(pv, []int{1}, nil, ws, []int{0}, nil) // Σ_j v_i·p_ij·w_j
			dhs[i] = Sub(Mul(rows(wt, s), InsertAxes(rows(v, s), -1)), expect)
			dw = Sub(dw, DotGeneralWithAxes(pv, []int{0}, nil, rows(hs, s), []int{0}, nil)) // Σ_i v_i·p_i ⊗ h_i
		}
		dh = Concatenate(dhs, 0)
	}
	e0 := make([]float32, d)
	e0[0] = 1
	col0 := Reshape(Const(g, e0), 1, d)
	first := Iota(g, shapes.Make(dtypes.Int32, n, 1), 0) // flat positions 0..n-1 of w
	hc := IdentityWithCustomGradient(h, func(_, adj *Node) *Node {
		grads(ReduceSum(Mul(adj, col0), -1))
		return dh
	})
	wc := IdentityWithCustomGradient(w, func(_, adj *Node) *Node {
		grads(Reshape(Gather(Reshape(adj, vocab*d, 1), first), n))
		return dw
	})
	zh := ReduceSum(Mul(hc, col0), -1)
	zw := Reshape(Gather(Reshape(wc, vocab*d, 1), first), n)
	carry := Add(Sub(zh, StopGradient(zh)), Sub(zw, StopGradient(zw))) // exactly 0
	return Reshape(Add(value, carry), dims[:len(dims)-1]...)
}

// ChunkedLogProbsAndEntropy returns LogProbs and Entropy of Linear(hidden, w) without
// gradients, over chunks of chunkRows rows (see ChunkedLogProbs): for scoring.
func ChunkedLogProbsAndEntropy(hidden, w, targets *Node, chunkRows int) (lp, ent *Node) {
	dims := hidden.Shape().Dimensions
	d := dims[len(dims)-1]
	n := hidden.Shape().Size() / d
	hidden, w = StopGradient(hidden), StopGradient(w)
	if chunkRows <= 0 || chunkRows >= n {
		logits := Linear(hidden, w)
		return LogProbs(logits, targets), Entropy(logits)
	}
	h := Reshape(hidden, n, d)
	t := Reshape(targets, n)
	var lps, ents []*Node
	for lo := 0; lo < n; lo += chunkRows {
		hi := min(lo+chunkRows, n)
		logits := Linear(Slice(h, AxisRange(lo, hi)), w)
		lps = append(lps, LogProbs(logits, Slice(t, AxisRange(lo, hi))))
		ents = append(ents, Entropy(logits))
	}
	out := dims[:len(dims)-1]
	return Reshape(Concatenate(lps, 0), out...), Reshape(Concatenate(ents, 0), out...)
}

// headWeight returns the LM head's weight [vocab, hidden]: lm_head, or the tied embeddings.
func (m *Model) headWeight(ctx *context.Context, g *Graph) *Node {
	if m.Config.TieEmbeddings {
		return m.weight(ctx, g, "model.embed_tokens.weight")
	}
	return m.weight(ctx, g, "lm_head.weight")
}
