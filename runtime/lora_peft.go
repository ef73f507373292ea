package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"stx.dev/stx/internal/plainfile"
	"stx.dev/stx/runtime/safetensors"
)

// The adapters of a LoRA model are saved as PEFT saves them, so that PEFT (and vLLM, and
// transformers' load_adapter) open them: adapter_config.json and adapter_model.safetensors
// with the tensor names of a PeftModel's state dict ("base_model.model." + the base model's
// module path + ".lora_A.weight").
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
	peftPrefix         = "base_model.model."
)

// peftConfig is the part of PEFT's LoraConfig that stx reads and writes. Fields that only
// later PEFT versions know (use_dora, lora_bias) are read but never written: PEFT versions
// before 0.11 refuse keys they do not know.
type peftConfig struct {
	PeftType          string         `json:"peft_type"`
	TaskType          string         `json:"task_type"`
	BaseModel         string         `json:"base_model_name_or_path"`
	R                 int            `json:"r"`
	LoraAlpha         float64        `json:"lora_alpha"`
	LoraDropout       float64        `json:"lora_dropout"`
	TargetModules     any            `json:"target_modules"` // a list, or a string ("all-linear")
	Bias              string         `json:"bias"`
	FanInFanOut       bool           `json:"fan_in_fan_out"`
	UseRSLoRA         bool           `json:"use_rslora"`
	UseDoRA           bool           `json:"use_dora,omitempty"`
	LoraBias          bool           `json:"lora_bias,omitempty"`
	InitLoraWeights   any            `json:"init_lora_weights"`
	ModulesToSave     []string       `json:"modules_to_save"`
	InferenceMode     bool           `json:"inference_mode"`
	LayersToTransform any            `json:"layers_to_transform"`
	LayersPattern     any            `json:"layers_pattern"`
	RankPattern       map[string]any `json:"rank_pattern"`
	AlphaPattern      map[string]any `json:"alpha_pattern"`
	Revision          any            `json:"revision"`
}

// SaveAdapters writes the model's adapters to dir in PEFT's layout; base is what
// adapter_config.json names as base_model_name_or_path (the base model's directory or hub id).
// A value head is saved beside them as PEFT saves a module of modules_to_save.
func (m *Model) SaveAdapters(dir, base string) error {
	if m.lora == nil {
		return errors.New("saving adapters: the model has no adapters")
	}
	var ts []safetensors.Tensor
	names := slices.Clone(m.lora.params)
	if m.Config.HasValueHead {
		names = append(names, Param{"score.weight", []int{1, m.Config.Hidden}})
	}
	for _, p := range names {
		data, err := m.ParamValues(p.Name)
		if err != nil {
			return fmt.Errorf("saving adapters: %w", err)
		}
		ts = append(ts, safetensors.FromFloat32(peftPrefix+p.Name, p.Shape, data))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving adapters: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("saving adapters: %w", err)
	}
	c := m.lora.cfg
	init := any(true)
	if c.Init == LoRAInitGaussian {
		init = LoRAInitGaussian
	}
	pc := peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: base, R: c.Rank, LoraAlpha: c.Alpha,
		LoraDropout: c.Dropout, TargetModules: c.Modules(), Bias: "none", UseRSLoRA: c.RSLoRA, InitLoraWeights: init,
		InferenceMode: true, RankPattern: map[string]any{}, AlphaPattern: map[string]any{}}
	if m.Config.HasValueHead {
		pc.TaskType, pc.ModulesToSave = "SEQ_CLS", []string{"score"}
	}
	js, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return fmt.Errorf("saving adapters: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, AdapterConfigFile), append(js, '\n')); err != nil {
		return fmt.Errorf("saving adapters: %w", err)
	}
	return nil
}

// IsAdapterDir says whether dir holds a PEFT adapter (adapter_config.json).
func IsAdapterDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, AdapterConfigFile))
	return err == nil && st.Mode().IsRegular()
}

// ReadAdapterConfig reads a PEFT adapter directory's adapter_config.json: the LoRA
// configuration and the base model it names. Features of PEFT that stx does not compute
// (DoRA, per-layer ranks, fan_in_fan_out, trained biases) are errors, not approximations.
func ReadAdapterConfig(dir string) (LoRAConfig, string, error) {
	raw, err := plainfile.ReadFile(filepath.Join(dir, AdapterConfigFile), maxConfigFile)
	if err != nil {
		return LoRAConfig{}, "", fmt.Errorf("adapter %s: %w", dir, err)
	}
	var pc peftConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return LoRAConfig{}, "", fmt.Errorf("adapter %s: %s: %w", dir, AdapterConfigFile, err)
	}
	bad := func(what string) (LoRAConfig, string, error) {
		return LoRAConfig{}, "", fmt.Errorf("adapter %s: %s: %s is not supported", dir, AdapterConfigFile, what)
	}
	switch {
	case pc.PeftType != "LORA":
		return bad(fmt.Sprintf("peft_type %q (want \"LORA\")", pc.PeftType))
	case pc.UseDoRA:
		return bad("use_dora")
	case pc.FanInFanOut:
		return bad("fan_in_fan_out")
	case pc.Bias != "" && pc.Bias != "none":
		return bad(fmt.Sprintf("bias %q", pc.Bias))
	case len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0:
		return bad("rank_pattern/alpha_pattern")
	case pc.LayersToTransform != nil:
		return bad("layers_to_transform")
	case pc.LoraBias:
		return bad("lora_bias")
	}
	cfg := LoRAConfig{Rank: pc.R, Alpha: pc.LoraAlpha, RSLoRA: pc.UseRSLoRA}
	switch t := pc.TargetModules.(type) {
	case string:
		cfg.Targets = []string{t}
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return bad(fmt.Sprintf("target_modules entry %v", x))
			}
			cfg.Targets = append(cfg.Targets, s)
		}
	default:
		return bad(fmt.Sprintf("target_modules %v", pc.TargetModules))
	}
	if err := cfg.Validate(); err != nil {
		return LoRAConfig{}, "", fmt.Errorf("adapter %s: %w", dir, err)
	}
	return cfg, pc.BaseModel, nil
}

// LoadAdapters reads the adapter weights of a PEFT directory into the model's adapters (and
// its value head, where the file has one), checking names and shapes: every adapter the
// model has must be there, and nothing else.
func (m *Model) LoadAdapters(dir string) error {
	if m.lora == nil {
		return errors.New("loading adapters: the model has no adapters")
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return fmt.Errorf("loading adapters: %w", err)
	}
	seen := map[string]bool{}
	set := func(name string, shape []int, put func([]float32) error) error {
		key := peftPrefix + name
		ts, ok := f.Tensors[key]
		if !ok {
			// PEFT keeps the adapter's name in a few of its paths ("lora_A.default.weight").
			if ts, ok = f.Tensors[strings.Replace(key, ".weight", ".default.weight", 1)]; !ok {
				return fmt.Errorf("loading adapters from %s: no tensor %q", dir, key)
			}
			key = strings.Replace(key, ".weight", ".default.weight", 1)
		}
		seen[key] = true
		if !slices.Equal(ts.Shape, shape) {
			return fmt.Errorf("loading adapters from %s: %s has shape %v, want %v (rank %d)", dir, key, ts.Shape, shape, m.lora.cfg.Rank)
		}
		data, err := ts.Float32s()
		if err != nil {
			return fmt.Errorf("loading adapters from %s: %s: %w", dir, key, err)
		}
		return put(data)
	}
	for _, p := range m.lora.params {
		if err := set(p.Name, p.Shape, func(d []float32) error { return m.SetAdapter(p.Name, d) }); err != nil {
			return err
		}
	}
	if _, ok := f.Tensors[peftPrefix+"score.weight"]; ok && m.Config.HasValueHead {
		if err := set("score.weight", []int{1, m.Config.Hidden}, func(d []float32) error { return m.SetParam("score.weight", d) }); err != nil {
			return err
		}
	}
	for name := range f.Tensors {
		if !seen[name] {
			return fmt.Errorf("loading adapters from %s: unexpected tensor %q (the adapter config targets %s)", dir, name, strings.Join(m.lora.cfg.Modules(), ", "))
		}
	}
	return nil
}

// AttachAdapters gives the model the adapters of a PEFT adapter directory: the configuration
// of its adapter_config.json and the weights of its adapter_model.safetensors (and a value
// head, where the file has one and the model lacks it).
func (m *Model) AttachAdapters(dir string) error {
	cfg, _, err := ReadAdapterConfig(dir)
	if err != nil {
		return err
	}
	heads, err := safetensors.ReadHeader(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return fmt.Errorf("adapter %s: %w", dir, err)
	}
	if _, ok := heads[peftPrefix+"score.weight"]; ok {
		if err := m.AddValueHead(0); err != nil { // the file's head replaces these values
			return err
		}
	}
	if err := m.AddLoRA(cfg, 0); err != nil {
		return fmt.Errorf("adapter %s: %w", dir, err)
	}
	return m.LoadAdapters(dir)
}
