package estimators

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Independent float64 references: the textbook formulas written the plain way (no scaling, no
// shared helpers), compared with the estimators on random moderate-scale batches.

func refGRPO(r []float64, norm bool, eps float64, ddof int) []float64 {
	n := len(r)
	out := make([]float64, n)
	if n == 0 {
		return out
	}
	mu, s := 0.0, 1.0
	if n > 1 {
		mu, s = 0, 0
		for _, v := range r {
			mu += v
		}
		mu /= float64(n)
		for _, v := range r {
			s += (v - mu) * (v - mu)
		}
		if n-ddof > 0 {
			s = math.Sqrt(s / float64(n-ddof))
		} else {
			s = 0
		}
		same := true
		for _, v := range r {
			same = same && v == r[0]
		}
		if same {
			return out
		}
	}
	for i, v := range r {
		if norm {
			out[i] = (v - mu) / (s + eps)
		} else {
			out[i] = v - mu
		}
	}
	return out
}

func refRFPP(groups [][]float64, eps float64, ddof int) [][]float64 {
	var all []float64
	c := make([][]float64, len(groups))
	for g, r := range groups {
		// Group-mean centring is GRPO without std normalisation (R1, R2 included).
		c[g] = refGRPO(r, false, 0, 0)
		all = append(all, c[g]...)
	}
	same := true
	for _, v := range all {
		same = same && v == all[0]
	}
	if len(all) < 2 || same {
		for g := range c {
			c[g] = make([]float64, len(c[g]))
		}
		return c
	}
	mu, s := 0.0, 0.0
	for _, v := range all {
		mu += v
	}
	mu /= float64(len(all))
	for _, v := range all {
		s += (v - mu) * (v - mu)
	}
	s = math.Sqrt(s / float64(len(all)-ddof))
	for g := range c {
		for i := range c[g] {
			c[g][i] /= s + eps
		}
	}
	return c
}

// refGAE evaluates A_t = Σ_l (γλ)^l δ_{t+l} directly over the valid tokens of a row, with
// δ_k = r_k + γ V_{k+1} − V_k on the compressed sequence of valid tokens (V past the end is 0).
func refGAE(r, v, m []float64, gamma, lambda float64) []float64 {
	var idx []int
	for t := range m {
		if m[t] != 0 {
			idx = append(idx, t)
		}
	}
	delta := make([]float64, len(idx))
	for k, t := range idx {
		next := 0.0
		if k+1 < len(idx) {
			next = v[idx[k+1]]
		}
		delta[k] = r[t] + gamma*next - v[t]
	}
	out := make([]float64, len(m))
	for k, t := range idx {
		var a, w float64 = 0, 1
		for l := k; l < len(idx); l++ {
			a += w * delta[l]
			w *= gamma * lambda
		}
		out[t] = a
	}
	return out
}

func randomBatch(rng *rand.Rand) [][]float64 {
	groups := make([][]float64, 1+rng.IntN(8))
	for g := range groups {
		groups[g] = make([]float64, rng.IntN(9))
		binary := rng.IntN(2) == 0
		for i := range groups[g] {
			if binary {
				groups[g][i] = float64(rng.IntN(2))
			} else {
				groups[g][i] = 4*rng.Float64() - 2
			}
		}
	}
	return groups
}

func maxAbsDiff(a, b [][]float64) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			d = max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

func TestOutcomeEstimatorsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		gs := randomBatch(rng)
		for _, ddof := range []int{0, 1} {
			for _, norm := range []bool{true, false} {
				want := make([][]float64, len(gs))
				for g := range gs {
					want[g] = refGRPO(gs[g], norm, DefaultEpsilon, ddof)
				}
				// Relative to the magnitude: a near-uniform group divided by (tiny std + ε) is large.
				got := GRPOAdvantages(gs, norm, DefaultEpsilon, ddof)
				if d := maxAbsDiff(got, want); d > 1e-9*(1+maxAbs(want)) {
					t.Fatalf("trial %d grpo norm=%v ddof=%d: max diff %g on %v", trial, norm, ddof, d, gs)
				}
			}
			got := ReinforcePPBaselineAdvantages(gs, DefaultEpsilon, ddof)
			want := refRFPP(gs, DefaultEpsilon, ddof)
			if d := maxAbsDiff(got, want); d > 1e-9*(1+maxAbs(want)) {
				t.Fatalf("trial %d rf++ ddof=%d: max diff %g on %v", trial, ddof, d, gs)
			}
		}
	}
}

func maxAbs(x [][]float64) float64 {
	m := 0.0
	for _, r := range x {
		for _, v := range r {
			m = max(m, math.Abs(v))
		}
	}
	return m
}

func TestGAEMatchesClosedForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		rows := 1 + rng.IntN(4)
		var r, v, m [][]float64
		for range rows {
			T := rng.IntN(12)
			rr, vv, mm := make([]float64, T), make([]float64, T), make([]float64, T)
			for t := range T {
				rr[t] = rng.NormFloat64()
				vv[t] = rng.NormFloat64()
				if rng.IntN(4) > 0 {
					mm[t] = 1
				}
			}
			r, v, m = append(r, rr), append(v, vv), append(m, mm)
		}
		gamma, lambda := rng.Float64(), rng.Float64()
		adv, ret, err := GAEAdvantages(r, v, m, nil, gamma, lambda)
		if err != nil {
			t.Fatal(err)
		}
		for b := range r {
			want := refGAE(r[b], v[b], m[b], gamma, lambda)
			for i := range want {
				if math.Abs(adv[b][i]-want[i]) > 1e-12 {
					t.Fatalf("trial %d row %d token %d: GAE %g, closed form %g", trial, b, i, adv[b][i], want[i])
				}
				if wantRet := (want[i] + v[b][i]) * m[b][i]; math.Abs(ret[b][i]-wantRet) > 1e-12 {
					t.Fatalf("trial %d row %d token %d: return %g, want %g", trial, b, i, ret[b][i], wantRet)
				}
			}
		}
	}
}

// GAE over the steps of one trajectory (rows chained by Traj) equals GAE over their
// concatenation as one row.
func TestGAEChainsStepsOfATrajectory(t *testing.T) {
	r := [][]float64{{0, 0.1, 0}, {0, 0, 0, 1}}
	v := [][]float64{{0.2, 0.3, 5}, {7, 0.5, 0.4, 0.6}}
	m := [][]float64{{1, 1, 0}, {0, 1, 1, 1}}
	adv, _, err := GAEAdvantages(r, v, m, []int{4, 4}, 0.9, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	cat := func(x [][]float64) []float64 { return append(append([]float64{}, x[0]...), x[1]...) }
	want := refGAE(cat(r), cat(v), cat(m), 0.9, 0.8)
	got := cat(adv)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("token %d: chained %g, concatenated %g", i, got[i], want[i])
		}
	}
	// Different trajectories do not chain: the first row alone.
	adv2, _, err := GAEAdvantages(r, v, m, []int{4, 5}, 0.9, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	alone := refGAE(r[0], v[0], m[0], 0.9, 0.8)
	for i := range alone {
		if math.Abs(adv2[0][i]-alone[i]) > 1e-12 {
			t.Errorf("unchained token %d: %g, want %g", i, adv2[0][i], alone[i])
		}
	}
}

func TestWhitenFewTokensGivesZeros(t *testing.T) {
	out, err := MaskedWhiten([][]float64{{3, 4}}, [][]float64{{0, 1}}, DefaultWhitenEps)
	if err != nil {
		t.Fatal(err)
	}
	if out[0][0] != 0 || out[0][1] != 0 {
		t.Errorf("one valid token: %v, want zeros", out)
	}
	if _, err := MaskedWhiten([][]float64{{1, 2}}, [][]float64{{1}}, 0); err == nil {
		t.Error("mask of the wrong shape: no error")
	}
}
