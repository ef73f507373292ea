package loss

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GKD with the teacher's top-k (gkd_teacher_top_k = k > 0, ALGORITHMS.md F.3): instead of
// its full distribution the teacher hands over, per position, a summary of width 2k+1 —
// the tempered log-probs of its k most likely tokens (most likely first), the log of the
// mass of all the others, and the k token ids (as floats, exact below 2^24) — and the
// divergence is the generalized JSD between the two distributions coarsened to k+1
// buckets: the teacher's k tokens, one by one, and "every other token" as one bucket.

// TopKSummaryWidth is the width of the teacher's summary for k tokens: 2k+1.
func TopKSummaryWidth(k int) int { return 2*k + 1 }

// topKBlock is the width of the blocks TeacherTopK ranks first, level by level: the k
// largest of m values lie in the (at most) k blocks of the largest block maxima, so the k
// rounds of ArgMax run over k·8 candidates at each level and over the few hundred block
// maxima at the top, not over V (at V = 151,936 and k = 64, about 0.1 M elements a row
// instead of 9.7 M).
const topKBlock = 8

// TeacherTopK is the teacher's summary [..., 2k+1] of logits [..., V] at temperature τ:
// log softmax(z/τ) of its k largest logits (largest first), the log-mass of the other V−k
// tokens, and the k ids. The remainder's log-mass is a log-sum-exp over the logits with
// the k ids masked, not log(1 − Σ p_k), which would cancel when the k tokens hold nearly
// all the mass. Which of equal logits takes the k-th place is unspecified. Needs 0 < k < V.
// No gradient.
func TeacherTopK(logits *Node, k int, temperature float64) (*Node, error) {
	return teacherTopK(logits, k, temperature, topKBlock)
}

// teacherTopK is TeacherTopK with blocks of the given width.
func teacherTopK(logits *Node, k int, temperature float64, block int) (*Node, error) {
	dims := logits.Shape().Dimensions
	V := dims[len(dims)-1]
	if k <= 0 || k >= V {
		return nil, fmt.Errorf("gkd: gkd_teacher_top_k %d must be in 1 … %d (the vocabulary less one)", k, V-1)
	}
	g := logits.Graph()
	n := logits.Shape().Size() / V
	z := StopGradient(logits)
	if z.DType() != dtypes.Float64 {
		z = ConvertDType(z, dtypes.Float32) // the ids, stored as floats, need float32's 24 bits
	}
	z = Reshape(scaled(z, temperature), n, V)
	ids, vals := topKBlocks(z, Iota(g, shapes.Make(dtypes.Int32, n, V), 1), k, block)
	lse, rest := logMasses(z, flatIDs(ids, V))
	out := Concatenate([]*Node{Sub(vals, lse), Sub(rest, lse), ConvertDType(ids, z.DType())}, -1)
	return Reshape(out, append(append([]int{}, dims[:len(dims)-1]...), 2*k+1)...), nil
}

// topKBlocks is topKRounds of x [n, m] with labels [n, m], narrowed first: with more than k
// blocks of the given width, the k blocks of the largest maxima (found the same way, one
// level up) hold the k largest values, and only their k·block values are ranked.
func topKBlocks(x, labels *Node, k, block int) (picked, values *Node) {
	dims := x.Shape().Dimensions
	n, m := dims[0], dims[1]
	nb := (m + block - 1) / block
	if nb <= k || block < 2 {
		return topKRounds(x, labels, k)
	}
	g := x.Graph()
	if pad := nb*block - m; pad > 0 { // never chosen: the k largest are among m > k finite values
		x = Concatenate([]*Node{x, BroadcastToDims(Infinity(g, x.DType(), -1), n, pad)}, -1)
		labels = Concatenate([]*Node{labels, Zeros(g, shapes.Make(labels.DType(), n, pad))}, -1)
	}
	blockMax := ReduceMax(Reshape(x, n, nb, block), -1) // [n, nb]
	blocks, _ := topKBlocks(blockMax, Iota(g, shapes.Make(dtypes.Int32, n, nb), 1), k, block)
	rows := Reshape(Add(MulScalar(Iota(g, shapes.Make(dtypes.Int32, n, k), 0), nb), blocks), n*k, 1)
	cand := Reshape(Gather(Reshape(x, n*nb, block), rows), n, k*block)
	candLabels := Reshape(Gather(Reshape(labels, n*nb, block), rows), n, k*block)
	return topKRounds(cand, candLabels, k)
}

// topKRounds picks the k largest of x [n, m] by k rounds of ArgMax, each masking the
// previous winner: their labels (from labels [n, m], int32) and values, [n, k] each,
// largest first, ties to the earlier position.
func topKRounds(x, labels *Node, k int) (picked, values *Node) {
	g := x.Graph()
	dims := x.Shape().Dimensions
	n, m := dims[0], dims[1]
	pos := Iota(g, shapes.Make(dtypes.Int32, n, m), 1)
	negInf := BroadcastToDims(Infinity(g, x.DType(), -1), n, m)
	orig := x
	var at []*Node
	for range k {
		a := ExpandAxes(ArgMax(x, -1, dtypes.Int32), -1) // [n, 1]
		at = append(at, a)
		x = Where(Equal(pos, BroadcastToDims(a, n, m)), negInf, x)
	}
	// One gather each for the labels and values of the k winners.
	flat := Reshape(Add(MulScalar(Iota(g, shapes.Make(dtypes.Int32, n, k), 0), m), Concatenate(at, -1)), n*k, 1)
	picked = Reshape(Gather(Reshape(labels, n*m, 1), flat), n, k)
	values = Reshape(Gather(Reshape(orig, n*m, 1), flat), n, k)
	return picked, values
}

// GeneralizedJSDTopK is GKD's per-token divergence [...] between the student's logits
// [..., V] (with gradient) and the teacher's summary [..., 2k+1] (TeacherTopK, no gradient),
// over the k+1 buckets: the student's tempered log-probs of the teacher's k ids, and the
// log-mass of its other tokens (a log-sum-exp over the logits with the k ids masked).
func GeneralizedJSDTopK(studentLogits, summary *Node, k int, cfg GKDConfig) (*Node, error) {
	d, _, err := GeneralizedJSDTopKAndLogProbs(studentLogits, summary, nil, k, cfg)
	return d, err
}

// GeneralizedJSDTopKAndLogProbs is GeneralizedJSDTopK and, with targets [...] (integer ids;
// nil for none), the student's untempered log-probs of the targets [...], which at τ = 1
// reuse the divergence's normaliser instead of another pass over the vocabulary.
func GeneralizedJSDTopKAndLogProbs(studentLogits, summary, targets *Node, k int, cfg GKDConfig) (d, lp *Node, err error) {
	if err := cfg.Check(); err != nil {
		return nil, nil, err
	}
	sd, td := studentLogits.Shape().Dimensions, summary.Shape().Dimensions
	V := sd[len(sd)-1]
	if k <= 0 || k >= V {
		return nil, nil, fmt.Errorf("gkd: gkd_teacher_top_k %d must be in 1 … %d (the vocabulary less one)", k, V-1)
	}
	if len(td) != len(sd) || td[len(td)-1] != TopKSummaryWidth(k) || fmt.Sprint(td[:len(td)-1]) != fmt.Sprint(sd[:len(sd)-1]) {
		return nil, nil, fmt.Errorf("gkd: the teacher's top-%d summary is %s, want [..., %d] beside the student's logits %s",
			k, summary.Shape(), TopKSummaryWidth(k), studentLogits.Shape())
	}
	n := studentLogits.Shape().Size() / V
	z := Reshape(scaled(studentLogits, cfg.Temperature), n, V)
	t := Reshape(StopGradient(summary), n, 2*k+1)
	logT := toDType(Slice(t, AxisRange(), AxisRange(0, k+1)), studentLogits) // k log-probs and the remainder
	ids := ConvertDType(Slice(t, AxisRange(), AxisRange(k+1, 2*k+1)), dtypes.Int32)

	flat := flatIDs(ids, V)
	picked := Reshape(Gather(Reshape(z, n*V, 1), flat), n, k)
	lse, rest := logMasses(z, flat)
	logS := Sub(Concatenate([]*Node{picked, rest}, -1), lse) // [n, k+1]
	lead := sd[:len(sd)-1]
	d = Reshape(GeneralizedJSDLogProbs(logS, logT, cfg.Beta), lead...)
	if targets == nil {
		return d, nil, nil
	}
	if targets.Shape().Size() != n {
		return nil, nil, fmt.Errorf("gkd: targets %s do not match the student's logits %s", targets.Shape(), studentLogits.Shape())
	}
	if cfg.Temperature != 1 { // the log-probs are of the untempered logits: a pass of their own
		z = Reshape(studentLogits, n, V)
		mx := StopGradient(ReduceAndKeep(z, ReduceMax, -1))
		lse = Add(mx, Log(ReduceAndKeep(Exp(Sub(z, mx)), ReduceSum, -1)))
	}
	tflat := flatIDs(Reshape(ConvertDType(targets, dtypes.Int32), n, 1), V)
	lp = Reshape(Sub(Gather(Reshape(z, n*V, 1), tflat), lse), lead...)
	return d, lp, nil
}

// GeneralizedJSDLogProbs is the generalized JSD of β over the last axis between two
// normalised log-distributions: the student's logS (with gradient) and the teacher's logT.
// β = 0 gives KL(T‖S), β = 1 gives KL(S‖T), and 0 < β < 1 gives β·KL(T‖M) + (1−β)·KL(S‖M)
// with M = βT + (1−β)S.
func GeneralizedJSDLogProbs(logS, logT *Node, beta float64) *Node {
	logT = StopGradient(logT)
	switch beta {
	case 0:
		return klCategorical(logT, logS)
	case 1:
		return klCategorical(logS, logT)
	}
	logM := LogAddExp(AddScalar(logT, math.Log(beta)), AddScalar(logS, math.Log1p(-beta)))
	return Add(MulScalar(klCategorical(logT, logM), beta), MulScalar(klCategorical(logS, logM), 1-beta))
}

// flatIDs are the positions [n·k, 1] of ids [n, k] (int32) in the flattened [n·V] logits.
func flatIDs(ids *Node, V int) *Node {
	d := ids.Shape().Dimensions
	rows := Iota(ids.Graph(), shapes.Make(dtypes.Int32, d...), 0)
	return Reshape(Add(MulScalar(rows, V), ids), d[0]*d[1], 1)
}

// logMasses returns, for logits z [n, V] and the flat positions of k distinct ids per row
// (flatIDs), log Σ_v exp(z_v) and the log of the same sum over the other tokens [n, 1] —
// summed directly over one pass of shifted exponentials, not as 1 − Σ top-k, which cancels
// when the k tokens hold nearly all the mass. The ids are marked by one scatter.
func logMasses(z, flat *Node) (lse, rest *Node) {
	d := z.Shape().Dimensions
	n, V := d[0], d[1]
	mx := StopGradient(ReduceAndKeep(z, ReduceMax, -1))
	e := Exp(Sub(z, mx))
	lse = Add(mx, Log(ReduceAndKeep(e, ReduceSum, -1)))
	ones := Ones(z.Graph(), shapes.Make(z.DType(), flat.Shape().Dimensions[0]))
	hits := Reshape(Scatter(flat, ones, shapes.Make(z.DType(), n*V), false, true), n, V)
	others := Where(GreaterThan(hits, ZerosLike(z)), ZerosLike(e), e)
	rest = Add(mx, Log(ReduceAndKeep(others, ReduceSum, -1)))
	return lse, rest
}

// scaled is z/τ, and z itself at τ = 1 (a pass over the logits saved).
func scaled(z *Node, tau float64) *Node {
	if tau == 1 {
		return z
	}
	return MulScalar(z, 1/tau)
}
