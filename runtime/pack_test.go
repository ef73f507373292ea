package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

func TestPackLayout(t *testing.T) {
	cases := []struct {
		name      string
		lengths   []int
		T, budget int
		rows      int     // packed rows wanted
		padFrac   float64 // of the packed slots
		err       string  // substring of the error wanted, "" for none
	}{
		{"mixed", []int{5, 3, 8, 2}, 8, 8, 3, 1 - 18.0/24, ""},
		{"whole rows", []int{8, 8}, 8, 8, 2, 0, ""},
		{"one row", []int{3, 4, 1}, 8, 8, 1, 0, ""},
		{"empty sequence", []int{0, 3, 2}, 4, 4, 2, 1 - 5.0/8, ""},
		{"larger budget", []int{4, 4, 4, 4, 4}, 4, 8, 3, 1 - 20.0/24, ""},
		{"rows capped at R", []int{3, 3, 3}, 4, 4, 3, 1 - 9.0/12, ""},
		{"longer than the budget", []int{9, 2}, 16, 8, 0, 0, "more than the 8 tokens of a packed row"},
		{"longer than T", []int{5}, 4, 8, 0, 0, "outside [0, 4]"},
		{"no budget", []int{1}, 4, 0, 0, 0, "token budget 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Pack(tc.lengths, tc.T, tc.budget)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Rows != tc.rows || p.Length != tc.budget {
				t.Fatalf("packed [%d,%d], want [%d,%d]", p.Rows, p.Length, tc.rows, tc.budget)
			}
			if math.Abs(p.PadFraction()-tc.padFrac) > 1e-12 {
				t.Errorf("pad fraction %g, want %g", p.PadFraction(), tc.padFrac)
			}
			// Every real position round-trips, with its position and one segment per sequence.
			seen := map[int32]bool{}
			for s, n := range tc.lengths {
				var row, seg int32 = -1, -1
				for tt := range n {
					slot := p.Unpack[s*tc.T+tt]
					if p.Index[slot] != int32(s*tc.T+tt) || p.Positions[slot] != int32(tt) {
						t.Fatalf("sequence %d token %d: slot %d holds index %d position %d", s, tt, slot, p.Index[slot], p.Positions[slot])
					}
					if seen[slot] {
						t.Fatalf("slot %d used twice", slot)
					}
					seen[slot] = true
					r, sg := slot/int32(p.Length), p.Segments[slot]
					if tt > 0 && (r != row || sg != seg || p.Unpack[s*tc.T+tt-1] != slot-1) {
						t.Fatalf("sequence %d is not contiguous in one segment", s)
					}
					if sg == 0 {
						t.Fatalf("sequence %d in the padding segment", s)
					}
					row, seg = r, sg
				}
			}
			// Different sequences of a row have different segments; the rest is padding.
			for slot, sg := range p.Segments {
				if !seen[int32(slot)] && sg != 0 {
					t.Fatalf("padding slot %d has segment %d", slot, sg)
				}
			}
			segOf := map[[2]int32]int{}
			for s, n := range tc.lengths {
				if n == 0 {
					continue
				}
				slot := p.Unpack[s*tc.T]
				key := [2]int32{slot / int32(p.Length), p.Segments[slot]}
				if prev, dup := segOf[key]; dup {
					t.Fatalf("sequences %d and %d share row/segment %v", prev, s, key)
				}
				segOf[key] = s
			}
		})
	}
}

// packTestModel is smallGQA with non-zero biases, so that the reference checks them.
func packTestModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := NewModel(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range m.Params() {
		if strings.HasSuffix(p.Name, ".bias") {
			v := make([]float32, p.Shape[0])
			for i := range v {
				v[i] = float32(0.3 * rng.NormFloat64())
			}
			if err := m.SetParam(p.Name, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return m
}

// TestPackedAttentionMatchesFloat64Reference runs ForwardPacked on packed rows and checks every
// real slot's hidden state against the float64 decoder with the segment-id mask and per-slot
// positions, and that reference against the float64 decoder on each sequence alone (the mask
// and positions make packing exact), with and without a sliding window.
func TestPackedAttentionMatchesFloat64Reference(t *testing.T) {
	for _, window := range []int{0, 4} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			cfg := smallGQA()
			cfg.SlidingWindow = window
			m := packTestModel(t, cfg)
			ref, err := newRefModel(m)
			if err != nil {
				t.Fatal(err)
			}
			lengths := []int{7, 3, 12, 5, 9, 1}
			const T = 16
			seqs := randomSeqs(rand.New(rand.NewPCG(3, 1)), cfg.VocabSize, lengths...)
			tokens, _, err := PadTokens(seqs, len(seqs), T, 0)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Pack(lengths, T, T)
			if err != nil {
				t.Fatal(err)
			}
			b := testBackend(t)
			exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) *Node {
				return m.ForwardPacked(ctx, in[0], &Packed{Index: in[1], UnpackIndex: in[2], Positions: in[3], Segments: in[4]})
			})
			if err != nil {
				t.Fatal(err)
			}
			ts := p.Tensors()
			out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, len(seqs), T), ts[PackIndexKey], ts[UnpackIndexKey], ts[PackPositionsKey], ts[PackSegmentsKey])
			if err != nil {
				t.Fatal(err)
			}
			h := tensors.MustCopyFlatData[float32](out[0])
			d := cfg.Hidden
			worstGraph, worstPack := 0.0, 0.0
			for row := range p.Rows {
				lo := row * p.Length
				want := ref.packedRowHidden(p, tokens, row, window)
				for l := range p.Length {
					if p.Segments[lo+l] == 0 {
						continue
					}
					for i := range d {
						worstGraph = math.Max(worstGraph, math.Abs(float64(h[(lo+l)*d+i])-want[l][i]))
					}
				}
			}
			for s, q := range seqs {
				alone := ref.hidden(q)
				packedRow := ref.packedRowHidden(p, tokens, int(p.Unpack[s*T])/p.Length, window)
				for tt := range q {
					l := int(p.Unpack[s*T+tt]) % p.Length
					for i := range d {
						worstPack = math.Max(worstPack, math.Abs(packedRow[l][i]-alone[tt][i]))
					}
				}
			}
			t.Logf("max |packed graph − float64 masked reference| = %.3g; max |float64 packed − alone| = %.3g", worstGraph, worstPack)
			if worstGraph > 1e-4 {
				t.Errorf("packed hidden states differ from the float64 masked reference by %g", worstGraph)
			}
			if worstPack > 1e-9 {
				t.Errorf("the float64 masked reference of a packed row differs from each sequence alone by %g", worstPack)
			}
		})
	}
}

// packedRowHidden is maskedHidden on packed row `row` of p.
func (r *refModel) packedRowHidden(p *Packing, tokens []int32, row, window int) [][]float64 {
	lo := row * p.Length
	var rowTok []int32
	var pos []int
	for l := range p.Length {
		rowTok = append(rowTok, tokens[p.Index[lo+l]])
		pos = append(pos, int(p.Positions[lo+l]))
	}
	seg := p.Segments[lo : lo+p.Length]
	return r.maskedHidden(rowTok, pos, func(q, k int) bool {
		return seg[q] == seg[k] && k <= q && (window == 0 || pos[q]-pos[k] < window)
	})
}

// TestPackedLogProbsAndGradientsMatchUnpacked checks log-probs (scoring) and the gradients of a
// masked per-token loss computed on packed rows against the unpacked graph: ≤ 1e-5 relative;
// and the packed graph with activation checkpointing against the packed graph without.
func TestPackedLogProbsAndGradientsMatchUnpacked(t *testing.T) {
	cfg := smallGQA()
	m := packTestModel(t, cfg)
	lengths := []int{20, 3, 11, 32, 6, 9, 15, 1}
	const T = 32
	rng := rand.New(rand.NewPCG(5, 6))
	seqs := randomSeqs(rng, cfg.VocabSize, lengths...)
	R := len(seqs)
	tokens, mask, err := PadTokens(seqs, R, T, 0)
	if err != nil {
		t.Fatal(err)
	}
	targets, tmask := ShiftTargets(tokens, mask, R, T, 0)
	weights := make([]float32, R*T)
	for i := range weights {
		weights[i] = tmask[i] * float32(rng.NormFloat64())
	}
	p, err := Pack(lengths, T, T)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("packed %d×%d into %d×%d: pad fraction %.3f → %.3f", R, T, p.Rows, p.Length, 1-float64(p.RealTokens)/float64(R*T), p.PadFraction())
	vars := m.Variables()
	b := testBackend(t)
	run := func(packed bool) (lp []float32, grads [][]float32) {
		exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
			var lp *Node
			if packed {
				lp = m.TokenLogProbsPacked(ctx, in[0], in[1], &Packed{Index: in[3], UnpackIndex: in[4], Positions: in[5], Segments: in[6]})
			} else {
				lp = m.TokenLogProbs(ctx, in[0], in[1])
			}
			lp = Mul(lp, ConvertDType(NotEqual(in[2], ZerosLike(in[2])), lp.DType())) // padding positions: 0
			loss := ReduceAllSum(Mul(lp, in[2]))
			params := make([]*Node, len(vars))
			for i, v := range vars {
				params[i] = v.ValueGraph(loss.Graph())
			}
			return append([]*Node{lp}, Gradient(loss, params...)...)
		})
		if err != nil {
			t.Fatal(err)
		}
		ts := p.Tensors()
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, R, T), tensors.FromFlatDataAndDimensions(targets, R, T),
			tensors.FromFlatDataAndDimensions(weights, R, T), ts[PackIndexKey], ts[UnpackIndexKey], ts[PackPositionsKey], ts[PackSegmentsKey])
		if err != nil {
			t.Fatal(err)
		}
		lp = tensors.MustCopyFlatData[float32](out[0])
		for _, g := range out[1:] {
			grads = append(grads, tensors.MustCopyFlatData[float32](g))
		}
		return lp, grads
	}
	lpU, gU := run(false)
	lpP, gP := run(true)
	// With activation checkpointing, the packed layer's recomputation sees the same mask.
	m.ActivationCheckpointing = true
	lpC, gC := run(true)
	m.ActivationCheckpointing = false
	for i := range lpP { // equal on the cpu backend; XLA fuses the recomputation its own way
		if math.Abs(float64(lpC[i]-lpP[i])) > 1e-6*math.Max(1, math.Abs(float64(lpP[i]))) {
			t.Fatalf("log-prob %d: %g with checkpointing, %g without", i, lpC[i], lpP[i])
		}
	}
	for i := range gP {
		scale := 0.0
		for _, v := range gP[i] {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for j := range gP[i] {
			if d := math.Abs(float64(gC[i][j] - gP[i][j])); d > 1e-5*scale {
				t.Fatalf("gradient %d[%d]: %g with checkpointing, %g without", i, j, gC[i][j], gP[i][j])
			}
		}
	}
	worstLP := 0.0
	for i := range lpU {
		worstLP = math.Max(worstLP, math.Abs(float64(lpU[i]-lpP[i]))/math.Max(math.Abs(float64(lpU[i])), 1))
	}
	if worstLP > 1e-5 {
		t.Errorf("packed log-probs differ from unpacked by %g (relative)", worstLP)
	}
	worstG := 0.0
	for i := range gU {
		scale := 0.0
		for _, v := range gU[i] {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for j := range gU[i] {
			worstG = math.Max(worstG, math.Abs(float64(gU[i][j]-gP[i][j]))/math.Max(scale, 1e-30))
		}
	}
	t.Logf("max relative difference: log-probs %.3g, gradients %.3g", worstLP, worstG)
	if worstG > 1e-5 {
		t.Errorf("packed gradients differ from unpacked by %g (relative to each tensor's largest)", worstG)
	}
}

func TestPackAutoPicksTheFewestSlots(t *testing.T) {
	cases := []struct {
		name    string
		lengths []int
		T       int
		length  int // the row length wanted
	}{
		{"short sequences share longer rows", []int{10, 9, 11, 10, 9, 10, 12, 10}, 16, 32}, // 3×32 = 96 slots, against 2×64 and 8×16
		{"rows of T already pack", []int{16, 2, 3, 14, 8, 8}, 16, 16},
		{"long rows are not tried past 2048", []int{1100, 1000, 900}, 2048, 2048},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PackAuto(tc.lengths, tc.T)
			if err != nil {
				t.Fatal(err)
			}
			if p.Length != tc.length {
				t.Errorf("rows of %d, want %d", p.Length, tc.length)
			}
			if p.Rows*p.Length > len(tc.lengths)*tc.T {
				t.Errorf("%d slots, more than the %d unpacked", p.Rows*p.Length, len(tc.lengths)*tc.T)
			}
		})
	}
}

// TestUnpackZeroesPadding: Unpack puts every real slot's vector back at its sequence position,
// 0 at padding positions, and the gradient reaches only the slots read (a loss that weighs
// padding positions cannot leak into a real token's gradient).
func TestUnpackZeroesPadding(t *testing.T) {
	lengths := []int{3, 1, 2}
	const T = 4
	p, err := Pack(lengths, T, T)
	if err != nil {
		t.Fatal(err)
	}
	const k = 2
	y := make([]float32, p.Rows*p.Length*k)
	for i := range y {
		y[i] = float32(i + 1)
	}
	w := make([]float32, len(lengths)*T*k)
	for i := range w {
		w[i] = float32(1 + i%3) // padding positions weighed too
	}
	ts := p.Tensors()
	exec, err := NewExec(testBackend(t), func(y, w, unpack *Node) (*Node, *Node) {
		pk := &Packed{UnpackIndex: unpack}
		out := pk.Unpack(y)
		return out, Gradient(ReduceAllSum(Mul(out, w)), y)[0]
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(y, p.Rows, p.Length, k),
		tensors.FromFlatDataAndDimensions(w, len(lengths), T, k), ts[UnpackIndexKey])
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](out[0])
	grad := tensors.MustCopyFlatData[float32](out[1])
	wantGrad := make([]float32, len(y))
	for s, n := range lengths {
		for tt := range T {
			slot := p.Unpack[s*T+tt]
			for c := range k {
				i := (s*T+tt)*k + c
				want := float32(0)
				if tt < n {
					want = y[int(slot)*k+c]
					wantGrad[int(slot)*k+c] += w[i]
				}
				if got[i] != want {
					t.Fatalf("sequence %d position %d component %d: %g, want %g", s, tt, c, got[i], want)
				}
			}
		}
	}
	for i := range grad {
		if grad[i] != wantGrad[i] {
			t.Fatalf("gradient of slot value %d: %g, want %g", i, grad[i], wantGrad[i])
		}
	}
}
