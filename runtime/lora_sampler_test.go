package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLoRASamplerMatchesScorer: the sampler of a LoRA model (the host decoder merges the
// adapters into its copy of the weights; the graph decode applies them on the fly) gives the
// log-probs a full forward with adapters gives, and follows a change of the adapters alone.
func TestLoRASamplerMatchesScorer(t *testing.T) {
	b := testBackend(t)
	for _, hostDecode := range []bool{true, false} {
		m := loraModel(t, smallGQA(), LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{LoRAAllLinear}})
		s, err := NewSampler(b, m)
		if err != nil {
			t.Fatal(err)
		}
		if hostDecode && !s.hostDecode {
			continue // this backend decodes in graphs only
		}
		s.hostDecode = hostDecode
		sc, err := NewScorer(b, m)
		if err != nil {
			t.Fatal(err)
		}
		prompts := randomSeqs(rand.New(rand.NewPCG(1, 1)), m.Config.VocabSize, 5, 9)
		check := func(when string) {
			samples, err := s.Generate(prompts, SampleOptions{MaxNewTokens: 12, Temperature: 1, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			var full [][]int32
			for i, p := range prompts {
				full = append(full, append(append([]int32{}, p...), samples[i].Tokens...))
			}
			scored, err := sc.Score(full)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				for j, lp := range samples[i].LogProbs {
					if d := math.Abs(float64(lp - scored[i].LogProbs[len(p)-1+j])); d > 1e-4 {
						t.Fatalf("host %v, %s: row %d token %d: sampler %v, scorer %v", hostDecode, when, i, j, lp, scored[i].LogProbs[len(p)-1+j])
					}
				}
			}
		}
		check("initial adapters")
		// Change one B: only an adapter variable gets a new tensor.
		name := "model.layers.1.mlp.down_proj.lora_B.weight"
		v, _ := m.ParamValues(name)
		for i := range v {
			v[i] += 0.3
		}
		if err := m.SetAdapter(name, v); err != nil {
			t.Fatal(err)
		}
		check("changed adapters")
	}
}

// TestLoRARolloutCopyPushesAdapters: update_weights of a LoRA model moves its adapters alone
// once the copy holds the frozen base, and the copy then computes what the trained model does.
func TestLoRARolloutCopyPushesAdapters(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	m := loraModel(t, cfg, LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"q_proj", "down_proj"}})
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := NewRolloutCopy(b, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(batch1(sftBatch(rand.New(rand.NewPCG(2, 2)), cfg, 4, 10))); err != nil {
		t.Fatal(err)
	}
	x, err := rc.Push()
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, p := range m.AdapterParams() {
		want += 4 * int64(shapeSize(p.Shape))
	}
	if x.Tensors != len(m.AdapterParams()) || x.Bytes != want {
		t.Errorf("pushed %d tensors (%d bytes), want the %d adapters (%d bytes)", x.Tensors, x.Bytes, len(m.AdapterParams()), want)
	}
	seqs := randomSeqs(rand.New(rand.NewPCG(3, 3)), cfg.VocabSize, 8)
	score := func(m *Model) []float32 {
		sc, err := NewScorer(b, m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := sc.Score(seqs)
		if err != nil {
			t.Fatal(err)
		}
		return out[0].LogProbs
	}
	if a, c := score(m), score(rc.Model()); !sameBits(a, c) {
		t.Errorf("the copy scores %v, the trained model %v", c, a)
	}
}

// BenchmarkLoRASampling measures what the adapters cost the sampler: the host decoder merges
// them into its weights (a decode step then costs the base model's), the graph decode applies
// them on the fly (two thin products more per projection and step).
//
//	go test ./runtime -run '^$' -bench BenchmarkLoRASampling -benchtime 3x
func BenchmarkLoRASampling(b *testing.B) {
	be := testBackend(b)
	cfg, _ := BuiltinConfig("bench")
	for _, host := range []bool{true, false} {
		for _, rank := range []int{0, 16} {
			name := map[bool]string{true: "host-merged", false: "graph-on-the-fly"}[host]
			if rank == 0 {
				name = map[bool]string{true: "host", false: "graph"}[host] + "-base"
			}
			b.Run(name, func(b *testing.B) {
				m, err := NewModel(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				if rank > 0 {
					if err := m.AddLoRA(LoRAConfig{Rank: rank, Alpha: 32, Targets: []string{LoRAAllLinear}}, 1); err != nil {
						b.Fatal(err)
					}
				}
				s, err := NewSampler(be, m)
				if err != nil {
					b.Fatal(err)
				}
				if host && !s.hostDecode {
					b.Skip("this backend decodes in graphs")
				}
				s.hostDecode = host
				prompts := randomSeqs(rand.New(rand.NewPCG(1, 1)), cfg.VocabSize, 32, 32, 32, 32, 32, 32, 32, 32)
				opt := SampleOptions{MaxNewTokens: 64, Temperature: 1, Seed: 1}
				if _, err := s.Generate(prompts, opt); err != nil { // compile, snapshot
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := s.Generate(prompts, opt); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(8*64*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// TestLoRAOffloadMovesAdapters: offloading a LoRA role moves its adapters and their optimizer
// state, not the frozen base, and training goes on from the same values.
func TestLoRAOffloadMovesAdapters(t *testing.T) {
	b := testBackend(t)
	cfg := smallGQA()
	m := loraModel(t, cfg, LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"v_proj", "up_proj"}})
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), Schedule: Schedule{BaseLR: 1e-2}})
	if err != nil {
		t.Fatal(err)
	}
	mb := sftBatch(rand.New(rand.NewPCG(6, 6)), cfg, 2, 10)
	if _, err := tr.Step(batch1(mb)); err != nil {
		t.Fatal(err)
	}
	sleep, err := m.Offload()
	if err != nil {
		t.Fatal(err)
	}
	// The adapters and AdamW's m and v of each.
	if want := 3 * len(m.AdapterParams()); sleep.Tensors != want {
		t.Errorf("offloaded %d tensors, want the %d of the adapters and their optimizer state", sleep.Tensors, want)
	}
	wake, err := m.Wake(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wake.Tensors != sleep.Tensors {
		t.Errorf("woke %d tensors, offloaded %d", wake.Tensors, sleep.Tensors)
	}
	if _, err := tr.Step(batch1(mb)); err != nil {
		t.Fatal(err)
	}
}
