package runtime

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSamplerReleaseHostWeights: a sampler whose host copy of the weights was dropped samples
// exactly what it sampled before, from the model's current weights; a small model's copy is
// not worth releasing and is kept.
func TestSamplerReleaseHostWeights(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	m, err := NewModel(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(b, m)
	if err != nil {
		t.Fatal(err)
	}
	if !s.decodesOnHost() {
		t.Skipf("the sampler of backend %s decodes in graphs", b.Name())
	}
	prompts := randomSeqs(rand.New(rand.NewPCG(2, 2)), cfg.VocabSize, 3, 7)
	opt := SampleOptions{MaxNewTokens: 6, Temperature: 1, Seed: 5}
	gen := func() []Sample {
		out, err := s.Generate(prompts, opt)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	same := func(a, b []Sample) bool {
		for i := range a {
			if !slices.Equal(a[i].Tokens, b[i].Tokens) || !sameBits(a[i].LogProbs, b[i].LogProbs) {
				return false
			}
		}
		return len(a) == len(b)
	}
	first := gen()
	if n := s.ReleaseHostWeights(); n != 0 || s.host == nil {
		t.Fatalf("a %d-parameter model's copy was released (%d bytes)", cfg.NumParams(), n)
	}
	s.mu.Lock()
	s.releaseHost()
	s.mu.Unlock()
	if s.host != nil {
		t.Fatal("releaseHost left the host decoder")
	}
	if again := gen(); !same(first, again) {
		t.Fatal("after its copy of the weights was released, the sampler samples differently")
	}
	// The copy read again is the model's current one.
	w, _ := m.ParamValues("model.norm.weight")
	for i := range w {
		w[i] *= 2
	}
	if err := m.SetParam("model.norm.weight", w); err != nil {
		t.Fatal(err)
	}
	changed := gen()
	s.mu.Lock()
	s.releaseHost()
	s.mu.Unlock()
	if again := gen(); !same(changed, again) {
		t.Fatal("a released copy read again differs from the one updated in place")
	}
}
