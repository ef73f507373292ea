package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"stx.dev/stx/runtime/safetensors"
)

// Checkpoint file names inside a checkpoint directory (besides the model's HF files).
const (
	optimizerFile = "optimizer.safetensors"
	stateFile     = "state.json"
)

// checkpointState is state.json: the trainer's counters and the caller's RNG state.
type checkpointState struct {
	Format    string   `json:"format"`
	Step      int      `json:"step"`
	AdamSteps int      `json:"adam_steps"`
	Schedule  Schedule `json:"schedule"`
	RNG       []byte   `json:"rng,omitempty"` // base64 in JSON
}

const checkpointFormat = "stx-checkpoint-v1"

// masterPrefix names the float32 copies of weights that the model directory holds narrower.
const masterPrefix = "master."

// SaveCheckpoint writes the model (Hugging Face layout), the optimizer state (AdamW moments),
// the step counters and rng (the caller's serialised RNG state, e.g. from rand.PCG.MarshalBinary)
// to dir. Everything is written into a temporary sibling directory that is renamed onto dir,
// so a crash leaves either the old checkpoint or the new one, never a mix.
func (t *Trainer) SaveCheckpoint(dir string, rng []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	// A LoRA model saves its adapters alone, in PEFT's layout: the base is frozen, and opens
	// from where it came from.
	lm, lora := t.m.(*Model)
	lora = lora && lm.lora != nil
	if lora {
		if err := lm.SaveAdapters(tmp, lm.adapterBase()); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	} else if err := t.m.SaveHF(tmp, 0); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var opt []safetensors.Tensor
	// The file is written one tensor at a time (safetensors.Encode fills each tensor just
	// before writing it), so one encode buffer serves every float32 tensor: no fresh
	// allocation, and no fresh pages to fault in, per tensor.
	var scratch []byte
	for i := range t.trainVar {
		name := t.paramName(i)
		for _, kind := range []struct {
			prefix string
			vars   []*context.Variable
		}{{"exp_avg.", t.mVar}, {"exp_avg_sq.", t.vVar}} {
			// Read and encoded as the file is written, one tensor at a time (at real sizes the
			// moments are twice the weights); in the parameter's shape, also when the trainer
			// shards it (fsdp.go).
			shape := t.trainVar[i].Shape().Dimensions
			opt = append(opt, safetensors.Tensor{Name: kind.prefix + name, DType: safetensors.F32, Shape: shape,
				Fill: func() ([]byte, error) {
					if t.dp.fsdpOrNil() == nil { // encoded straight from the variable's tensor
						return float32Bytes(&scratch, kind.vars[i], "optimizer state", kind.prefix+name, shape)
					}
					data, err := t.stateValues(i, kind.vars[i])
					if err != nil {
						return nil, fmt.Errorf("optimizer state of %s: %w", name, err)
					}
					return safetensors.FromFloat32(kind.prefix+name, shape, data).Data, nil
				}})
		}
	}
	// A model saved in a narrower dtype than float32 (a bf16 checkpoint stays bf16) keeps its
	// float32 master weights here, so that resuming continues from the exact weights.
	for _, p := range t.m.Params() {
		if lora || t.m.SaveDType(p.Name) == safetensors.F32 {
			continue
		}
		opt = append(opt, safetensors.Tensor{Name: masterPrefix + p.Name, DType: safetensors.F32, Shape: p.Shape,
			Fill: func() ([]byte, error) {
				return float32Bytes(&scratch, t.m.Variable(p.Name), "model", p.Name, p.Shape)
			}})
	}
	if err := safetensors.WriteFile(filepath.Join(tmp, optimizerFile), opt, map[string]string{"format": checkpointFormat}); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	js, err := json.MarshalIndent(checkpointState{Format: checkpointFormat, Step: t.step, AdamSteps: t.adamSteps,
		Schedule: t.cfg.Schedule, RNG: rng}, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(tmp, stateFile), append(js, '\n')); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// Swap the new directory in: move any old one aside first (rename cannot replace a
	// non-empty directory), then drop it.
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			_ = os.Rename(old, dir)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	if old != "" {
		_ = os.RemoveAll(old)
	}
	return nil
}

// LoadCheckpoint restores the model weights, the optimizer state and the step counters from a
// directory written by SaveCheckpoint, and returns the saved RNG state. The schedule saved
// with the checkpoint is restored too (SetSchedule may override it afterwards).
func (t *Trainer) LoadCheckpoint(dir string) (rng []byte, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var st checkpointState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if st.Format == "stx-velocity-v1" {
		// Flow roles had a trainer and checkpoint format of their own before they shared
		// this one; those checkpoints lack config.json and the schedule, and are not read.
		return nil, fmt.Errorf("checkpoint %s: format %q is that of an earlier stx's velocity trainer, which this version does not read: start the run again", dir, st.Format)
	}
	if st.Format != checkpointFormat {
		return nil, fmt.Errorf("checkpoint %s: format %q, want %q", dir, st.Format, checkpointFormat)
	}
	// The counters drive the schedule and AdamW's bias correction: a
	// damaged state.json must fail here, not as a NaN steps later.
	if st.Step < 0 || st.AdamSteps < 0 || st.AdamSteps > st.Step {
		return nil, fmt.Errorf("checkpoint %s: %s: step %d, adam_steps %d: want 0 ≤ adam_steps ≤ step", dir, stateFile, st.Step, st.AdamSteps)
	}
	if err := st.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s: %w", dir, stateFile, err)
	}
	if lm, ok := t.m.(*Model); ok && lm.lora != nil {
		if err := lm.LoadAdapters(dir); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	} else if err := t.m.LoadWeights(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	for _, p := range t.m.Params() {
		if ts, ok := f.Tensors[masterPrefix+p.Name]; ok {
			if !slices.Equal(ts.Shape, p.Shape) || ts.DType != safetensors.F32 {
				return nil, fmt.Errorf("checkpoint %s: master weights %s are %s%v, want F32%v", dir, p.Name, ts.DType, ts.Shape, p.Shape)
			}
			data, err := ts.Float32s()
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
			}
			if err := t.m.SetParam(p.Name, data); err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
			}
		}
	}
	for i := range t.trainVar {
		name := t.paramName(i)
		for _, kind := range []struct {
			prefix string
			vars   []*context.Variable
		}{{"exp_avg.", t.mVar}, {"exp_avg_sq.", t.vVar}} {
			ts, ok := f.Tensors[kind.prefix+name]
			if !ok {
				return nil, fmt.Errorf("checkpoint %s: optimizer state lacks %s%s", dir, kind.prefix, name)
			}
			v, want := kind.vars[i], t.trainVar[i].Shape().Dimensions
			if !slices.Equal(ts.Shape, want) || ts.DType != safetensors.F32 {
				return nil, fmt.Errorf("checkpoint %s: optimizer tensor %s%s is %s%v, want F32%v", dir, kind.prefix, name, ts.DType, ts.Shape, want)
			}
			data, err := ts.Float32s()
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
			}
			if err := t.setStateValues(i, v, data); err != nil { // sharded again under FSDP
				return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
			}
		}
	}
	t.resetAccumulators()
	t.step, t.adamSteps, t.cfg.Schedule = st.Step, st.AdamSteps, st.Schedule
	return st.RNG, nil
}
