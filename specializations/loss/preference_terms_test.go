package loss

import (
	"math"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// prefRef is a float64 reference of the composed preference loss over one batch of pairs:
// the DPO terms as mean over pairs (E), sft as −Σ P_c / N_c.
type prefRef struct {
	pc, pr, rc, rr, nc, nr []float64
	beta                   float64
}

func (r prefRef) term(t PairTerm, count, chosenTokens float64) float64 {
	sum := 0.0
	switch t {
	case TermSFT:
		for _, p := range r.pc {
			sum -= p
		}
		return sum / chosenTokens
	}
	for i := range r.pc {
		h := (r.pc[i] - r.rc[i]) - (r.pr[i] - r.rr[i])
		switch t {
		case TermSigmoid:
			sum += math.Log1p(math.Exp(-r.beta * h)) // −log σ(βh)
		case TermHinge:
			sum += math.Max(0, 1-r.beta*h)
		case TermIPO:
			hn := (r.pc[i]-r.rc[i])/math.Max(r.nc[i], 1) - (r.pr[i]-r.rr[i])/math.Max(r.nr[i], 1)
			d := hn - 1/(2*r.beta)
			sum += d * d
		}
	}
	return sum / count
}

// gradChosen is ∂L/∂P_c of Σ w·L_k for the sigmoid and sft terms (the RPO pair).
func (r prefRef) gradChosen(terms []WeightedTerm, count, chosenTokens float64) []float64 {
	g := make([]float64, len(r.pc))
	for i := range g {
		h := (r.pc[i] - r.rc[i]) - (r.pr[i] - r.rr[i])
		for _, wt := range terms {
			switch wt.Term {
			case TermSigmoid:
				g[i] += wt.Weight * -r.beta / (1 + math.Exp(r.beta*h)) / count
			case TermSFT:
				g[i] += wt.Weight * -1 / chosenTokens
			}
		}
	}
	return g
}

// TestPreferenceTermsAgainstReference: composed losses (RPO = sigmoid + α·sft, DPO+SFT
// mixes, hinge + ipo) equal Σ w_k L_k computed in float64, with the mini-batch pair and
// token counts given or taken from the batch, and their P_c gradient equals the analytic one.
func TestPreferenceTermsAgainstReference(t *testing.T) {
	ref := prefRef{
		pc: []float64{-4.2, -7.5, -3.1}, pr: []float64{-5.0, -6.9, -9.4},
		rc: []float64{-4.6, -7.1, -3.5}, rr: []float64{-4.9, -7.2, -8.8},
		nc: []float64{3, 5, 2}, nr: []float64{4, 5, 6}, beta: 0.1,
	}
	for _, c := range []struct {
		name         string
		terms        []string
		weights      []float64
		count, ntoks float64 // 0: the batch's own (3 pairs, 10 chosen tokens)
	}{
		{name: "rpo alpha 1", terms: []string{"sigmoid", "sft"}},
		{name: "rpo alpha 0.5", terms: []string{"sigmoid", "sft"}, weights: []float64{1, 0.5}},
		{name: "rpo mini-batch counts", terms: []string{"sigmoid", "sft"}, count: 8, ntoks: 31},
		{name: "dpo+sft mix", terms: []string{"sigmoid", "sft"}, weights: []float64{0.8, 0.2}},
		{name: "sft alone", terms: []string{"sft"}},
		{name: "sigmoid weighted", terms: []string{"sigmoid"}, weights: []float64{2}},
		{name: "hinge+ipo", terms: []string{"hinge", "ipo"}, weights: []float64{0.3, 0.7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			terms, err := Terms(c.terms, c.weights)
			if err != nil {
				t.Fatal(err)
			}
			count, ntoks := c.count, c.ntoks
			inputs := []arr{vector(ref.pc), vector(ref.pr), vector(ref.rc), vector(ref.rr), vector(ref.nc), vector(ref.nr)}
			if count != 0 {
				inputs = append(inputs, scalarArr(count), scalarArr(ntoks))
			} else {
				count, ntoks = 3, 10
			}
			want := 0.0
			for _, wt := range terms {
				want += wt.Weight * ref.term(wt.Term, count, ntoks)
			}
			out := runGraph(t, inputs, func(in []*Node) (graphOutputs, error) {
				b := PairBatch{PolicyChosen: in[0], PolicyRejected: in[1], RefChosen: in[2], RefRejected: in[3],
					ChosenLengths: in[4], RejectedLengths: in[5]}
				if len(in) > 6 {
					b.Count, b.ChosenTokens = in[6], in[7]
				}
				res, err := Preference(b, PreferenceConfig{Terms: terms, DPO: DPOConfig{Beta: ref.beta}})
				if err != nil {
					return nil, err
				}
				outs := graphOutputs{"loss": res.Loss, "grad": Gradient(res.Loss, in[0])[0]}
				for k, v := range res.Metrics {
					outs["metric/"+k] = v
				}
				return outs, nil
			})
			tol := tolerance{Rel: 1e-12, Abs: 1e-12}
			expectArr(t, tol, "loss", out["loss"], scalarArr(want))
			if len(terms) > 1 {
				for _, wt := range terms {
					expectArr(t, tol, "loss_"+string(wt.Term), out["metric/loss_"+string(wt.Term)],
						scalarArr(ref.term(wt.Term, count, ntoks)))
				}
			}
			if c.terms[0] != "hinge" {
				expectArr(t, tol, "grad", out["grad"], vector(ref.gradChosen(terms, count, ntoks)))
			}
		})
	}
}

// TestPreferenceSingleTermIsTheLoss: one term with weight 1 is that loss exactly, metrics
// and all (the dpo, simpo and orpo recipes are unchanged by the composition).
func TestPreferenceSingleTermIsTheLoss(t *testing.T) {
	in := []arr{vector([]float64{-4, -6}), vector([]float64{-5, -5}), vector([]float64{-4.5, -6.5}),
		vector([]float64{-4.8, -5.2}), vector([]float64{3, 4}), vector([]float64{2, 5})}
	cfg := PreferenceConfig{DPO: DPOConfig{Beta: 0.1}, SimPO: SimPOConfig{Beta: 2, Gamma: 1}, ORPOLambda: 0.1}
	for _, term := range []PairTerm{TermSigmoid, TermHinge, TermIPO, TermSimPO, TermORPO} {
		out := runGraph(t, in, func(n []*Node) (graphOutputs, error) {
			b := PairBatch{PolicyChosen: n[0], PolicyRejected: n[1], RefChosen: n[2], RefRejected: n[3],
				ChosenLengths: n[4], RejectedLengths: n[5]}
			c := cfg
			c.Terms = []WeightedTerm{{Term: term, Weight: 1}}
			got, err := Preference(b, c)
			if err != nil {
				return nil, err
			}
			want, err := pairTerm(b, term, cfg)
			if err != nil {
				return nil, err
			}
			if len(got.Metrics) != len(want.Metrics) {
				t.Errorf("%s: metrics %d, want %d", term, len(got.Metrics), len(want.Metrics))
			}
			outs := graphOutputs{"got": got.Loss, "want": want.Loss}
			for k := range want.Metrics {
				outs["got/"+k], outs["want/"+k] = got.Metrics[k], want.Metrics[k]
			}
			return outs, nil
		})
		for k, v := range out {
			if rest, ok := strings.CutPrefix(k, "got"); ok {
				expectArr(t, tolerance{}, string(term)+rest, v, out["want"+rest])
			}
		}
	}
}

// TestPreferenceTermsErrors: bad term lists fail with what is wrong.
func TestPreferenceTermsErrors(t *testing.T) {
	for _, c := range []struct {
		names   []string
		weights []float64
		want    string
	}{
		{nil, nil, "no terms"},
		{[]string{"sigmoid", "sft"}, []float64{1}, "1 weights for 2 terms"},
		{[]string{"sigmoid", "dpo"}, nil, `unknown term "dpo"`},
		{[]string{"sft", "sft"}, nil, "appears twice"},
		{[]string{"sigmoid"}, []float64{-1}, "must be >= 0"},
	} {
		_, err := Terms(c.names, c.weights)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Terms(%v, %v) = %v, want an error containing %q", c.names, c.weights, err, c.want)
		}
	}
}
