package runtime

import (
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// uploadCounter wraps a backend and records every host-to-backend copy GoMLX asks of it: a
// tensor held only in host memory is copied by BufferFromFlatData (when donated) or into a
// NewSharedBuffer (when only read).
type uploadCounter struct {
	backends.Backend
	mu      sync.Mutex
	uploads []shapes.Shape
}

func (u *uploadCounter) BufferFromFlatData(dev backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	u.record(shape)
	return u.Backend.BufferFromFlatData(dev, flat, shape)
}

func (u *uploadCounter) NewSharedBuffer(dev backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error) {
	u.record(shape)
	return u.Backend.NewSharedBuffer(dev, shape)
}

func (u *uploadCounter) record(s shapes.Shape) {
	u.mu.Lock()
	u.uploads = append(u.uploads, s)
	u.mu.Unlock()
}

// take returns the uploads recorded since the last call.
func (u *uploadCounter) take() []shapes.Shape {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.uploads
	u.uploads = nil
	return out
}

// TestStateStaysOnBackend: after the first train step (which moves the freshly initialised
// weights and optimizer state onto the backend), a step uploads only its batch and the three
// scalars of the update, even when the host reads the weights between steps as a training
// loop does (host decoding for rollouts, scoring, weight reads, a checkpoint); and those
// upload no weight either.
func TestStateStaysOnBackend(t *testing.T) {
	u := &uploadCounter{Backend: testBackend(t).Backend}
	b := &Backend{Backend: u, Spec: "test"}
	cfg, _ := BuiltinConfig("tiny")
	m, err := NewModel(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(b, m, sftLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1,
		Schedule: Schedule{Kind: "constant", BaseLR: 1e-3}})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := NewSampler(b, m)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	// The state's shapes: an upload of one of them after the first step is the bug.
	state := map[string]bool{}
	for _, p := range m.Params() {
		state[shapes.Make(m.Variable(p.Name).Shape().DType, p.Shape...).String()] = true
	}
	seqs := randomSeqs(rng, cfg.VocabSize, 9, 17, 5)
	for step := range 3 {
		batch := sftBatch(rng, cfg, 4, 32) // new host tensors each step, as a training loop's
		batchBytes := 3 * 4                // plus lr and the two bias corrections, float32 scalars
		for _, x := range batch {
			batchBytes += int(x.Memory())
		}
		if _, err := tr.Step(batch1(batch)); err != nil {
			t.Fatal(err)
		}
		// The first step moves the initial weights and optimizer state; later ones must not.
		if ups := u.take(); step > 0 && bytesOf(ups) != batchBytes {
			t.Errorf("step %d uploaded %d bytes %v, want only the batch's %d", step, bytesOf(ups), ups, batchBytes)
		}
		// What a loop does between steps.
		if _, err := sampler.Generate([][]int32{seqs[0][:3], seqs[1][:4]}, SampleOptions{MaxNewTokens: 4, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := sc.Score(seqs); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.ParamValues("model.norm.weight"); err != nil {
			t.Fatal(err)
		}
		if err := tr.SaveCheckpoint(filepath.Join(t.TempDir(), "ckpt"), nil); err != nil {
			t.Fatal(err)
		}
		for _, s := range u.take() {
			if state[s.String()] {
				t.Errorf("sampling, scoring or a checkpoint after step %d uploaded a %s (a weight's shape)", step, s)
			}
		}
	}
}

func bytesOf(ss []shapes.Shape) int {
	n := 0
	for _, s := range ss {
		n += int(s.Memory())
	}
	return n
}
