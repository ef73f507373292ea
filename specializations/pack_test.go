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

// TestPackedLossesAndGradientsMatchUnpacked: for every language-model specialization (SFT, the
// actor's GRPO-style per-token losses, DPO's chosen/rejected pairs, …) the loss, every metric
// and every gradient of packed micro-batches equal the unpacked ones to float32 rounding
// (≤ 1e-5 relative): packing must change no figure a recipe records.
func TestPackedLossesAndGradientsMatchUnpacked(t *testing.T) {
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
			opts.Pack = true
			packed, err := spec.PrepareBatch(data, opts)
			if err != nil {
				t.Fatal(err)
			}
			m := tinyModel(t, c.name == "critic" || c.name == "reward_model")
			for j := range unpacked {
				if packed[j][runtime.PackIndexKey] == nil {
					t.Fatalf("micro-batch %d is not packed", j)
				}
				lu, mu, gu := lossAndGrads(t, spec, m, unpacked[j])
				lp, mp, gp := lossAndGrads(t, spec, m, packed[j])
				rel := func(a, b, scale float64) float64 { return math.Abs(a-b) / math.Max(scale, 1e-6) }
				if d := rel(lu, lp, math.Abs(lu)); d > 1e-5 {
					t.Errorf("micro-batch %d: loss %g packed, %g unpacked (relative %g)", j, lp, lu, d)
				}
				for n, v := range mu {
					// A metric can be a difference of larger sums (DPO's margins of log-prob
					// sums ≈ −30): relative to the unit, as their float32 rounding is.
					if d := rel(v, mp[n], math.Max(math.Abs(v), 1)); d > 1e-5 {
						t.Errorf("micro-batch %d: metric %s %g packed, %g unpacked", j, n, mp[n], v)
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
					t.Errorf("micro-batch %d: gradients differ by %g (relative to each tensor's largest)", j, worst)
				}
				if j == 0 {
					t.Logf("loss %.6g (packed − unpacked %.2g), gradients %.2g relative", lu, lp-lu, worst)
				}
			}
		})
	}
}

// TestPackedProducerMatchesUnpacked: the forward-only log-probs a reference or teacher role
// scores are the same packed, row by row.
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
		if err := prod.Produce(data, BatchOptions{MicroBatchSize: 8, Pack: pack}, nil); err != nil {
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
