package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBF16DotDecodeAgainstFloat64: a model computing in bfloat16 decodes no further from the
// float64 forward of its (bfloat16) weights with the bfloat16 dot-product kernels than with the
// float32-input ones they replaced (the two differ only in the order of the float32 sums and in
// flushing denormals: both round every product's input to bfloat16, as the graph does). Both
// decode the same token sequences (teacher-forced), so every token is compared twice, once
// per kernel; the share of sampled tokens the two draw alike is logged.
func TestBF16DotDecodeAgainstFloat64(t *testing.T) {
	cfg, _ := BuiltinConfig("bench")
	cfg.InitStd = 0.05
	m, err := NewModel(cfg, 21)
	if err != nil {
		t.Fatal(err)
	}
	// Weights that are bfloat16 values, so that the float64 reference has the decoder's weights.
	roundWeightsToBF16(t, m)
	ref, err := newRefModel(m)
	if err != nil {
		t.Fatal(err)
	}
	s := bf16HostSampler(t, m)
	if err := s.ensureHost(); err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	const promptLen = 8
	seqs := randomSeqs(rand.New(rand.NewPCG(35, 3)), V, 40, 40, 40, 40, 40, 40)
	var want []float64 // the reference's log-prob of every token after the prompt
	for _, full := range seqs {
		lp, _ := ref.logProbs(full)
		want = append(want, lp[promptLen-1:]...)
	}
	var mean, worst [2]float64
	for i, widen := range []bool{false, true} {
		s.host.widenInputs = widen
		at := 0
		for _, full := range seqs {
			seq := newHostSeq(cfg, len(full)+1)
			logits := make([]float32, V)
			s.prefillHost([]*hostSeq{seq}, [][]int32{full[:promptLen]}, [][]float32{logits})
			for k := promptLen; k < len(full); k++ {
				mx, sum := math.Inf(-1), 0.0
				for _, v := range logits {
					mx = max(mx, float64(v))
				}
				for _, v := range logits {
					sum += math.Exp(float64(v) - mx)
				}
				d := math.Abs(float64(logits[full[k]]) - mx - math.Log(sum) - want[at])
				mean[i], worst[i], at = mean[i]+d, max(worst[i], d), at+1
				s.host.step([]*hostSeq{seq}, nil, []int32{full[k]}, logits)
			}
		}
		mean[i] /= float64(at)
		t.Logf("widenInputs=%v: |log-prob − float64 reference| mean %.3g max %.3g over %d tokens", widen, mean[i], worst[i], at)
	}
	if !(mean[0] <= 1.1*mean[1]) || !(worst[0] <= 1.5*worst[1]) {
		t.Errorf("bfloat16 dot products: |log-prob − float64| mean %.3g max %.3g, float32-input kernels %.3g, %.3g: further from the reference",
			mean[0], worst[0], mean[1], worst[1])
	}

	// Sampled: how soon the two kernels' samples part.
	prompts := randomSeqs(rand.New(rand.NewPCG(35, 4)), V, 5, 12, 1, 30, 8, 17)
	var tokens [2][]Sample
	for i, widen := range []bool{false, true} {
		s.host.widenInputs = widen
		if tokens[i], err = s.Generate(prompts, SampleOptions{MaxNewTokens: 24, Temperature: 1, Seed: 7}); err != nil {
			t.Fatal(err)
		}
	}
	same, parted := 0, 0
	for j := range prompts {
		a, b := tokens[0][j].Tokens, tokens[1][j].Tokens
		for k := range min(len(a), len(b)) {
			if a[k] != b[k] {
				parted++
				break // the sequences part here
			}
			same++
		}
	}
	t.Logf("sampling, the two kernels draw %d tokens alike before the sequences part; %d of %d sequences part", same, parted, len(prompts))
}
