package specializations

import (
	"math"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// saturate sets every micro-batch's advantages to 1 and its sampler log-probs to −100,
// so that each trainable token's ratio is exp(20) (the log-ratio clamp): every PPO and
// CISPO token sits on its upper clip bound and GSPO's sequence ratio on its cap, whatever
// the model, and the policy loss is a closed form of the bounds.
func saturate(t *testing.T, mbs []map[string]*tensors.Tensor) {
	t.Helper()
	for _, mb := range mbs {
		for key, v := range map[string]float32{"advantages": 1, rollout.KeySamplerLogProbs: -100} {
			dims := mb[key].Shape().Dimensions
			data := make([]float32, mb[key].Shape().Size())
			for i := range data {
				data[i] = v
			}
			mb[key] = tensors.FromFlatDataAndDimensions(data, dims...)
		}
	}
}

// TestClipBoundsAreBatchInputs: the actor's clip bounds reach a compiled loss as batch
// inputs. A trainer built from the actor with the old knobs, fed the batches of an actor
// built with edited knobs (what a hot reload does), reports the policy loss of the new
// bounds, and its loss function is traced no more after the edit (no recompilation).
func TestClipBoundsAreBatchInputs(t *testing.T) {
	// With advantages 1 and every ratio above its bound, the token-mean policy loss is
	// ppo: −(1 + ε_high); gspo: −min(e^max, 1 + ε_high); cispo: −hi·mean(logp), so
	// for cispo only the ratio of the two losses is closed-form (ratio set).
	cases := []struct {
		policy       string
		before, edit func(*schema.Knobs)
		want         [2]float64 // pg_loss before and after the edit (ratio: want[0]/want[1])
		ratio        bool
	}{
		{policy: "ppo", before: func(k *schema.Knobs) { k.ClipRatioHigh = 0.28 }, edit: func(k *schema.Knobs) { k.ClipRatioHigh = 0.1 },
			want: [2]float64{-1.28, -1.1}},
		{policy: "gspo", before: func(k *schema.Knobs) { k.ClipRatioLow, k.ClipRatioHigh = 3e-4, 4e-4 },
			edit: func(k *schema.Knobs) { k.GSPOSeqLogRatioMax = 1e-4 }, want: [2]float64{-(1 + 4e-4), -math.Exp(1e-4)}},
		{policy: "cispo", before: func(k *schema.Knobs) { k.CISPOClipHigh = 4 }, edit: func(k *schema.Knobs) { k.CISPOClipHigh = 2 },
			want: [2]float64{4, 2}, ratio: true},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			role := schema.Role{Name: "r", Specialization: "actor", Trainable: true}
			k := defaultKnobs()
			k.PolicyLoss = c.policy
			c.before(&k)
			old, err := New(RoleConfig{Role: role, Knobs: k})
			if err != nil {
				t.Fatal(err)
			}
			c.edit(&k)
			edited, err := New(RoleConfig{Role: role, Knobs: k})
			if err != nil {
				t.Fatal(err)
			}
			traces := 0
			inner := old.(LM).Loss()
			counted := func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) (*Node, map[string]*Node) {
				traces++
				return inner(ctx, m, batch)
			}
			// LR 0: the model stays the same across the two steps.
			tr, err := runtime.NewTrainer(testBackend(t), tinyModel(t, false), counted,
				runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 0}})
			if err != nil {
				t.Fatal(err)
			}
			cr, _ := Get("actor")
			data := rolloutWith(t, cr.Requires(RoleConfig{Role: role, Knobs: k}), 7)
			var pg [2]float64
			var traced [2]int
			for i, s := range []Specialization{old, edited} {
				mbs, err := s.PrepareBatch(data, BatchOptions{Pad: 256})
				if err != nil {
					t.Fatal(err)
				}
				saturate(t, mbs)
				res, err := tr.Step(mbs)
				if err != nil {
					t.Fatal(err)
				}
				pg[i], traced[i] = res.Metrics["pg_loss"], traces
			}
			if traced[0] == 0 || traced[1] != traced[0] {
				t.Errorf("loss traced %d times by the first step, %d after the edit: want no new trace", traced[0], traced[1])
			}
			close := func(got, want float64) bool { return math.Abs(got-want) <= 1e-5*(1+math.Abs(want)) }
			switch {
			case c.ratio && !close(pg[0]/pg[1], c.want[0]/c.want[1]):
				t.Errorf("pg_loss before %v, after the edit %v: ratio %v, want %v", pg[0], pg[1], pg[0]/pg[1], c.want[0]/c.want[1])
			case !c.ratio && (!close(pg[0], c.want[0]) || !close(pg[1], c.want[1])):
				t.Errorf("pg_loss before %v, after the edit %v, want %v", pg[0], pg[1], c.want)
			}
		})
	}
}
