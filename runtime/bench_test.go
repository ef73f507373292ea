package runtime

import (
	"testing"
)

// BenchmarkRuntime runs the bench model's measurements once per iteration and reports them.
// go test -run ^$ -bench Runtime -benchtime 1x ./runtime/
func BenchmarkRuntime(b *testing.B) {
	be := testBackend(b)
	cfg, _ := BuiltinConfig("bench")
	m, err := NewModel(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ms, err := Bench(be, m, BenchOptions{Runs: 1})
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range ms {
			b.ReportMetric(x.TokensPerS, x.Name+"_tok/s")
			b.ReportMetric(x.GFLOPs, x.Name+"_GFLOP/s")
		}
	}
}

// BenchmarkTinyTrainStep measures the tiny config's training throughput (batch 8 × 128).
func BenchmarkTinyTrainStep(b *testing.B) { benchTinyTrainStep(b, false) }

// BenchmarkTinyTrainStepAfterHostRead is BenchmarkTinyTrainStep with every weight read on the
// host between steps, as host decoding does before each rollout: the reads must not cost the
// step its donated buffers (compare B/op with BenchmarkTinyTrainStep).
func BenchmarkTinyTrainStepAfterHostRead(b *testing.B) { benchTinyTrainStep(b, true) }

// benchTinyTrainStep times SFT steps of the tiny model, with the host decoder loading the
// weights before each one when hostRead is set.
func benchTinyTrainStep(b *testing.B, hostRead bool) {
	be := testBackend(b)
	cfg, _ := BuiltinConfig("tiny")
	m, err := NewModel(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTrainer(be, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1, Schedule: Schedule{BaseLR: 1e-3}})
	if err != nil {
		b.Fatal(err)
	}
	batch := sftBatch(newTestRand(), cfg, 8, 128)
	if _, err := tr.Step(batch1(batch)); err != nil { // compile
		b.Fatal(err)
	}
	var d *hostDecoder
	if hostRead {
		if d, err = newHostDecoder(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d != nil {
			if err := d.load(m); err != nil { // the new weights, into the snapshot's buffers
				b.Fatal(err)
			}
		}
		if _, err := tr.Step(batch1(batch)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8*128*b.N)/b.Elapsed().Seconds(), "tok/s")
}
