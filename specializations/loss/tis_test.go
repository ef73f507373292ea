package loss

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// TestTISWeights: the truncated importance-sampling weights and their metrics equal a
// float64 reference, the cap truncates some tokens (or the test proves nothing), and PPO
// weighted by them has, token by token, the unweighted gradient times the weight.
func TestTISWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	old := randomArr(rng, -3, -0.1, 3, 5)
	sampler := randomArr(rng, -3, -0.1, 3, 5)
	lp := randomArr(rng, -3, -0.1, 3, 5)
	adv := randomArr(rng, -2, 2, 3, 5)
	mask := matrix([][]float64{{1, 1, 1, 1, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 1, 1}})
	const tisCap = 2.0
	// The reference.
	wantW := arr{data: make([]float64, len(old.data)), dims: old.dims}
	var n, sumW, clipped, kl float64
	for i := range old.data {
		if mask.data[i] == 0 {
			continue
		}
		rho := math.Exp(old.data[i] - sampler.data[i])
		wantW.data[i] = math.Min(rho, tisCap)
		n++
		sumW += wantW.data[i]
		if rho > tisCap {
			clipped++
		}
		kl += sampler.data[i] - old.data[i]
	}
	if clipped == 0 || clipped == n {
		t.Fatalf("%g of %g tokens truncated: the data do not exercise the cap", clipped, n)
	}
	got := runGraph(t, []arr{old, sampler, mask, lp, adv}, func(in []*Node) (graphOutputs, error) {
		w, m, err := TISWeights(in[0], in[1], in[2], tisCap, Reducer{})
		if err != nil {
			return nil, err
		}
		pb := PolicyBatch{LogProbs: in[3], OldLogProbs: in[0], Advantages: in[4], Mask: in[2]}
		plain, err := PPO(pb, PPOConfig{EpsLow: 0.2, EpsHigh: 0.2}, Reducer{})
		if err != nil {
			return nil, err
		}
		pb.TokenWeights = w
		weighted, err := PPO(pb, PPOConfig{EpsLow: 0.2, EpsHigh: 0.2}, Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"w": w, "mean": m["tis_weight_mean"], "clipfrac": m["tis_clipfrac"], "kl": m["tis_rollout_kl"],
			"grad": Gradient(plain.Loss, in[3])[0], "wgrad": Gradient(weighted.Loss, in[3])[0],
			// w carries no gradient into old_logp or sampler_logp.
			"dold": Gradient(weighted.Loss, in[0])[0]}, nil
	})
	expectArr(t, tight, "w", got["w"], wantW)
	expectArr(t, tight, "tis_weight_mean", got["mean"], scalarArr(sumW/n).reshape())
	expectArr(t, tight, "tis_clipfrac", got["clipfrac"], scalarArr(clipped/n).reshape())
	expectArr(t, tight, "tis_rollout_kl", got["kl"], scalarArr(kl/n).reshape())
	want := arr{data: make([]float64, len(lp.data)), dims: lp.dims}
	for i := range want.data {
		want.data[i] = got["grad"].data[i] * wantW.data[i]
	}
	expectArr(t, tight, "weighted gradient", got["wgrad"], want)
	nonzero := false
	for _, g := range got["grad"].data {
		nonzero = nonzero || g != 0
	}
	if !nonzero {
		t.Fatal("the unweighted gradient is 0: the comparison proves nothing")
	}
	// With TokenWeights the PPO ratio still reads old_logp; its gradient wrt old_logp is
	// the ratio's own, unchanged by the (stop-gradient) weights: compare with the weights
	// as a constant input.
	ref := runGraph(t, []arr{old, lp, adv, mask, wantW}, func(in []*Node) (graphOutputs, error) {
		res, err := PPO(PolicyBatch{LogProbs: in[1], OldLogProbs: in[0], Advantages: in[2], Mask: in[3], TokenWeights: in[4]},
			PPOConfig{EpsLow: 0.2, EpsHigh: 0.2}, Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"dold": Gradient(res.Loss, in[0])[0]}, nil
	})
	expectArr(t, tight, "gradient wrt old_logp", got["dold"], ref["dold"])
}

func TestTISWeightsRefusesBadCap(t *testing.T) {
	m := matrix([][]float64{{-1, -1}})
	for _, c := range []float64{0, -1, math.NaN()} {
		_, err := runGraphErr(backend(t), []arr{m, m, m}, func(in []*Node) (graphOutputs, error) {
			w, _, err := TISWeights(in[0], in[1], in[2], c, Reducer{})
			return graphOutputs{"w": w}, err
		})
		if err == nil {
			t.Errorf("tis_cap %g accepted", c)
		}
	}
}
