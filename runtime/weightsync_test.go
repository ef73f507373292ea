package runtime

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestRolloutCopyFollowsTraining: a data-parallel trainer on devices 0 and 1, its sampler on
// device 2 reading a copy that update_weights (Push) refreshes: the copy holds the trained
// weights bit for bit, lives on device 2, and samples what the trained model samples.
func TestRolloutCopyFollowsTraining(t *testing.T) {
	b := devicesBackend(t, 3)
	cfg := smallGQA()
	m, err := NewModel(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetDevices(b, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	rc, err := NewRolloutCopy(b, m, 2)
	if err != nil {
		t.Fatal(err)
	}
	mb := sftBatch(rand.New(rand.NewPCG(2, 2)), cfg, 4, 10)
	mb["den"] = tensors.FromScalar(float32(20))
	if _, err := tr.Step(batch1(mb)); err != nil {
		t.Fatal(err)
	}
	name := "model.layers.0.mlp.up_proj.weight"
	before, _ := rc.Model().ParamValues(name)
	after, _ := m.ParamValues(name)
	if sameBits(before, after) {
		t.Fatal("the step changed nothing, or the copy shares the trainer's weights")
	}
	x, err := rc.Push()
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, p := range m.Params() {
		n := int64(4)
		for _, d := range p.Shape {
			n *= int64(d)
		}
		want += n
	}
	if x.Bytes != want || x.Tensors != len(m.Params()) {
		t.Errorf("pushed %d bytes in %d tensors, want %d in %d", x.Bytes, x.Tensors, want, len(m.Params()))
	}
	t.Logf("update_weights: %d tensors, %d bytes in %v", x.Tensors, x.Bytes, x.Duration)
	for _, p := range m.Params() {
		a, _ := m.ParamValues(p.Name)
		c, _ := rc.Model().ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s: the copy differs from the trained weights", p.Name)
		}
	}
	v, _ := rc.Model().Variable(name).Value()
	if !v.IsOnDevice(2) {
		t.Error("the copy is not on device 2")
	}
	s1, err := NewSampler(b, m)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSampler(b, rc.Model())
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.SetDevice(b, 2); err != nil {
		t.Fatal(err)
	}
	opt := SampleOptions{MaxNewTokens: 6, Temperature: 1, Seed: 4}
	prompts := [][]int32{{5, 6, 7}, {8, 9}}
	g1, err := s1.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s2.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range g1 {
		if !slices.Equal(g1[i].Tokens, g2[i].Tokens) {
			t.Errorf("prompt %d: trained model samples %v, the copy %v", i, g1[i].Tokens, g2[i].Tokens)
		}
	}
}

// TestOffloadAndWakeKeepTraining: offloading a role's weights and optimizer state to host
// memory between steps, and waking them, changes no bit of what training computes.
func TestOffloadAndWakeKeepTraining(t *testing.T) {
	b := devicesBackend(t, 2)
	cfg := smallGQA()
	mb := sftBatch(rand.New(rand.NewPCG(6, 6)), cfg, 2, 10)
	mb["den"] = tensors.FromScalar(float32(12))
	run := func(offload bool) *Model {
		m, err := NewModel(cfg, 5)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(b, m, tokenSumLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := tr.Step(batch1(mb)); err != nil {
				t.Fatal(err)
			}
			if !offload {
				continue
			}
			sleep, err := m.Offload()
			if err != nil {
				t.Fatal(err)
			}
			wake, err := m.Wake(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				t.Logf("offload: %d tensors, %d bytes in %v; wake: %d bytes in %v",
					sleep.Tensors, sleep.Bytes, sleep.Duration, wake.Bytes, wake.Duration)
				// Weights and AdamW's m and v: three per parameter (steps of one micro-batch
				// create no gradient accumulators).
				if sleep.Tensors != 3*len(m.Params()) || wake.Bytes != sleep.Bytes {
					t.Errorf("offloaded %d tensors (%d bytes), woke %d bytes; want %d tensors",
						sleep.Tensors, sleep.Bytes, wake.Bytes, 3*len(m.Params()))
				}
			}
		}
		return m
	}
	plain, slept := run(false), run(true)
	for _, p := range plain.Params() {
		a, _ := plain.ParamValues(p.Name)
		c, _ := slept.ParamValues(p.Name)
		if !sameBits(a, c) {
			t.Fatalf("%s differs after offload and wake", p.Name)
		}
	}
}
