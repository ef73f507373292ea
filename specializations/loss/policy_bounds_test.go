package loss

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// TestPolicyBoundNodes: PPO, GSPO and CISPO with their clip bounds given as scalar
// nodes equal the float-bound losses, gradients and metrics, and one compiled graph
// follows new bound values fed at run time (the hot-reload path: no recompilation).
func TestPolicyBoundNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lp := randomArr(rng, -3, -0.1, 3, 5)
	old := randomArr(rng, -3, -0.1, 3, 5)
	// GSPO's sequence ratio needs log-ratios near 0 to meet its narrow interval and
	// its cap: a second old_logp close to lp.
	near := arr{data: make([]float64, len(lp.data)), dims: lp.dims}
	for i, v := range lp.data {
		near.data[i] = v + rng.Float64()*0.02 - 0.01
	}
	adv := randomArr(rng, -2, 2, 3, 5)
	mask := matrix([][]float64{{1, 1, 1, 1, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 1, 1}})

	type bounds struct{ a, b, c float64 } // the loss's two or three bounds
	cases := []struct {
		name  string
		old   arr
		sets  []bounds
		float func(PolicyBatch, bounds) (Result, error)
		nodes func(PolicyBatch, []*Node) (Result, error)
	}{
		{name: "ppo", old: old, sets: []bounds{{0.2, 0.2, 0}, {0.1, 0.28, 0}, {0.3, 0.05, 0}},
			float: func(b PolicyBatch, v bounds) (Result, error) {
				return PPO(b, PPOConfig{EpsLow: v.a, EpsHigh: v.b, DualClipC: 3}, Reducer{})
			},
			nodes: func(b PolicyBatch, n []*Node) (Result, error) {
				return PPO(b, PPOConfig{EpsLowNode: n[0], EpsHighNode: n[1], DualClipC: 3}, Reducer{})
			}},
		{name: "gspo", old: near, sets: []bounds{{3e-4, 4e-4, 10}, {1e-3, 2e-3, 10}, {3e-4, 4e-4, -2e-3}},
			float: func(b PolicyBatch, v bounds) (Result, error) {
				return GSPO(b, GSPOConfig{EpsLow: v.a, EpsHigh: v.b, SeqLogRatioMax: v.c}, Reducer{})
			},
			nodes: func(b PolicyBatch, n []*Node) (Result, error) {
				return GSPO(b, GSPOConfig{EpsLowNode: n[0], EpsHighNode: n[1], SeqLogRatioMaxNode: n[2]}, Reducer{})
			}},
		{name: "cispo", old: old, sets: []bounds{{0, 4, 0}, {0.5, 1.5, 0}, {0.9, 1.1, 0}},
			float: func(b PolicyBatch, v bounds) (Result, error) {
				return CISPO(b, CISPOConfig{ClipLow: v.a, ClipHigh: v.b}, Reducer{})
			},
			nodes: func(b PolicyBatch, n []*Node) (Result, error) {
				return CISPO(b, CISPOConfig{ClipLowNode: n[0], ClipHighNode: n[1]}, Reducer{})
			}},
	}
	outputs := func(res Result, lp *Node) graphOutputs {
		return graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, lp)[0], "clipfrac": res.Metrics["clipfrac"],
			"token_loss": res.Aux["token_loss"]}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := newEvaluator(backend(t), false, func(in []*Node) (graphOutputs, error) {
				res, err := c.nodes(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]}, in[4:])
				if err != nil {
					return nil, err
				}
				return outputs(res, in[0]), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer ev.exec.Finalize()
			var losses []float64
			for _, v := range c.sets {
				want := runGraph(t, []arr{lp, c.old, adv, mask}, func(in []*Node) (graphOutputs, error) {
					res, err := c.float(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]}, v)
					if err != nil {
						return nil, err
					}
					return outputs(res, in[0]), nil
				})
				got, err := ev.run([]arr{lp, c.old, adv, mask, scalarArr(v.a), scalarArr(v.b), scalarArr(v.c)})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"loss", "grad", "clipfrac", "token_loss"} {
					expectArr(t, tight, c.name+" "+k, got[k], want[k])
				}
				losses = append(losses, want["loss"].data[0])
			}
			// Every bound set must give its own loss, or the comparison proves nothing.
			if losses[0] == losses[1] || losses[1] == losses[2] || losses[0] == losses[2] {
				t.Errorf("%s: bound sets give losses %v; the data do not exercise every bound", c.name, losses)
			}
		})
	}
}

// TestPolicyBoundNodesMustBeScalars: a bound node of another shape is refused.
func TestPolicyBoundNodesMustBeScalars(t *testing.T) {
	m := matrix([][]float64{{-1, -1}})
	_, err := runGraphErr(backend(t), []arr{m, m, m, matrix([][]float64{{1, 1}})}, func(in []*Node) (graphOutputs, error) {
		res, err := PPO(PolicyBatch{LogProbs: in[0], OldLogProbs: in[1], Advantages: in[2], Mask: in[3]},
			PPOConfig{EpsHighNode: in[3]}, Reducer{})
		if err != nil {
			return nil, err
		}
		return graphOutputs{"loss": res.Loss}, nil
	})
	if err == nil {
		t.Fatal("PPO accepted a [1,2] eps_high node")
	}
}
