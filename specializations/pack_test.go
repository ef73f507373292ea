package specializations

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
)

// lossAndGrads evaluates spec's loss, metrics and the gradients of m's trainable variables on
// one micro-batch.
func lossAndGrads(t *testing.T, spec LM, m *runtime.Model, mb map[string]*tensors.Tensor) (loss float64, mets map[string]float64, grads [][]float32) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(mb))
	var metNames []string
	var vars []*context.Variable
	for _, v := range m.Variables() {
		if v.Trainable {
			vars = append(vars, v)
		}
	}
	lf := spec.Loss()
	exec, err := context.NewExec(testBackend(t), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		batch := map[string]*Node{}
		for i, k := range keys {
			batch[k] = in[i]
		}
		l, ms := lf(ctx, m, batch)
		metNames = slices.Sorted(maps.Keys(ms))
		out := []*Node{ConvertDType(l, l.DType())}
		for _, n := range metNames {
			out = append(out, ConvertDType(ms[n], l.DType()))
		}
		params := make([]*Node, len(vars))
		for i, v := range vars {
			params[i] = v.ValueGraph(l.Graph())
		}
		return append(out, Gradient(l, params...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = mb[k]
	}
	out, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	loss = float64(tensors.ToScalar[float32](out[0]))
	mets = map[string]float64{}
	for i, n := range metNames {
		mets[n] = float64(tensors.ToScalar[float32](out[1+i]))
	}
	for _, g := range out[1+len(metNames):] {
		grads = append(grads, tensors.MustCopyFlatData[float32](g))
	}
	return loss, mets, grads
}

// stepLossAndGrads is what an optimizer step over micro-batches mbs sees: the summed loss, the
// metrics combined as the trainer combines them (runtime.CombineMetric) and the summed gradients.
func stepLossAndGrads(t *testing.T, spec LM, m *runtime.Model, mbs []map[string]*tensors.Tensor) (loss float64, mets map[string]float64, grads [][]float32) {
	t.Helper()
	mets = map[string]float64{}
	for j, mb := range mbs {
		l, ms, gs := lossAndGrads(t, spec, m, mb)
		loss += l
		for n, v := range ms {
			mets[n] = runtime.CombineMetric(n, mets[n], v, j == 0)
		}
		if j == 0 {
			grads = gs
			continue
		}
		for k := range gs {
			for e := range gs[k] {
				grads[k][e] += gs[k][e]
			}
		}
	}
	return loss, mets, grads
}

// TestPackedLossesAndGradientsMatchUnpacked: for every language-model specialization (SFT, the
// actor's GRPO-style per-token losses, DPO's chosen/rejected pairs, …) the loss, every metric
// and every gradient of a mini-batch's packed micro-batches equal the unpacked ones to float32
// rounding (≤ 1e-5 relative): packing must change no figure a recipe records. Packed, the
// micro-batches are token budgets (3 rows of 18 tokens here, against 4 sequences unpacked), so the rows are regrouped across micro-batches (pairs and states whole) and rounded
// up with empty rows, and the mini-batch denominators keep the sum the same.
func TestPackedLossesAndGradientsMatchUnpacked(t *testing.T) {
	regrouped, laidEmpty := 0, 0
	for i, c := range specCases() {
		if strings.HasPrefix(c.name, "flow") {
			continue // velocity models have no sequences to pack
		}
		t.Run(fmt.Sprintf("%s_%d", c.name, i), func(t *testing.T) {
			if onXLA() && i > 0 {
				t.Skip("the graphs are the backend's; the cpu backend runs every case")
			}
			cfg := c.config(true)
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			spec := s.(LM)
			data := trainingRollout(t, c, cfg)
			opts := BatchOptions{MicroBatchSize: 4, Temperature: 0.7}
			unpacked, err := spec.PrepareBatch(data, opts)
			if err != nil {
				t.Fatal(err)
			}
			opts.Pack, opts.MicroBatchSize, opts.PackTokens = true, 3, 18
			packed, err := spec.PrepareBatch(data, opts)
			if err != nil {
				t.Fatal(err)
			}
			rows := func(mbs []map[string]*tensors.Tensor) (out []int) {
				for _, mb := range mbs {
					out = append(out, realRows(mb))
				}
				return out
			}
			if !slices.Equal(rows(unpacked), rows(packed)) {
				regrouped++
			}
			for _, mb := range packed {
				if mb[bTokens].Shape().Dimensions[0] > realRows(mb) {
					laidEmpty++
				}
			}
			for j, mb := range packed {
				if mb[runtime.PackIndexKey] == nil {
					t.Fatalf("micro-batch %d is not packed", j)
				}
				// KTO's z0 couples a micro-batch's rows: they are packed, never regrouped.
				if r := mb[bTokens].Shape().Dimensions[0]; c.name == "kto" && j < len(packed)-1 && r != opts.MicroBatchSize {
					t.Fatalf("kto micro-batch %d has %d rows packed, want micro_batch_size %d", j, r, opts.MicroBatchSize)
				}
			}
			m := tinyModel(t, c.name == "critic" || c.name == "reward_model")
			lu, mu, gu := stepLossAndGrads(t, spec, m, unpacked)
			lp, mp, gp := stepLossAndGrads(t, spec, m, packed)
			rel := func(a, b, scale float64) float64 { return math.Abs(a-b) / math.Max(scale, 1e-6) }
			if d := rel(lu, lp, math.Abs(lu)); d > 1e-5 {
				t.Errorf("loss %g packed, %g unpacked (relative %g)", lp, lu, d)
			}
			for n, v := range mu {
				// A metric can be a difference of larger sums (DPO's margins of log-prob
				// sums ≈ −30): relative to the unit, as their float32 rounding is.
				if d := rel(v, mp[n], math.Max(math.Abs(v), 1)); d > 1e-5 {
					t.Errorf("metric %s %g packed, %g unpacked", n, mp[n], v)
				}
			}
			worst := 0.0
			for k := range gu {
				scale := 0.0
				for _, v := range gu[k] {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				for e := range gu[k] {
					worst = math.Max(worst, rel(float64(gu[k][e]), float64(gp[k][e]), scale))
				}
			}
			if worst > 1e-5 {
				t.Errorf("gradients differ by %g (relative to each tensor's largest)", worst)
			}
			var laid []int
			for _, mb := range packed {
				laid = append(laid, mb[bTokens].Shape().Dimensions[0])
			}
			t.Logf("micro-batches of %v sequences packed (laid out as %v rows), %v unpacked: loss %.6g (packed − unpacked %.2g), gradients %.2g relative",
				rows(packed), laid, rows(unpacked), lu, lp-lu, worst)
		})
	}
	if !onXLA() && (regrouped < 15 || laidEmpty < 10) {
		t.Errorf("%d specialization cases regrouped their rows when packed, %d micro-batches had empty rows: the test no longer checks regrouping",
			regrouped, laidEmpty)
	}
}

// TestPackedMicroBatchesAreTokenBudgets: packed, a mini-batch of short rows runs in fewer
// micro-batches, each at most the token slots of an unpacked one (micro_batch_size rows of the
// padded length), close to the fewest that hold its tokens, and the cut is the same every time
// (PrepareBatch of the same rows gives the same tensors).
func TestPackedMicroBatchesAreTokenBudgets(t *testing.T) {
	s, err := New(specCase{name: "sft"}.config(true))
	if err != nil {
		t.Fatal(err)
	}
	data := mixedLengthRollout(64, 20, 40, 4) // padded to 64
	opts := BatchOptions{MicroBatchSize: 8, Pad: 256}
	unpacked, err := s.PrepareBatch(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Pack = true
	packed, err := s.PrepareBatch(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.PrepareBatch(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	slots := 0
	seqs := 0
	for j, mb := range packed {
		p := mb[runtime.PackIndexKey].Shape().Dimensions
		if p[0]*p[1] > 8*64 {
			t.Errorf("micro-batch %d: packed rows %v, more than the 8 rows of 64 tokens of an unpacked one", j, p)
		}
		slots += p[0] * p[1]
		seqs += realRows(mb)
		for k, x := range mb {
			if again[j][k] == nil || !x.Equal(again[j][k]) {
				t.Fatalf("micro-batch %d key %q differs between two cuts of the same rows", j, k)
			}
		}
	}
	if seqs != data.Len() || len(again) != len(packed) {
		t.Fatalf("%d sequences in %d micro-batches (then %d), want %d", seqs, len(packed), len(again), data.Len())
	}
	tokens := 0
	for _, r := range data.Tokens {
		tokens += len(r)
	}
	least := (tokens + 8*64 - 1) / (8 * 64) // micro-batches of 8 rows of 64 that hold every token
	t.Logf("%d micro-batches unpacked, %d packed (%d at least); padding %.2f packed, %.2f unpacked",
		len(unpacked), len(packed), least, 1-float64(tokens)/float64(slots), 1-float64(tokens)/float64(data.Len()*64))
	// The ladder's round-down and the last, partial one cost at most one micro-batch here.
	if len(packed) >= len(unpacked) || len(packed) > least+1 {
		t.Errorf("%d packed micro-batches for rows of 20–40 tokens, want fewer than the %d unpacked and at most %d", len(packed), len(unpacked), least+1)
	}
}

// realRows counts a micro-batch's sequences: its rows with a token (a token-budget micro-batch's
// row count is rounded up with empty rows).
func realRows(mb map[string]*tensors.Tensor) int {
	n := 0
	for _, v := range tensors.MustCopyFlatData[float32](mb[bLastToken]) {
		if v != 0 {
			n++
		}
	}
	return n
}

// TestPackedProducerMatchesUnpacked: the forward-only log-probs a reference or teacher role
// scores are the same packed, row by row, its micro-batches token budgets.
func TestPackedProducerMatchesUnpacked(t *testing.T) {
	c := specCase{name: "sft"}
	s, err := New(c.config(false))
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t, false)
	produce := func(pack bool) [][]float32 {
		// One producer per layout: an evaluator is compiled for one set of batch keys.
		prod, err := NewProducer(testBackend(t), s.(LM), m)
		if err != nil {
			t.Fatal(err)
		}
		data := lmRollout(8, 4)
		data.Tokens[2] = append(data.Tokens[2], data.Tokens[2]...) // lengths 7..24
		data.Mask[2] = append(data.Mask[2], data.Mask[2]...)
		data.Tok[rollout.KeySamplerLogProbs][2] = append(data.Tok[rollout.KeySamplerLogProbs][2], data.Tok[rollout.KeySamplerLogProbs][2]...)
		// Micro-batches of 2 rows: packed, 2 rows of 32 tokens, which regroup the sequences.
		if err := prod.Produce(data, BatchOptions{MicroBatchSize: 2, Pack: pack}, nil); err != nil {
			t.Fatal(err)
		}
		return data.Tok[rollout.KeyLogProbs]
	}
	u, p := produce(false), produce(true)
	for r := range u {
		for tt := range u[r] {
			if d := math.Abs(float64(u[r][tt] - p[r][tt])); d > 1e-5*math.Max(1, math.Abs(float64(u[r][tt]))) {
				t.Fatalf("row %d token %d: log-prob %g packed, %g unpacked", r, tt, p[r][tt], u[r][tt])
			}
		}
	}
}

// TestEmptyRowsAreInert: the empty rows that round a token-budget micro-batch up to the row ladder
// (padRows) change no loss, metric or gradient of any specialization that takes them (all but the
// preference pairs and KTO, whose micro-batches take a ladder count of units instead): here a
// whole mini-batch with an empty unit appended, unpacked, against the same without it.
func TestEmptyRowsAreInert(t *testing.T) {
	for i, c := range specCases() {
		if strings.HasPrefix(c.name, "flow") {
			continue
		}
		contract, err := Get(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if contract.Data == DataPreference || contract.Data == DataKTO {
			continue // noEmptyUnits, fixedRows
		}
		t.Run(fmt.Sprintf("%s_%d", c.name, i), func(t *testing.T) {
			if onXLA() && i > 0 {
				t.Skip("the graphs are the backend's; the cpu backend runs every case")
			}
			cfg := c.config(true)
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			spec := s.(LM)
			mbs, err := spec.PrepareBatch(trainingRollout(t, c, cfg), BatchOptions{Temperature: 0.7})
			if err != nil {
				t.Fatal(err)
			}
			mb := mbs[0]
			padded := maps.Clone(mb)
			R := mb[bTokens].Shape().Dimensions[0]
			unit := max(cfg.Knobs.AggrevateCandidates, 1)
			if c.name != "aggrevate" {
				unit = 1
			}
			padRows(padded, R, R+unit)
			m := tinyModel(t, c.name == "critic")
			l, mets, grads := lossAndGrads(t, spec, m, mb)
			lp, metsP, gradsP := lossAndGrads(t, spec, m, padded)
			if math.Abs(l-lp) > 1e-6*math.Max(1, math.Abs(l)) {
				t.Errorf("loss %g with an empty unit, %g without", lp, l)
			}
			for n, v := range mets {
				if math.Abs(v-metsP[n]) > 1e-6*math.Max(1, math.Abs(v)) {
					t.Errorf("metric %s %g with an empty unit, %g without", n, metsP[n], v)
				}
			}
			// Other batch shapes sum in another order: float32 rounding, relative to each
			// gradient tensor's largest entry as in TestPackedLossesAndGradientsMatchUnpacked.
			for k := range grads {
				scale := 1e-30
				for _, v := range grads[k] {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				for e := range grads[k] {
					if d := math.Abs(float64(grads[k][e]-gradsP[k][e])) / scale; d > 1e-5 {
						t.Fatalf("gradient %d[%d] %g with an empty unit, %g without (%g of the tensor's largest)", k, e, gradsP[k][e], grads[k][e], d)
					}
				}
			}
		})
	}
}
