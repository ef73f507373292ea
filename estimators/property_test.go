package estimators

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	"stx.dev/stx/rollout"
)

// moderateGroup is a non-uniform reward group at a moderate scale (1e-3 … 1e3), where a naive
// float64 reference is exact enough to compare against.
type moderateGroup []float64

func (moderateGroup) Generate(r *rand.Rand, _ int) reflect.Value {
	n := 2 + r.Intn(31)
	scale := math.Pow(10, -3+6*r.Float64())
	g := make(moderateGroup, n)
	for i := range g {
		if r.Intn(3) == 0 {
			g[i] = scale * float64(r.Intn(2)) // binary rewards are the common case
		} else {
			g[i] = scale * (2*r.Float64() - 1)
		}
	}
	if allEqual(g) {
		g[0] += scale
	}
	return reflect.ValueOf(g)
}

// wildGroups are reward groups of any finite magnitude: huge (up to ±MaxFloat64), tiny
// (subnormal), zero, mixed within a group, singletons and all-equal groups.
type wildGroups [][]float64

func wildValue(r *rand.Rand) float64 {
	switch r.Intn(8) {
	case 0:
		return math.MaxFloat64 * (2*r.Float64() - 1)
	case 1:
		return []float64{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 0}[r.Intn(5)]
	case 2:
		return math.SmallestNonzeroFloat64 * float64(r.Intn(1000)-500)
	default:
		return (2*r.Float64() - 1) * math.Pow(10, float64(r.Intn(617)-308))
	}
}

func (wildGroups) Generate(r *rand.Rand, _ int) reflect.Value {
	gs := make(wildGroups, 1+r.Intn(6))
	for g := range gs {
		n := r.Intn(9)
		gs[g] = make([]float64, n)
		for i := range gs[g] {
			gs[g][i] = wildValue(r)
		}
		if n > 1 && r.Intn(5) == 0 {
			for i := range gs[g] {
				gs[g][i] = gs[g][0]
			}
		}
	}
	return reflect.ValueOf(gs)
}

func quickConfig(seed uint64) *quick.Config {
	n := 2000
	if testing.Short() {
		n = 200
	}
	return &quick.Config{MaxCount: n, Rand: rand.New(rand.NewSource(int64(seed)))}
}

func meanStd(x []float64, ddof int) (mean, std float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-ddof))
}

func TestPropertyGRPOMeanZeroStdOne(t *testing.T) {
	for _, ddof := range []int{0, 1} {
		prop := func(g moderateGroup) bool {
			a := GRPOAdvantages([][]float64{g}, true, DefaultEpsilon, ddof)[0]
			_, s := meanStd(g, ddof)
			m, sa := meanStd(a, ddof)
			// std(A) = s/(s+ε) exactly in real arithmetic; ≈ 1 whenever s ≫ ε.
			if math.Abs(m) > 1e-12 || math.Abs(sa-s/(s+DefaultEpsilon)) > 1e-12 {
				t.Logf("ddof %d group %v: mean %g std %g (want 0, %g)", ddof, g, m, sa, s/(s+DefaultEpsilon))
				return false
			}
			return s < 1e-2 || math.Abs(sa-1) < 1e-4
		}
		if err := quick.Check(prop, quickConfig(uint64(10+ddof))); err != nil {
			t.Errorf("ddof %d: %v", ddof, err)
		}
	}
}

func TestPropertyDrGRPOMeanZero(t *testing.T) {
	prop := func(g moderateGroup) bool {
		a := GRPOAdvantages([][]float64{g}, false, DefaultEpsilon, 0)[0]
		m, _ := meanStd(a, 0)
		scale := 0.0
		for _, v := range g {
			scale = max(scale, math.Abs(v))
		}
		return math.Abs(m) <= 1e-14*scale
	}
	if err := quick.Check(prop, quickConfig(12)); err != nil {
		t.Error(err)
	}
}

func TestPropertyRLOOIsLeaveOneOut(t *testing.T) {
	prop := func(g moderateGroup) bool {
		a := RLOOAdvantages([][]float64{g})[0]
		scale := 0.0
		for _, v := range g {
			scale = max(scale, math.Abs(v))
		}
		for i := range g {
			var others float64
			for j := range g {
				if j != i {
					others += g[j]
				}
			}
			want := g[i] - others/float64(len(g)-1)
			if math.Abs(a[i]-want) > 1e-12*scale {
				t.Logf("group %v: A[%d] = %g, explicit leave-one-out %g", g, i, a[i], want)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, quickConfig(13)); err != nil {
		t.Error(err)
	}
}

func allFinite(groups [][]float64) bool {
	for _, g := range groups {
		for _, v := range g {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
	}
	return true
}

func TestPropertyNoNaNOrInfForFiniteInput(t *testing.T) {
	prop := func(gs wildGroups) bool {
		outs := map[string][][]float64{
			"grpo/ddof0":  GRPOAdvantages(gs, true, DefaultEpsilon, 0),
			"grpo/ddof1":  GRPOAdvantages(gs, true, DefaultEpsilon, 1),
			"grpo/eps0":   GRPOAdvantages(gs, true, 0, 0),
			"dr_grpo":     GRPOAdvantages(gs, false, DefaultEpsilon, 0),
			"rloo":        RLOOAdvantages(gs),
			"rf++/ddof0":  ReinforcePPBaselineAdvantages(gs, DefaultEpsilon, 0),
			"rf++/ddof1":  ReinforcePPBaselineAdvantages(gs, DefaultEpsilon, 1),
			"rf++/eps0":   ReinforcePPBaselineAdvantages(gs, 0, 0),
			"reinforce":   ReinforceAdvantages(gs),
			"whitened":    mustWhiten(gs),
			"gae/raw":     nil,
			"gae/returns": nil,
		}
		// ReMax against a reversed copy of the rewards as baselines.
		base := make([][]float64, len(gs))
		for g := range gs {
			for i := len(gs[g]) - 1; i >= 0; i-- {
				base[g] = append(base[g], gs[g][i])
			}
			if base[g] == nil {
				base[g] = []float64{}
			}
		}
		remax, err := ReMaxAdvantages(gs, base)
		if err != nil {
			t.Log(err)
			return false
		}
		outs["remax"] = remax
		// GAE with the rewards as both token rewards and values, every token valid.
		mask := make([][]float64, len(gs))
		for g := range gs {
			mask[g] = make([]float64, len(gs[g]))
			for i := range mask[g] {
				mask[g][i] = 1
			}
		}
		adv, ret, err := GAEAdvantages(gs, gs, mask, nil, 1, 1)
		if err != nil {
			t.Log(err)
			return false
		}
		outs["gae/raw"], outs["gae/returns"] = adv, ret
		for name, out := range outs {
			if !allFinite(out) {
				t.Logf("%s: input %v gave %v", name, gs, out)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, quickConfig(14)); err != nil {
		t.Error(err)
	}
}

func mustWhiten(x [][]float64) [][]float64 {
	mask := make([][]float64, len(x))
	for i := range x {
		mask[i] = make([]float64, len(x[i]))
		for j := range mask[i] {
			mask[i][j] = 1
		}
	}
	out, err := MaskedWhiten(x, mask, DefaultWhitenEps)
	if err != nil {
		panic(err)
	}
	return out
}

// RolloutAdvantages narrows advantages to float32; huge advantages must saturate, not become ±Inf.
func TestPropertyRolloutAdvantagesFiniteFloat32(t *testing.T) {
	prop := func(gs wildGroups) bool {
		for _, name := range []string{GRPO, DrGRPO, RLOO, Reinforce, ReinforcePPBaseline} {
			r := &rollout.Rollout{Reward: []float64{}}
			for g := range gs {
				for _, x := range gs[g] {
					r.Tokens = append(r.Tokens, []int32{1, 2, 3})
					r.PromptLen = append(r.PromptLen, 1)
					r.Reward = append(r.Reward, x)
					r.GroupID = append(r.GroupID, fmt.Sprint(g))
				}
			}
			cfg := defaultConfig()
			cfg.Name = name
			if _, err := RolloutAdvantages(r, cfg); err != nil {
				t.Log(err)
				return false
			}
			for _, row := range r.Tok[rollout.KeyAdvantages] {
				for _, v := range row {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Logf("%s: input %v gave %v", name, gs, v)
						return false
					}
				}
			}
		}
		return true
	}
	if err := quick.Check(prop, quickConfig(15)); err != nil {
		t.Error(err)
	}
}
