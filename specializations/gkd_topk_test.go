package specializations

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
)

// gkdStep runs gkd with gkd_teacher_top_k = topK end to end on the tiny model: the frozen
// teacher role produces its column into the rollout, the student's first micro-batch gives
// the loss and the gradient of every weight, with the head in chunks of 5 rows. It returns
// the loss, the flattened gradients and the teacher's produced log-probs.
func gkdStep(t *testing.T, topK int, beta float64) (loss float64, grads []float32, teacherLP [][]float32) {
	t.Helper()
	k := defaultKnobs()
	k.GKDTeacherTopK, k.GKDBeta, k.GKDTemperature = topK, beta, 0.9
	opts := BatchOptions{MicroBatchSize: 4, Pad: 256}
	tspec, err := New(RoleConfig{Role: schema.Role{Name: "t", Specialization: "gkd"}, Knobs: k})
	if err != nil {
		t.Fatal(err)
	}
	teacherModel := tinyModel(t, false)
	for _, p := range teacherModel.Params() { // another model than the student's
		v, err := teacherModel.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			v[i] *= float32(1 + 0.5*math.Sin(float64(i)))
		}
		if err := teacherModel.SetParam(p.Name, v); err != nil {
			t.Fatal(err)
		}
	}
	teacherModel.SetTrainable(false)
	teacher, err := NewProducer(testBackend(t), tspec.(LM), teacherModel)
	if err != nil {
		t.Fatal(err)
	}
	data := lmRollout(4, 1)
	if err := teacher.Produce(data, opts, map[string]string{rollout.KeyLogits: rollout.KeyTeacherLogits,
		rollout.KeyLogProbs: rollout.KeyTeacherLogProbs}); err != nil {
		t.Fatal(err)
	}
	s, err := New(RoleConfig{Role: schema.Role{Name: "s", Specialization: "gkd", Trainable: true}, Knobs: k})
	if err != nil {
		t.Fatal(err)
	}
	mbs, err := s.PrepareBatch(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t, false)
	m.HeadChunkRows = 5
	vars := m.Variables()
	lf := s.(LM).Loss()
	keys := slices.Sorted(maps.Keys(mbs[0]))
	exec, err := context.NewExec(testBackend(t), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		batch := map[string]*Node{}
		for i, k := range keys {
			batch[k] = in[i]
		}
		l, _ := lf(ctx, m, batch)
		params := make([]*Node, len(vars))
		for i, v := range vars {
			params[i] = v.ValueGraph(l.Graph())
		}
		return append([]*Node{l}, Gradient(l, params...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	in := make([]any, len(keys))
	for i, k := range keys {
		in[i] = mbs[0][k]
	}
	outs, err := exec.Exec(in...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs[1:] {
		grads = append(grads, tensors.MustCopyFlatData[float32](o)...)
	}
	return float64(tensors.MustCopyFlatData[float32](outs[0])[0]), grads, data.Tok[rollout.KeyTeacherLogProbs]
}

// TestGKDTeacherTopK: with gkd_teacher_top_k = V−1 every token is its own bucket, so the
// loss and the gradients of the summary path (teacher summary produced a chunk at a time,
// student divergence over buckets) equal the exact path's; with a small k the divergence of
// the coarsened distributions is no larger than the exact one (the generalized JSD is an
// f-divergence: coarse-graining cannot increase it), and positive; the teacher's produced
// log-probs are the same either way.
func TestGKDTeacherTopK(t *testing.T) {
	V := tinyModel(t, false).Config.VocabSize
	for _, beta := range []float64{0, 0.5, 1} {
		exact, gExact, lpExact := gkdStep(t, 0, beta)
		all, gAll, lpAll := gkdStep(t, V-1, beta)
		if math.Abs(all-exact) > 1e-5*math.Abs(exact)+1e-6 {
			t.Errorf("β %g: loss with k = V−1 %.8g, exact %.8g", beta, all, exact)
		}
		worst := 0.0
		for i := range gExact {
			d := math.Abs(float64(gAll[i] - gExact[i]))
			worst = max(worst, d)
			if d > 1e-5+1e-3*math.Abs(float64(gExact[i])) {
				t.Fatalf("β %g: gradient %d with k = V−1 %g, exact %g", beta, i, gAll[i], gExact[i])
			}
		}
		for r := range lpExact {
			for j := range lpExact[r] {
				if math.Abs(float64(lpAll[r][j]-lpExact[r][j])) > 1e-5 {
					t.Fatalf("β %g: teacher log-prob [%d][%d] %g, exact path %g", beta, r, j, lpAll[r][j], lpExact[r][j])
				}
			}
		}
		few, _, _ := gkdStep(t, 8, beta)
		if !(few > 0 && few <= exact*(1+1e-5)) {
			t.Errorf("β %g: loss with k = 8 %.8g, want in (0, exact %.8g]", beta, few, exact)
		}
		t.Logf("β %g: exact %.6g, k = V−1 %.6g (max |Δgrad| %.3g), k = 8 %.6g", beta, exact, all, worst, few)
	}
}

// TestGKDTeacherTopKTooLarge: a gkd_teacher_top_k that leaves no remainder (k ≥ V) is an
// error of the teacher's produce and of the student's loss, not a crash; a teacher column of
// the wrong width is one too.
func TestGKDTeacherTopKTooLarge(t *testing.T) {
	V := tinyModel(t, false).Config.VocabSize
	k := defaultKnobs()
	k.GKDTeacherTopK = V
	tspec, err := New(RoleConfig{Role: schema.Role{Name: "t", Specialization: "gkd"}, Knobs: k})
	if err != nil {
		t.Fatal(err)
	}
	teacher, err := NewProducer(testBackend(t), tspec.(LM), tinyModel(t, false))
	if err == nil {
		err = teacher.Produce(lmRollout(2, 1), BatchOptions{MicroBatchSize: 2, Pad: 256}, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "gkd_teacher_top_k") {
		t.Errorf("teacher with k = V: error %v, want one naming gkd_teacher_top_k", err)
	}

	// A student with k = 4 given a column of another width (the exact logits).
	k.GKDTeacherTopK = 4
	s, err := New(RoleConfig{Role: schema.Role{Name: "s", Specialization: "gkd", Trainable: true}, Knobs: k})
	if err != nil {
		t.Fatal(err)
	}
	data := lmRollout(2, 1)
	vecs := make([][][]float32, data.Len())
	for i, row := range data.Tokens {
		vecs[i] = make([][]float32, len(row))
		for j := range row {
			vecs[i][j] = make([]float32, V)
		}
	}
	if err := SetTokenVectors(data, rollout.KeyTeacherLogits, vecs); err != nil {
		t.Fatal(err)
	}
	mbs, err := s.PrepareBatch(data, BatchOptions{MicroBatchSize: 2, Pad: 256})
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t, false)
	exec, err := context.NewExec(testBackend(t), m.Context(), func(ctx *context.Context, tok, tgt, mask, teach *Node) *Node {
		out, err := s.(LM).ExtractModelOutput(ctx, m, Batch{bTokens: tok, bTargets: tgt, bLossMask: mask, rollout.KeyTeacherLogits: teach})
		if err != nil {
			panic(err)
		}
		return out[rollout.KeyLogProbs]
	})
	if err == nil {
		_, err = exec.Exec(mbs[0][bTokens], mbs[0][bTargets], mbs[0][bLossMask], mbs[0][rollout.KeyTeacherLogits])
	}
	if err == nil || !strings.Contains(err.Error(), "top-4 summary") {
		t.Errorf("student with k = 4 and a V-wide column: error %v, want one naming the top-4 summary", err)
	}
}
