package velocity

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/runtime/safetensors"
)

// Checkpoint files of a velocity role, beside the language-model roles' files of
// the same names: the weights, the Adam moments and the step counter.
const (
	ModelFile     = "model.safetensors"
	OptimizerFile = "optimizer.safetensors"
	StateFile     = "state.json"
)

// stateFormat marks a velocity trainer's state.json (a language-model
// trainer's state.json has another format and is refused).
const stateFormat = "stx-velocity-v1"

type trainerState struct {
	Format string  `json:"format"`
	Steps  int     `json:"steps"`
	LR     float64 `json:"lr"`
}

// Save writes the model's weights to dir/model.safetensors (float32, the
// variable names as tensor names).
func (m *Model) Save(dir string) error {
	ts, err := varTensors(names("", m.vars), m.vars)
	if err != nil {
		return fmt.Errorf("velocity model: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("velocity model: %w", err)
	}
	return safetensors.WriteFile(filepath.Join(dir, ModelFile), ts, map[string]string{"format": "pt"})
}

// Load replaces the model's weights with those of dir/model.safetensors,
// which must hold every variable with its shape.
func (m *Model) Load(dir string) error {
	f, err := safetensors.ReadFile(filepath.Join(dir, ModelFile))
	if err != nil {
		return fmt.Errorf("velocity model: %w", err)
	}
	return setVars(f.Tensors, names("", m.vars), m.vars)
}

// SaveState writes the Adam moments (optimizer.safetensors: exp_avg.<name>
// and exp_avg_sq.<name>, as the language-model trainer names them) and the
// step counter and learning rate (state.json) to dir. The weights are the
// model's (Model.Save). Called between steps, when the gradient
// accumulators are zero, so they need no saving.
func (t *Trainer) SaveState(dir string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, err := varTensors(names("exp_avg.", t.m.vars), t.mom)
	if err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	v, err := varTensors(names("exp_avg_sq.", t.m.vars), t.vel)
	if err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, OptimizerFile), append(m, v...), nil); err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	data, err := json.Marshal(trainerState{Format: stateFormat, Steps: t.steps, LR: t.opt.LR})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, StateFile), data, 0o644)
}

// LoadState restores what SaveState wrote: the Adam moments, the step
// counter (the bias correction continues where it was) and the learning rate.
func (t *Trainer) LoadState(dir string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	raw, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	var st trainerState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("velocity trainer state %s: %w", dir, err)
	}
	if st.Format != stateFormat {
		return fmt.Errorf("velocity trainer state %s: format %q, want %q", dir, st.Format, stateFormat)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, OptimizerFile))
	if err != nil {
		return fmt.Errorf("velocity trainer state: %w", err)
	}
	if err := setVars(f.Tensors, names("exp_avg.", t.m.vars), t.mom); err != nil {
		return err
	}
	if err := setVars(f.Tensors, names("exp_avg_sq.", t.m.vars), t.vel); err != nil {
		return err
	}
	t.steps, t.opt.LR = st.Steps, st.LR
	return nil
}

// names are prefix + the model variables' names: the checkpoint names of
// the weights ("") or of their Adam moments ("exp_avg.", "exp_avg_sq.").
func names(prefix string, vars []*context.Variable) []string {
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = prefix + v.Name()
	}
	return out
}

// varTensors copies variables to float32 safetensors tensors of the given names.
func varTensors(names []string, vars []*context.Variable) ([]safetensors.Tensor, error) {
	var out []safetensors.Tensor
	for i, v := range vars {
		val, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", names[i], err)
		}
		data, err := tensors.CopyFlatData[float32](val)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", names[i], err)
		}
		out = append(out, safetensors.FromFloat32(names[i], v.Shape().Dimensions, data))
	}
	return out, nil
}

// setVars sets each variable from the tensor of its name in ts.
func setVars(ts map[string]safetensors.Tensor, names []string, vars []*context.Variable) error {
	for i, v := range vars {
		name := names[i]
		t, ok := ts[name]
		if !ok {
			return fmt.Errorf("velocity checkpoint: no tensor %q", name)
		}
		if !slices.Equal(t.Shape, v.Shape().Dimensions) || t.DType != safetensors.F32 {
			return fmt.Errorf("velocity checkpoint: tensor %q is %s%v, want F32%v", name, t.DType, t.Shape, v.Shape().Dimensions)
		}
		data, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("velocity checkpoint: tensor %q: %w", name, err)
		}
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(data, t.Shape...)); err != nil {
			return fmt.Errorf("velocity checkpoint: tensor %q: %w", name, err)
		}
	}
	return nil
}
