package runtime

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// RowsFn maps one chunk of logits [rows, vocab], and the same rows of the per-row inputs
// given to HeadRows, to a vector per row, [rows, width].
type RowsFn func(logits *Node, inputs []*Node) *Node

// HeadRows is f of the LM head's logits of hidden [..., hidden] — a per-row vector such as a
// teacher's top-k summary — forward only, over chunks of HeadChunkRows rows, so that the
// [rows, vocab] logits exist one chunk at a time and only f's narrow output leaves the graph.
// inputs are per-row tensors whose leading axes are hidden's (targets). The result is
// [..., width].
func (m *Model) HeadRows(ctx *context.Context, hidden *Node, inputs []*Node, f RowsFn) *Node {
	return chunkedRows(m.computeDType(), hidden, m.headWeight(ctx, hidden.Graph()), inputs, m.headChunkRows(), f)
}

// chunkedRows is HeadRows over the head w [vocab, d] with the products in dtype dt.
func chunkedRows(dt dtypes.DType, hidden, w *Node, inputs []*Node, chunkRows int, f RowsFn) *Node {
	dims := hidden.Shape().Dimensions
	d := dims[len(dims)-1]
	n := hidden.Shape().Size() / d
	h := Reshape(StopGradient(hidden), n, d)
	w = StopGradient(w)
	in := make([]*Node, len(inputs))
	for i, x := range inputs {
		xd := x.Shape().Dimensions
		in[i] = StopGradient(Reshape(x, append([]int{n}, xd[len(dims)-1:]...)...))
	}
	if chunkRows <= 0 {
		chunkRows = n
	}
	var parts []*Node
	for lo := 0; lo < n; lo += chunkRows {
		hi := min(lo+chunkRows, n)
		rows := make([]*Node, len(in))
		for i, x := range in {
			rows[i] = Slice(x, AxisRange(lo, hi))
		}
		parts = append(parts, f(LinearIn(dt, Slice(h, AxisRange(lo, hi)), w), rows))
	}
	out := parts[0]
	if len(parts) > 1 {
		out = Concatenate(parts, 0)
	}
	width := out.Shape().Dimensions[1]
	return Reshape(out, append(append([]int{}, dims[:len(dims)-1]...), width)...)
}
