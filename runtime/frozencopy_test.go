package runtime

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// roundedModel is a model whose every weight is a bfloat16 value (as a bfloat16 checkpoint
// loads), with a value head.
func roundedModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := NewModel(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddValueHead(12); err != nil {
		t.Fatal(err)
	}
	roundWeightsToBF16(t, m)
	return m
}

// roundWeightsToBF16 sets every weight of m to its value rounded to bfloat16 (round to nearest
// even), as a bfloat16 checkpoint would have stored it; each is called with the weight's name.
func roundWeightsToBF16(t *testing.T, m *Model, each ...func(name string)) {
	t.Helper()
	for _, p := range m.params {
		v, err := m.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range v {
			v[i] = bf16RNE(f).Float32()
		}
		if err := m.SetParam(p.Name, v); err != nil {
			t.Fatal(err)
		}
		for _, f := range each {
			f(p.Name)
		}
	}
}

// TestFrozenCopyScoresAsTheModel: the frozen copy of a model whose weights are all bfloat16
// values holds its matrices in bfloat16 (half the memory; norms and the value head stay
// float32), reads back the model's exact values, scores the same log-probs and entropies bit
// for bit in float32 and in bfloat16 compute, and keeps them when the model trains on.
func TestFrozenCopyScoresAsTheModel(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	rng := rand.New(rand.NewPCG(5, 6))
	seqs := randomSeqs(rng, cfg.VocabSize, 9, 5, 12)
	for _, compute := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
		t.Run(compute.String(), func(t *testing.T) {
			m := roundedModel(t, cfg)
			m.ComputeDType = compute
			ref, err := m.FrozenCopy()
			if err != nil {
				t.Fatal(err)
			}
			ref.ComputeDType = compute
			for _, p := range m.Params() {
				want := dtypes.Float32
				if len(p.Shape) == 2 && p.Name != "score.weight" {
					want = dtypes.BFloat16
				}
				v := ref.Variable(p.Name)
				if got := v.Shape().DType; got != want {
					t.Errorf("%s held in %s, want %s", p.Name, got, want)
				}
				if v.Trainable {
					t.Errorf("%s of the frozen copy is trainable", p.Name)
				}
				a, _ := m.ParamValues(p.Name)
				c, _ := ref.ParamValues(p.Name)
				if !sameBits(a, c) {
					t.Fatalf("%s: the copy's values differ from the model's", p.Name)
				}
			}
			score := func(m *Model) []Scored {
				sc, err := NewScorer(b, m)
				if err != nil {
					t.Fatal(err)
				}
				out, err := sc.ScoreWithEntropy(seqs)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			want, got := score(m), score(ref)
			for i := range want {
				if !sameBits(want[i].LogProbs, got[i].LogProbs) || !sameBits(want[i].Entropy, got[i].Entropy) {
					t.Fatalf("sequence %d: the frozen copy scores %v / %v, the model %v / %v",
						i, got[i].LogProbs, got[i].Entropy, want[i].LogProbs, want[i].Entropy)
				}
			}
			// The copy has storage of its own: the model's steps leave it as it was.
			tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{Kind: "constant", BaseLR: 1e-2}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Step(batch1(sftBatch(rng, cfg, 2, 8))); err != nil {
				t.Fatal(err)
			}
			after := score(ref)
			for i := range want {
				if !sameBits(want[i].LogProbs, after[i].LogProbs) {
					t.Fatalf("sequence %d: the frozen copy's log-probs changed when the model trained", i)
				}
			}
		})
	}
}

// TestFrozenCopyKeepsFloat32: weights that are not all bfloat16 values (a new model's) are
// copied in float32, bit for bit.
func TestFrozenCopyKeepsFloat32(t *testing.T) {
	m, err := NewModel(smallGQA(), 3)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.FrozenCopy()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if dt := ref.Variable(p.Name).Shape().DType; dt != dtypes.Float32 {
			t.Errorf("%s held in %s, want float32", p.Name, dt)
		}
		a, _ := m.ParamValues(p.Name)
		c, _ := ref.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s: the copy's values differ from the model's", p.Name)
		}
	}
}
