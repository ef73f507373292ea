package runtime

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Sequence packing: the sequences of a micro-batch, laid out as rows of a right-padded [R,T]
// matrix, are placed end to end in P rows of L tokens (P·L ≤ R·T where lengths vary), so that
// the decoder computes on real tokens instead of padding. Each packed token carries its
// sequence's segment id (attention stays inside a sequence: a block-diagonal causal mask) and
// its position within the sequence (RoPE restarts at 0), so every real token's hidden state is
// the one the unpacked layout computes. Per-token outputs are gathered back into the [R,T]
// layout (Unpack), so losses, estimators and metrics see the same per-sequence values.

// Batch keys of a packed micro-batch (int32 graph inputs, beside the unpacked [R,T] keys).
const (
	// PackIndexKey [P,L]: the flat index r·T+t into the unpacked [R,T] layout of each packed
	// slot (padding slots point at any position; their segment is 0).
	PackIndexKey = "pack_index"
	// UnpackIndexKey [R,T]: the flat index p·L+l into the packed layout of each unpacked
	// position; −1 for padding positions, which Unpack sets to 0.
	UnpackIndexKey = "pack_unpack"
	// PackPositionsKey [P,L]: each slot's position within its sequence (0 for padding).
	PackPositionsKey = "pack_positions"
	// PackSegmentsKey [P,L]: each slot's sequence, 1-based within its row; 0 for padding.
	PackSegmentsKey = "pack_segments"
)

// Packing is the layout of R sequences, rows of an [R,T] matrix, packed into [P,L].
type Packing struct {
	SeqRows, SeqLength int // R, T: the unpacked layout
	Rows, Length       int // P, L: the packed layout
	// Index, Unpack, Positions, Segments: see PackIndexKey, UnpackIndexKey, PackPositionsKey
	// and PackSegmentsKey.
	Index, Unpack, Positions, Segments []int32
	// RealTokens is Σ lengths: the slots that hold a token of a sequence.
	RealTokens int
}

// PadFraction is the share of the packed slots that hold padding.
func (p *Packing) PadFraction() float64 {
	return 1 - float64(p.RealTokens)/float64(p.Rows*p.Length)
}

// packRowBucket rounds a packed row count up to a power of two or three halves of one (1, 2,
// 3, 4, 6, 8, 12, …), so that a run compiles few graphs while wasting at most a third of the
// packed rows.
func packRowBucket(n int) int {
	b := 1
	for {
		if n <= b {
			return b
		}
		if b >= 2 && n <= b+b/2 {
			return b + b/2
		}
		b *= 2
	}
}

// firstFitDecreasing assigns sequences of the given lengths to rows of budget tokens, first-fit
// by decreasing length (ties in row order, so the layout is deterministic): each sequence's row
// (−1 for an empty sequence) and the number of rows used.
func firstFitDecreasing(lengths []int, budget int) (row []int, used int) {
	order := make([]int, len(lengths))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(lengths[b], lengths[a]) })
	var free []int // tokens left in each packed row
	row = make([]int, len(lengths))
	for _, s := range order {
		n := lengths[s]
		if n == 0 {
			row[s] = -1
			continue
		}
		placed := false
		for p := range free {
			if free[p] >= n {
				row[s], free[p], placed = p, free[p]-n, true
				break
			}
		}
		if !placed {
			row[s] = len(free)
			free = append(free, budget-n)
		}
	}
	return row, len(free)
}

// checkLengths reports a sequence outside [0, T] or longer than a packed row of budget tokens.
func checkLengths(lengths []int, T, budget int) error {
	if budget <= 0 {
		return fmt.Errorf("pack: token budget %d, want > 0", budget)
	}
	for i, n := range lengths {
		switch {
		case n < 0 || n > T:
			return fmt.Errorf("pack: sequence %d has %d tokens, outside [0, %d]", i, n, T)
		case n > budget:
			return fmt.Errorf("pack: sequence %d has %d tokens, more than the %d tokens of a packed row (raise pack_tokens, or set pack: false)", i, n, budget)
		}
	}
	return nil
}

// Pack places sequences of the given lengths (each ≤ T, the unpacked row length) into rows of
// budget tokens, first-fit by decreasing length (ties in row order, so the layout is
// deterministic). A sequence longer than the budget is an error: it cannot share a row, and
// cutting it would change its attention. The row count is rounded up to a bucket
// (packRowBucket) but never past R: with budget ≤ T a packed micro-batch never has more slots
// than the unpacked one.
func Pack(lengths []int, T, budget int) (*Packing, error) {
	return PackRows(lengths, T, budget, len(lengths))
}

// packedRows is the row count of a packed layout whose sequences (R of them) take used rows:
// rounded up to a bucket, but never past maxRows nor R (every sequence takes one row at most, so
// R rows always suffice).
func packedRows(used, R, maxRows int) int {
	return max(min(packRowBucket(used), R, max(maxRows, 1)), used, 1)
}

// PackRows is Pack into at most maxRows packed rows (an error when the sequences need more):
// the rows of a token-budget micro-batch (PackGroups). The row count is rounded up to a bucket
// but never past maxRows nor the number of sequences.
func PackRows(lengths []int, T, budget, maxRows int) (*Packing, error) {
	if err := checkLengths(lengths, T, budget); err != nil {
		return nil, err
	}
	R := len(lengths)
	row, used := firstFitDecreasing(lengths, budget)
	if used > max(maxRows, 1) {
		return nil, fmt.Errorf("pack: %d sequences need %d rows of %d tokens, more than %d", R, used, budget, maxRows)
	}
	P := packedRows(used, R, maxRows)
	pk := &Packing{SeqRows: R, SeqLength: T, Rows: P, Length: budget,
		Index: make([]int32, P*budget), Unpack: make([]int32, R*T),
		Positions: make([]int32, P*budget), Segments: make([]int32, P*budget)}
	for i := range pk.Unpack {
		pk.Unpack[i] = -1
	}
	fill := make([]int, P)
	segs := make([]int32, P)
	for s := range R { // sequences keep their row order inside a packed row
		n, p := lengths[s], row[s]
		if p < 0 {
			continue
		}
		segs[p]++
		base := p*budget + fill[p]
		for t := range n {
			pk.Index[base+t] = int32(s*T + t)
			pk.Unpack[s*T+t] = int32(base + t)
			pk.Positions[base+t] = int32(t)
			pk.Segments[base+t] = segs[p]
		}
		fill[p] += n
		pk.RealTokens += n
	}
	return pk, nil
}

// autoPackMaxLength bounds the rows PackAuto tries beyond T: attention's cost per token grows
// with the row length, so long rows trade padding for attention work.
const autoPackMaxLength = 2048

// PackAuto packs sequences of the given lengths (each ≤ T) into the row length, among T, 2T
// and 4T (those past autoPackMaxLength excluded, T always tried), that computes the fewest slots
// (ties: the shorter rows). Rows of T pack nothing when no two sequences fit in T together; the
// longer rows then hold several. It never computes more slots than the unpacked R·T.
func PackAuto(lengths []int, T int) (*Packing, error) {
	var best *Packing
	for L := T; L <= 4*T && (L == T || L <= autoPackMaxLength); L *= 2 {
		p, err := Pack(lengths, T, L)
		if err != nil {
			return nil, err
		}
		if best == nil || p.Rows*p.Length < best.Rows*best.Length {
			best = p
		}
	}
	return best, nil
}

// Tensors are the packed layout's batch inputs, keyed by the Pack*Key names.
func (p *Packing) Tensors() map[string]*tensors.Tensor {
	return map[string]*tensors.Tensor{
		PackIndexKey:     tensors.FromFlatDataAndDimensions(p.Index, p.Rows, p.Length),
		UnpackIndexKey:   tensors.FromFlatDataAndDimensions(p.Unpack, p.SeqRows, p.SeqLength),
		PackPositionsKey: tensors.FromFlatDataAndDimensions(p.Positions, p.Rows, p.Length),
		PackSegmentsKey:  tensors.FromFlatDataAndDimensions(p.Segments, p.Rows, p.Length),
	}
}
