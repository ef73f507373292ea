package specializations

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// realVocabConfig is a small decoder (2 layers, hidden 128) with Qwen2.5's vocabulary of
// 151,936 tokens: the LM head and the teacher's distributions have their real width, while the
// body stays cheap enough to step on 2 cores.
func realVocabConfig() runtime.Config {
	cfg, _ := runtime.BuiltinConfig("tiny")
	cfg.VocabSize, cfg.Hidden, cfg.Intermediate = 151936, 128, 256
	return cfg
}

// BenchmarkRealVocabStep times one optimizer step of 4 short rows at V = 151,936, from the
// rollout to the updated weights: sft (the yardstick), and gkd with the teacher's forward
// pass, its product's trip into the rollout, the batch and the student's step, exactly
// (gkd_teacher_top_k 0) and with the teacher's top 64 (the budget: gkd within 2× of
// sft). cpu_s/op is the process's CPU time per step (steadier than the wall time on a shared
// machine); peak_rss_MiB is its VmHWM: run one sub-benchmark per process to read it.
//
//	go test ./specializations -run '^$' -bench 'RealVocabStep/gkd_exact' -benchtime 2x
func BenchmarkRealVocabStep(b *testing.B) {
	cfg := realVocabConfig()
	opts := BatchOptions{MicroBatchSize: 4, Pad: 256}
	newModel := func(seed uint64) *runtime.Model {
		m, err := runtime.NewModel(cfg, seed)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	train := func(b *testing.B, name string, k schema.Knobs, batches func() []map[string]*tensors.Tensor) {
		s, err := New(RoleConfig{Role: schema.Role{Name: "s", Specialization: name, Trainable: true}, Knobs: k})
		if err != nil {
			b.Fatal(err)
		}
		tr, err := runtime.NewTrainer(testBackend(b), newModel(7), s.(LM).Loss(),
			runtime.TrainerConfig{AdamW: runtime.DefaultAdamW(), Schedule: runtime.Schedule{Kind: "constant", BaseLR: 1e-4}})
		if err != nil {
			b.Fatal(err)
		}
		step := func() {
			if _, err := tr.Step(batches()); err != nil {
				b.Fatal(err)
			}
		}
		step() // compile
		cpu0, steps := cpuSeconds(), 0
		for b.Loop() {
			step()
			steps++
		}
		// The process's CPU time per step: on a shared machine a steadier figure than the
		// wall time, which waits for the cores.
		b.ReportMetric((cpuSeconds()-cpu0)/float64(steps), "cpu_s/op")
		b.ReportMetric(peakRSS(), "peak_rss_MiB")
	}
	b.Run("sft", func(b *testing.B) {
		k := defaultKnobs()
		s, err := New(RoleConfig{Role: schema.Role{Name: "s", Specialization: "sft", Trainable: true}, Knobs: k})
		if err != nil {
			b.Fatal(err)
		}
		train(b, "sft", k, func() []map[string]*tensors.Tensor {
			mbs, err := s.PrepareBatch(lmRollout(4, 1), opts)
			if err != nil {
				b.Fatal(err)
			}
			return mbs
		})
	})
	for _, topK := range []int{0, 64} {
		name := "gkd_exact"
		if topK > 0 {
			name = "gkd_top" + strconv.Itoa(topK)
		}
		b.Run(name, func(b *testing.B) {
			k := defaultKnobs()
			k.GKDTeacherTopK = topK
			student, err := New(RoleConfig{Role: schema.Role{Name: "s", Specialization: "gkd", Trainable: true}, Knobs: k})
			if err != nil {
				b.Fatal(err)
			}
			tspec, err := New(RoleConfig{Role: schema.Role{Name: "t", Specialization: "gkd"}, Knobs: k})
			if err != nil {
				b.Fatal(err)
			}
			teacher, err := NewProducer(testBackend(b), tspec.(LM), newModel(9))
			if err != nil {
				b.Fatal(err)
			}
			train(b, "gkd", k, func() []map[string]*tensors.Tensor {
				data := lmRollout(4, 1)
				if err := teacher.Produce(data, opts, map[string]string{rollout.KeyLogits: rollout.KeyTeacherLogits}); err != nil {
					b.Fatal(err)
				}
				mbs, err := student.PrepareBatch(data, opts)
				if err != nil {
					b.Fatal(err)
				}
				return mbs
			})
		})
	}
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}

// peakRSS is the process's peak resident set (VmHWM) in MiB, 0 where /proc is missing.
func peakRSS() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
