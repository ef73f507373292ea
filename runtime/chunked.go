package runtime

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// logitChunkElements bounds the logits of one chunk (rows × vocab) that ChunkedHead
// materialises at a time: 16 M float32, 64 MiB. A real vocabulary (Qwen's 151,936) makes the
// [batch·seq, vocab] logits of a 8 × 256 batch 1.2 GiB, and their gradient as much again.
const logitChunkElements = 16 << 20

// minChunkRows is the fewest rows a chunk gets whatever the vocabulary: each chunk streams the
// whole head weight through one product, and thinner products run below the GEMM's speed (at
// Qwen2.5-0.5B's shape on 2 cores, forward log-probs in chunks of 110 rows ran 20–25 % slower
// than in chunks of 256 or 440). At 256 rows a 151,936-token vocabulary's chunk is 152 MiB.
const minChunkRows = 256

// LogitChunkRows returns the rows per chunk ChunkedHead uses for a vocabulary.
func LogitChunkRows(vocab int) int { return max(minChunkRows, logitChunkElements/vocab) }

// HeadFn computes per-row outputs from one chunk of logits [rows, vocab] and the same rows of
// the per-row inputs given to ChunkedHead (each [rows, ...]): every output is [rows], float.
type HeadFn func(logits *Node, inputs []*Node) []*Node

// ChunkedHead is f(Linear(hidden, w), inputs) — per-row functions of the logits of the LM head
// w [vocab, d] applied to hidden [..., d] (log-probs, entropies, divergences to a teacher) —
// computed over chunks of chunkRows rows, so that the logits exist one chunk at a time in the
// forward pass and in the gradient: a custom gradient recomputes each chunk's logits and
// differentiates f on that chunk alone, instead of keeping the [rows, vocab] logits (and the
// intermediates of f, and their adjoints) of the whole batch. inputs are per-row tensors
// whose leading axes are hidden's (targets [...], teacher logits [..., vocab]); they get no
// gradient. The outputs are shaped like hidden without its last axis. With chunkRows ≤ 0 or at
// least the number of rows it is the plain computation.
//
// The gradient is routed without slicing the adjoints (Slice's gradient needs Pad, which
// SimpleGo lacks): each output is the chunked forward value plus a term that is exactly 0 but
// whose gradient carries that output's adjoint v_k into custom-gradient identities of hidden
// and w (column k of hidden, flat positions k·n … k·n+n−1 of w), which return the true
// gradients: with G = ∂(Σ_k v_k·f_k)/∂logits computed chunk by chunk,
//
//	∂/∂h = G·w,   ∂/∂w = Gᵀ·h.
func ChunkedHead(hidden, w *Node, inputs []*Node, chunkRows int, f HeadFn) []*Node {
	return chunkedHead(dtypes.InvalidDType, hidden, w, inputs, chunkRows, f)
}

// chunkedHead is ChunkedHead with the head's products (forward, recomputed, and the two of
// the gradient) in the compute dtype dt (DotGeneralIn); each chunk's weight gradient is
// accumulated in float32.
func chunkedHead(dt dtypes.DType, hidden, w *Node, inputs []*Node, chunkRows int, f HeadFn) []*Node {
	g := hidden.Graph()
	dims := hidden.Shape().Dimensions
	lead := dims[:len(dims)-1]
	d := dims[len(dims)-1]
	n := hidden.Shape().Size() / d
	vocab := w.Shape().Dimensions[0]
	h := Reshape(hidden, n, d)
	in := make([]*Node, len(inputs))
	for i, x := range inputs {
		xd := x.Shape().Dimensions
		if len(xd) < len(lead) || fmt.Sprint(xd[:len(lead)]) != fmt.Sprint(lead) {
			panic(fmt.Errorf("ChunkedHead: input %d of shape %v does not start with the rows %v", i, xd, lead))
		}
		in[i] = StopGradient(Reshape(x, append([]int{n}, xd[len(lead):]...)...))
	}
	shape := func(outs []*Node) []*Node {
		for i, o := range outs {
			outs[i] = Reshape(o, lead...)
		}
		return outs
	}
	if chunkRows <= 0 || chunkRows >= n {
		return shape(f(LinearIn(dt, h, w), in))
	}
	hs, ws := StopGradient(h), StopGradient(w)
	type span struct{ lo, hi int }
	var spans []span
	for lo := 0; lo < n; lo += chunkRows {
		spans = append(spans, span{lo, min(lo+chunkRows, n)})
	}
	rows := func(x *Node, s span) *Node { return Slice(x, AxisRange(s.lo, s.hi)) }
	chunkInputs := func(s span) []*Node {
		out := make([]*Node, len(in))
		for i, x := range in {
			out[i] = rows(x, s)
		}
		return out
	}

	var parts [][]*Node // [output][chunk]
	for _, s := range spans {
		outs := f(LinearIn(dt, rows(hs, s), ws), chunkInputs(s))
		if parts == nil {
			parts = make([][]*Node, len(outs))
		}
		for k, o := range outs {
			parts[k] = append(parts[k], o)
		}
	}
	K := len(parts)
	if K > d || K*n > vocab*d {
		// No room to route the adjoints (never for a real model): the plain computation.
		return shape(f(LinearIn(dt, h, w), in))
	}

	// The gradients, built once by whichever custom gradient runs first (both receive v).
	var dh, dw *Node
	grads := func(v []*Node) {
		if dh != nil {
			return
		}
		dhs := make([]*Node, len(spans))
		for i, s := range spans {
			z := LinearIn(dt, rows(hs, s), ws) // [rows, vocab], recomputed
			outs := f(z, chunkInputs(s))
			var dot *Node
			for k, o := range outs {
				t := ReduceAllSum(Mul(o, ConvertDType(rows(v[k], s), o.DType())))
				if dot == nil {
					dot = t
				} else {
					dot = Add(dot, t)
				}
			}
			gz := Gradient(dot, z)[0]                                       // [rows, vocab]
			dhs[i] = DotGeneralIn(dt, gz, []int{1}, nil, ws, []int{0}, nil) // G·w
			// Gᵀ·h, summed over the chunks from the first one's (not from zeros: a [vocab, d]
			// array less to fill and add).
			if dwi := DotGeneralIn(dt, gz, []int{0}, nil, rows(hs, s), []int{0}, nil); dw == nil {
				dw = dwi
			} else {
				dw = Add(dw, dwi)
			}
		}
		dh = Concatenate(dhs, 0)
	}
	// Column k of h and flat positions k·n … k·n+n−1 of w carry output k's adjoint; they are
	// picked by a product with a unit vector and by a gather, whose gradients need no Pad.
	colOf := func(x *Node, k int) *Node { // x [n, d] → x[:, k]
		e := make([]float32, d)
		e[k] = 1
		return ReduceSum(Mul(x, Reshape(Const(g, e), 1, d)), -1)
	}
	flatOf := func(x *Node, k int) *Node { // x [vocab, d] → flat x[k·n … k·n+n−1]
		pos := AddScalar(Iota(g, shapes.Make(dtypes.Int32, n, 1), 0), float64(k*n))
		return Reshape(Gather(Reshape(x, vocab*d, 1), pos), n)
	}
	adjoints := func(adj *Node, pick func(*Node, int) *Node) []*Node {
		v := make([]*Node, K)
		for k := range v {
			v[k] = pick(adj, k)
		}
		return v
	}
	//
	// The adjoint of w is a [vocab, d] array (the gather's gradient scatters the n values into
	// it: 544 MiB at Qwen's vocabulary), that of h only [n, d]. Autodiff visits nodes from the
	// last built to the first, so wc is built before hc: when both need a gradient, hc's runs
	// first and reads the adjoints from h, and wc's ignores its own, which is then never computed.
	// Only when h needs none (a frozen body under a trained head) are they read from w.
	wc := IdentityWithCustomGradient(w, func(_, adj *Node) *Node {
		grads(adjoints(adj, flatOf))
		return dw
	})
	hc := IdentityWithCustomGradient(h, func(_, adj *Node) *Node {
		grads(adjoints(adj, colOf))
		return dh
	})
	outs := make([]*Node, K)
	for k := range K {
		value := Concatenate(parts[k], 0) // [n]
		zh, zw := colOf(hc, k), flatOf(wc, k)
		carry := Add(Sub(zh, StopGradient(zh)), Sub(zw, StopGradient(zw))) // exactly 0
		outs[k] = Add(value, ConvertDType(carry, value.DType()))
	}
	return shape(outs)
}

// ChunkedLogProbs is LogProbs(Linear(hidden, w), targets) — the log-probability of targets
// [...] under the LM head w [vocab, d] applied to hidden [..., d] — over chunks of chunkRows
// rows, with the chunked gradient of ChunkedHead.
func ChunkedLogProbs(hidden, w, targets *Node, chunkRows int) *Node {
	return chunkedLogProbs(dtypes.InvalidDType, hidden, w, targets, chunkRows)
}

// chunkedLogProbs is ChunkedLogProbs with the head's products in the compute dtype dt.
func chunkedLogProbs(dt dtypes.DType, hidden, w, targets *Node, chunkRows int) *Node {
	return chunkedHead(dt, hidden, w, []*Node{targets}, chunkRows, func(z *Node, in []*Node) []*Node {
		return []*Node{LogProbs(z, in[0])}
	})[0]
}

// ChunkedLogProbsAndEntropy returns LogProbs and Entropy of Linear(hidden, w) without
// gradients, over chunks of chunkRows rows (see ChunkedLogProbs): for scoring.
func ChunkedLogProbsAndEntropy(hidden, w, targets *Node, chunkRows int) (lp, ent *Node) {
	return chunkedLogProbsAndEntropy(dtypes.InvalidDType, hidden, w, targets, chunkRows)
}

// chunkedLogProbsAndEntropy is ChunkedLogProbsAndEntropy with the head's products in the
// compute dtype dt.
func chunkedLogProbsAndEntropy(dt dtypes.DType, hidden, w, targets *Node, chunkRows int) (lp, ent *Node) {
	dims := hidden.Shape().Dimensions
	d := dims[len(dims)-1]
	n := hidden.Shape().Size() / d
	hidden, w = StopGradient(hidden), StopGradient(w)
	if chunkRows <= 0 || chunkRows >= n {
		logits := LinearIn(dt, hidden, w)
		return LogProbs(logits, targets), Entropy(logits)
	}
	h := Reshape(hidden, n, d)
	t := Reshape(targets, n)
	var lps, ents []*Node
	for lo := 0; lo < n; lo += chunkRows {
		hi := min(lo+chunkRows, n)
		logits := LinearIn(dt, Slice(h, AxisRange(lo, hi)), w)
		lps = append(lps, LogProbs(logits, Slice(t, AxisRange(lo, hi))))
		ents = append(ents, Entropy(logits))
	}
	out := dims[:len(dims)-1]
	return Reshape(Concatenate(lps, 0), out...), Reshape(Concatenate(ents, 0), out...)
}

// Head is ChunkedHead over the model's LM head, in chunks of HeadChunkRows (by default sized
// for its vocabulary): f's
// per-row outputs of the logits of hidden [..., hidden] (Forward's output, possibly scaled),
// with their gradient, never holding the logits of the whole batch.
func (m *Model) Head(ctx *context.Context, hidden *Node, inputs []*Node, f HeadFn) []*Node {
	return chunkedHead(m.computeDType(), hidden, m.headWeight(ctx, hidden.Graph()), inputs, m.headChunkRows(), f)
}

// headChunkRows is HeadChunkRows, or the chunk size for the model's vocabulary.
func (m *Model) headChunkRows() int {
	if m.HeadChunkRows > 0 {
		return m.HeadChunkRows
	}
	return LogitChunkRows(m.Config.VocabSize)
}

// headWeight returns the LM head's weight [vocab, hidden]: lm_head, or the tied embeddings,
// as float32 (a LoRA model's frozen base may hold it in bfloat16, lora_base.go; the chunked
// gradients sum float32 products into a tensor of its dtype).
func (m *Model) headWeight(ctx *context.Context, g *Graph) *Node {
	name := "lm_head.weight"
	if m.Config.TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	return ConvertDType(m.weight(ctx, g, name), dtypes.Float32)
}
