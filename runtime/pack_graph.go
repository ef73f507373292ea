package runtime

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Packed holds a packed micro-batch's layout inside a graph (see Packing): the gathers between
// the unpacked [R,T] and packed [P,L] layouts, and the packed slots' positions and segments.
type Packed struct {
	Index, UnpackIndex, Positions, Segments *Node
}

// PackedFrom returns the packed layout a batch carries (the Pack*Key inputs), or nil for a batch
// that is not packed.
func PackedFrom(batch map[string]*Node) *Packed {
	if batch[PackIndexKey] == nil {
		return nil
	}
	p := &Packed{Index: batch[PackIndexKey], UnpackIndex: batch[UnpackIndexKey],
		Positions: batch[PackPositionsKey], Segments: batch[PackSegmentsKey]}
	if p.UnpackIndex == nil || p.Positions == nil || p.Segments == nil {
		panic(fmt.Errorf("packed batch: %q needs %q, %q and %q", PackIndexKey, UnpackIndexKey, PackPositionsKey, PackSegmentsKey))
	}
	return p
}

// gatherPositions gathers x [A,B,rest...] at the flat indices idx [C,D] of its first two axes:
// [C,D,rest...]. Gather's gradient is a scatter-add, exact here: every real position is gathered
// once, and padding positions receive zero gradients from the masked losses.
func gatherPositions(x, idx *Node) *Node {
	d := x.Shape().Dimensions
	flat := append([]int{d[0] * d[1]}, d[2:]...)
	if idx.DType() != dtypes.Int32 {
		idx = ConvertDType(idx, dtypes.Int32)
	}
	if len(d) == 2 {
		// A per-token scalar: gathered as [N,1] rows (the cpu backend's Gather wants an operand
		// of rank ≥ 2 here), then the unit axis dropped.
		return Squeeze(Gather(Reshape(x, d[0]*d[1], 1), InsertAxes(idx, -1)), -1)
	}
	return Gather(Reshape(x, flat...), InsertAxes(idx, -1))
}

// Pack lays x [R,T,...] (a per-token input in the unpacked layout) out as [P,L,...].
func (p *Packed) Pack(x *Node) *Node { return gatherPositions(x, p.Index) }

// Unpack lays y [P,L,...] (a per-token output of the packed rows) out as [R,T,...]. Padding
// positions of the unpacked layout (index −1) are 0, and pass no gradient: whatever a loss
// does with them, no real token's gradient changes (the unpacked layout computes padding
// positions from their own pad tokens, which no real position sees either).
func (p *Packed) Unpack(y *Node) *Node {
	idx := p.UnpackIndex
	if idx.DType() != dtypes.Int32 {
		idx = ConvertDType(idx, dtypes.Int32)
	}
	g := y.Graph()
	zero := Scalar(g, dtypes.Int32, 0)
	out := gatherPositions(y, Max(idx, zero))
	real := GreaterOrEqual(idx, zero)
	if out.Rank() > 2 {
		trailing := make([]int, out.Rank()-2)
		for i := range trailing {
			trailing[i] = -1 // new axes at the end
		}
		real = BroadcastToDims(InsertAxes(real, trailing...), out.Shape().Dimensions...)
	}
	return Where(real, out, ZerosLike(out))
}

// segmentBias is the additive attention bias [P,L,L] of packed rows: slot q sees slot k when
// both belong to the same sequence and k ≤ q (a block-diagonal causal mask; padding slots,
// segment 0, see one another and no sequence sees them), and, with a sliding window, when their
// positions differ by less than window.
func segmentBias(segments, positions *Node, window int) *Node {
	g := segments.Graph()
	L := segments.Shape().Dimensions[1]
	row := Iota(g, shapes.Make(dtypes.Int32, L, L), 0)
	col := Iota(g, shapes.Make(dtypes.Int32, L, L), 1)
	visible := InsertAxes(GreaterOrEqual(row, col), 0) // [1,L,L]
	segQ, segK := InsertAxes(segments, -1), InsertAxes(segments, 1)
	visible = LogicalAnd(visible, Equal(segQ, segK))
	if window > 0 && L > window {
		posQ, posK := InsertAxes(positions, -1), InsertAxes(positions, 1)
		visible = LogicalAnd(visible, LessThan(Sub(posQ, posK), Scalar(g, positions.DType(), window)))
	}
	return Where(visible, Scalar(g, dtypes.Float32, 0), Scalar(g, dtypes.Float32, maskValue))
}

// ForwardPacked runs the decoder on the packed rows of tokens [R,T] (the unpacked input ids):
// per-sequence attention and positions restarting at 0 in each sequence, with activation
// checkpointing as Forward. It returns the packed hidden states [P,L,hidden]; every real
// token's equals Forward's up to float32 rounding.
func (m *Model) ForwardPacked(ctx *context.Context, tokens *Node, p *Packed) *Node {
	pos := p.Positions
	if pos.DType() != dtypes.Int32 {
		pos = ConvertDType(pos, dtypes.Int32)
	}
	seg := p.Segments
	if seg.DType() != dtypes.Int32 {
		seg = ConvertDType(seg, dtypes.Int32)
	}
	packed := p.Pack(tokens)
	h, _ := m.decoder(ctx, packed, pos, segmentBias(seg, pos, m.Config.SlidingWindow), nil, m.ActivationCheckpointing)
	return h
}

// TokenLogProbsPacked is TokenLogProbs computed on the packed rows: tokens and targets [R,T]
// in the unpacked layout, log-probs [R,T] unpacked (padding positions unspecified: mask them).
func (m *Model) TokenLogProbsPacked(ctx *context.Context, tokens, targets *Node, p *Packed) *Node {
	h := m.ForwardPacked(ctx, tokens, p)
	lp := chunkedLogProbs(m.computeDType(), h, m.headWeight(ctx, h.Graph()), p.Pack(targets), m.headChunkRows())
	return p.Unpack(lp)
}
