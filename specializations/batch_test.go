package specializations

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
)

// TestShiftedLayout: per-token columns move to target positions (position t holds the
// value of token t+1), targets are the next tokens, and the loss mask is the next
// token's mask.
func TestShiftedLayout(t *testing.T) {
	r := &rollout.Rollout{
		Tokens: [][]int32{{5, 6, 7, 8}, {9, 10}},
		Mask:   [][]float32{{0, 0, 1, 1}, {0, 1}},
		Tok:    map[string][][]float32{"x": {{1, 2, 3, 4}, {5, 6}}},
	}
	in := lmInputs(r, []int{0, 1}, 16, 0)
	tok, _ := tensors.CopyFlatData[int32](in[bTokens])
	tgt, _ := tensors.CopyFlatData[int32](in[bTargets])
	mask, _ := tensors.CopyFlatData[float32](in[bLossMask])
	last, _ := tensors.CopyFlatData[float32](in[bLastToken])
	x, _ := tensors.CopyFlatData[float32](shiftedTok(r.Tok["x"], []int{0, 1}, 16))
	if !slices.Equal(tok[:5], []int32{5, 6, 7, 8, 0}) || !slices.Equal(tgt[:4], []int32{6, 7, 8, 0}) ||
		!slices.Equal(tgt[16:18], []int32{10, 0}) {
		t.Errorf("tokens %v, targets %v", tok[:5], tgt[:18])
	}
	if !slices.Equal(mask[:4], []float32{0, 1, 1, 0}) || !slices.Equal(mask[16:18], []float32{1, 0}) {
		t.Errorf("loss mask %v / %v", mask[:4], mask[16:18])
	}
	if !slices.Equal(x[:4], []float32{2, 3, 4, 0}) || !slices.Equal(x[16:18], []float32{6, 0}) {
		t.Errorf("shifted column %v / %v", x[:4], x[16:18])
	}
	if last[3] != 1 || last[17] != 1 || sum(last) != 2 {
		t.Errorf("last-token one-hot %v", last)
	}
}

func sum(x []float32) (s float32) {
	for _, v := range x {
		s += v
	}
	return s
}

// TestWideColumns: vectors round-trip through wide columns; bad shapes are errors.
func TestWideColumns(t *testing.T) {
	r := &rollout.Rollout{Tokens: [][]int32{{1, 2}, {3}}}
	if err := SetTokenVectors(r, "z", [][][]float32{{{1, 2}, {3, 4}}, {{5, 6}}}); err != nil {
		t.Fatal(err)
	}
	if wideDim(r.Tok, "z") != 2 || r.Tok["z/1"][0][1] != 4 || r.Tok["z/0"][1][0] != 5 {
		t.Errorf("wide token column: %v", r.Tok)
	}
	if err := r.Validate(); err != nil {
		t.Error(err)
	}
	if err := SetTokenVectors(r, "bad", [][][]float32{{{1}, {2, 3}}, {{4}}}); err == nil {
		t.Error("ragged vectors accepted")
	}
	if err := SetRowVectors(r, "s", [][]float32{{1, 2, 3}, {4, 5, 6}}); err != nil || r.Row["s/2"][1] != 6 {
		t.Errorf("wide row column: %v, %v", err, r.Row)
	}
	if err := SetRowVectors(r, "s", [][]float32{{1}}); err == nil {
		t.Error("a wide row column with the wrong row count was accepted")
	}
}

// TestKTOMismatched: each labelled example's prompt gets the next example's completion,
// label −1, mask on the completion only; other columns stay aligned.
func TestKTOMismatched(t *testing.T) {
	r := &rollout.Rollout{
		Tokens:    [][]int32{{1, 2, 10, 11}, {3, 20}, {4, 5, 6, 30, 31, 32}},
		PromptLen: []int{2, 1, 3},
		Mask:      [][]float32{{0, 0, 1, 1}, {0, 1}, {0, 0, 0, 1, 1, 1}},
		Row:       map[string][]float64{rollout.KeyLabel: {1, 0, 1}},
		Tok:       map[string][][]float32{rollout.KeyRefLogProbs: {{0, 0, -1, -1}, {0, -2}, {0, 0, 0, -3, -3, -3}}},
	}
	out, err := AddKTOMismatched(r)
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 6 || r.Len() != 3 {
		t.Fatalf("rows: %d (original now %d)", out.Len(), r.Len())
	}
	want := [][]int32{{1, 2, 20}, {3, 30, 31, 32}, {4, 5, 6, 10, 11}}
	for j, w := range want {
		if !slices.Equal(out.Tokens[3+j], w) {
			t.Errorf("mismatched row %d: %v, want %v", j, out.Tokens[3+j], w)
		}
		if out.Row[rollout.KeyLabel][3+j] != -1 || len(out.Tok[rollout.KeyRefLogProbs][3+j]) != len(w) {
			t.Errorf("mismatched row %d: label %v, ref row %v", j, out.Row[rollout.KeyLabel][3+j], out.Tok[rollout.KeyRefLogProbs][3+j])
		}
	}
	if !slices.Equal(out.Mask[4], []float32{0, 1, 1, 1}) {
		t.Errorf("mask of a mismatched row: %v", out.Mask[4])
	}
	if _, err := AddKTOMismatched(&rollout.Rollout{Tokens: [][]int32{{1}}}); err == nil || !strings.Contains(err.Error(), "prompt_len") {
		t.Errorf("missing columns: %v", err)
	}
}
