package loss

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// TestClippedRatioIsImportanceSamplingOnPolicy: OPD's later passes over a rollout train the
// clipped surrogate (C.1) against the rollout policy; on its first pass, where the policy is
// the rollout policy (ρ = 1), C.1 must be tinker's importance_sampling (C.4) bit for bit, in
// value and in gradient, whatever the advantages' signs and sizes. Off the rollout policy the
// two part: C.1's gradient is 0 on a token whose ratio has left [1 − ε, 1 + ε] in the
// direction its advantage pushes, C.4's keeps growing with ρ.
func TestClippedRatioIsImportanceSamplingOnPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 3))
	const rows, cols = 4, 6
	lp := randomArr(rng, -6, -0.05, rows, cols)
	adv := randomArr(rng, -4, 4, rows, cols) // OPD's gaps: large, of both signs
	mask := randomMask(rng, 0.8, rows, cols)
	build := func(clipped bool, r Reducer) func(in []*Node) (graphOutputs, error) {
		return func(in []*Node) (graphOutputs, error) {
			b := PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], SamplerLogProbs: in[1], Advantages: in[2], Mask: in[3]}
			var res Result
			var err error
			if clipped {
				res, err = PPO(b, PPOConfig{EpsLow: 0.1, EpsHigh: 0.1}, r)
			} else {
				res, err = ImportanceSampling(b, 0, r)
			}
			if err != nil {
				return nil, err
			}
			return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}, nil
		}
	}
	for _, mode := range []AggMode{AggSum, AggTokenMean} {
		r := Reducer{Mode: mode}
		for _, f32 := range []bool{false, true} {
			run := func(clipped bool, in []arr) map[string]arr {
				out, err := runGraphAs(backend(t), f32, in, build(clipped, r))
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			onPolicy := []arr{lp, lp, adv, mask}
			is, ppo := run(false, onPolicy), run(true, onPolicy)
			for _, k := range []string{"loss", "grad"} {
				for i, v := range is[k].data {
					if ppo[k].data[i] != v {
						t.Fatalf("%s (float32 %t): %s[%d] = %v clipped, %v importance_sampling: want the same bits at ρ = 1",
							mode, f32, k, i, ppo[k].data[i], v)
					}
				}
			}
		}
		// Off-policy: the rollout policy's log-probs are 0.5 below the policy's (ρ = e^0.5 ≈ 1.65).
		old := arr{data: make([]float64, len(lp.data)), dims: lp.dims}
		for i, v := range lp.data {
			old.data[i] = v - 0.5
		}
		out := map[bool]map[string]arr{}
		for _, clipped := range []bool{false, true} {
			o, err := runGraphAs(backend(t), false, []arr{lp, old, adv, mask}, build(clipped, r))
			if err != nil {
				t.Fatal(err)
			}
			out[clipped] = o
		}
		w, err := runGraphAs(backend(t), false, []arr{mask}, func(in []*Node) (graphOutputs, error) {
			x, err := r.Weights(in[0], in[0])
			return graphOutputs{"w": x}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range adv.data {
			if mask.data[i] == 0 {
				continue
			}
			rho := math.Exp(0.5)
			wantIS := -a * rho * w["w"].data[i]
			wantPPO := wantIS
			if a > 0 { // ρ > 1 + ε with A > 0: clipped, no gradient
				wantPPO = 0
			}
			if got := out[false]["grad"].data[i]; math.Abs(got-wantIS) > 1e-12*(1+math.Abs(wantIS)) {
				t.Errorf("%s: importance_sampling gradient[%d] = %v, want %v", mode, i, got, wantIS)
			}
			if got := out[true]["grad"].data[i]; math.Abs(got-wantPPO) > 1e-12*(1+math.Abs(wantPPO)) {
				t.Errorf("%s: clipped gradient[%d] = %v, want %v (A = %v)", mode, i, got, wantPPO, a)
			}
		}
	}
}
