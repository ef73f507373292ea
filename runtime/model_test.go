package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

func testBackend(t testing.TB) *Backend {
	t.Helper()
	b, err := NewBackend("")
	if err != nil {
		t.Fatalf("backend: %v", err)
	}
	return b
}

func randomSeqs(rng *rand.Rand, vocab int, lengths ...int) [][]int32 {
	out := make([][]int32, len(lengths))
	for i, n := range lengths {
		out[i] = make([]int32, n)
		for j := range out[i] {
			out[i][j] = int32(rng.IntN(vocab))
		}
	}
	return out
}

// smallGQA is a config exercising the optional parts: GQA, q/k/v biases, tied embeddings.
func smallGQA() Config {
	return Config{Architecture: ArchQwen2, VocabSize: 50, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2,
		Intermediate: 40, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositions: 128, TieEmbeddings: true,
		AttentionBias: true, BOS: -1, EOS: 1, PAD: 0, InitStd: 0.2}
}

func TestLogProbsMatchFloat64Reference(t *testing.T) {
	bench, _ := BuiltinConfig("bench")
	// A larger init makes attention and the MLP non-trivial (0.02 gives nearly uniform outputs).
	bench.InitStd = 0.05
	cases := []struct {
		name    string
		cfg     Config
		lengths []int
	}{
		{"bench", bench, []int{24, 9}},
		{"gqa-bias-tied", smallGQA(), []int{17, 5, 30}},
	}
	b := testBackend(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewModel(tc.cfg, 7)
			if err != nil {
				t.Fatal(err)
			}
			// Biases are zero at init; give them values so that they are tested.
			if tc.cfg.AttentionBias {
				rng := rand.New(rand.NewPCG(3, 4))
				for _, p := range m.Params() {
					if p.Shape[0] > 0 && len(p.Shape) == 1 && p.Name[len(p.Name)-4:] == "bias" {
						v := make([]float32, p.Shape[0])
						for i := range v {
							v[i] = float32(rng.NormFloat64() * 0.3)
						}
						if err := m.SetParam(p.Name, v); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			seqs := randomSeqs(rand.New(rand.NewPCG(1, 2)), tc.cfg.VocabSize, tc.lengths...)
			ref, err := newRefModel(m)
			if err != nil {
				t.Fatal(err)
			}
			worst := checkScorerAgainstReference(t, b, m, ref, seqs)
			t.Logf("max |log-prob − float64 reference| = %.3g", worst)
		})
	}
}

// checkScorerAgainstReference scores seqs with m's Scorer and checks every
// log-prob and entropy against the float64 reference ref to 1e-4; it
// returns the largest log-prob difference.
func checkScorerAgainstReference(t *testing.T, b *Backend, m *Model, ref *refModel, seqs [][]int32) float64 {
	t.Helper()
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sc.ScoreWithEntropy(seqs)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, s := range seqs {
		wantLP, wantEnt := ref.logProbs(s)
		if len(got[i].LogProbs) != len(wantLP) {
			t.Fatalf("seq %d: %d log-probs, want %d", i, len(got[i].LogProbs), len(wantLP))
		}
		for j := range wantLP {
			d := math.Abs(float64(got[i].LogProbs[j]) - wantLP[j])
			worst = max(worst, d)
			if d > 1e-4 {
				t.Errorf("seq %d token %d: log-prob %v, float64 reference %v", i, j, got[i].LogProbs[j], wantLP[j])
			}
			if de := math.Abs(float64(got[i].Entropy[j]) - wantEnt[j]); de > 1e-4 {
				t.Errorf("seq %d token %d: entropy %v, reference %v", i, j, got[i].Entropy[j], wantEnt[j])
			}
		}
	}
	return worst
}
