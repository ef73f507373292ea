package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// LoRA (low-rank adaptation): each targeted projection W [out, in] of the decoder layers gets
// two adapter matrices, A [r, in] and B [out, r], and computes x·Wᵀ + s·(x·Aᵀ)·Bᵀ with
// s = alpha/r (alpha/√r with rsLoRA). Only A and B train (and a value head, which a new
// scalar head needs); the base weights stay frozen, so the optimizer holds state for the
// adapters alone. The adapters are variables of the model's context, named like the base
// tensor with lora_A/lora_B in place of the last component
// ("model.layers.0.self_attn.q_proj.lora_A.weight"), which is PEFT's name without its
// "base_model.model." prefix.

// LoRAModules are the projections LoRA can target, by their Hugging Face module names.
var LoRAModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// LoRAAllLinear is the target that stands for every projection of the decoder layers (as
// PEFT's "all-linear", which leaves the output head out).
const LoRAAllLinear = "all-linear"

// LoRA initialisations of A (B starts at zero, so an initialised adapter changes nothing).
const (
	// LoRAInitKaiming draws A uniformly in ±1/√in: PyTorch's kaiming_uniform_ with a = √5,
	// what PEFT's init_lora_weights=True does.
	LoRAInitKaiming = "kaiming"
	// LoRAInitGaussian draws A from N(0, 1/r), PEFT's init_lora_weights="gaussian".
	LoRAInitGaussian = "gaussian"
)

// LoRAConfig describes a model's adapters.
type LoRAConfig struct {
	Rank    int
	Alpha   float64
	Dropout float64  // PEFT's lora_dropout, in training only (lora_dropout.go)
	Targets []string // module names of LoRAModules, or LoRAAllLinear
	Init    string   // LoRAInitKaiming ("" too) or LoRAInitGaussian
	RSLoRA  bool     // scale alpha/√r instead of alpha/r
	// BaseDType is the dtype the frozen base's matrices are held in: LoRABaseStored (""),
	// LoRABaseBFloat16 or LoRABaseFloat32 (lora_base.go).
	BaseDType string
}

// Validate checks the configuration.
func (c LoRAConfig) Validate() error {
	if c.Rank <= 0 {
		return fmt.Errorf("lora: rank %d: want > 0", c.Rank)
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
		return fmt.Errorf("lora: alpha %v: want a finite value > 0", c.Alpha)
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		return fmt.Errorf("lora: dropout %v: want 0 ≤ dropout < 1", c.Dropout)
	}
	if len(c.Targets) == 0 {
		return errors.New("lora: no targets: name modules among " + strings.Join(LoRAModules, ", ") + " or \"all-linear\"")
	}
	for _, t := range c.Targets {
		if t != LoRAAllLinear && !slices.Contains(LoRAModules, t) {
			return fmt.Errorf("lora: target %q: want one of %s or %q", t, strings.Join(LoRAModules, ", "), LoRAAllLinear)
		}
	}
	switch c.Init {
	case "", LoRAInitKaiming, LoRAInitGaussian:
	default:
		return fmt.Errorf("lora: init %q: want %q or %q", c.Init, LoRAInitKaiming, LoRAInitGaussian)
	}
	switch c.BaseDType {
	case LoRABaseStored, LoRABaseBFloat16, LoRABaseFloat32:
	default:
		return fmt.Errorf("lora: base_dtype %q: want %q or %q (absent: the stored dtype)", c.BaseDType, LoRABaseBFloat16, LoRABaseFloat32)
	}
	return nil
}

// Scale is the factor of the adapters' product: alpha/r, or alpha/√r with rsLoRA.
func (c LoRAConfig) Scale() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// Modules returns the targeted module names in LoRAModules order (all-linear expanded).
func (c LoRAConfig) Modules() []string {
	var out []string
	for _, m := range LoRAModules {
		if slices.Contains(c.Targets, m) || slices.Contains(c.Targets, LoRAAllLinear) {
			out = append(out, m)
		}
	}
	return out
}

// loraState is a model's adapters.
type loraState struct {
	cfg     LoRAConfig
	scale   float64
	modules map[string]bool // targeted module names ("q_proj", ...)
	params  []Param         // A and B of every targeted projection, layer by layer
	base    string          // base_model_name_or_path of saved adapters ("": the model's source)
	seed    uint64          // AddLoRA's seed, which also keys the dropout masks
}

// SetAdapterBase sets what saved adapters name as their base model (a directory or hub id);
// by default the directory the model was loaded from.
func (m *Model) SetAdapterBase(base string) {
	if m.lora != nil {
		m.lora.base = base
	}
}

// adapterBase is base_model_name_or_path of the model's saved adapters.
func (m *Model) adapterBase() string {
	if m.lora != nil && m.lora.base != "" {
		return m.lora.base
	}
	return m.source
}

// moduleKind is the module name of a projection's prefix ("model.layers.3.mlp.up_proj" →
// "up_proj").
func moduleKind(module string) string { return module[strings.LastIndexByte(module, '.')+1:] }

// adapted says whether graphs of this Model value apply an adapter to the projection module.
func (m *Model) adapted(module string) bool {
	return m.lora != nil && !m.adaptersOff && m.lora.modules[moduleKind(module)]
}

// project applies the projection module (its tensor module+".weight", found by w) to x, plus
// its adapter's s·(x·Aᵀ)·Bᵀ when adapted: the low-rank path never forms B·A, so it costs
// 2·r·(in+out) per row, not in·out.
func (m *Model) project(x *Node, w func(string) *Node, module string) *Node {
	y := m.linear(x, w(module+".weight"))
	if !m.adapted(module) {
		return y
	}
	low := m.linear(m.adapterInput(x, module), w(module+".lora_A.weight")) // [..., r]
	return Add(y, MulScalar(m.linear(low, w(module+".lora_B.weight")), m.lora.scale))
}

// projectionShape returns the [out, in] shape of a decoder layer's projection module kind.
func (c Config) projectionShape(kind string) (out, in int) {
	kv := c.KVHeads * c.HeadDim()
	switch kind {
	case "q_proj":
		return c.QDim(), c.Hidden
	case "k_proj", "v_proj":
		return kv, c.Hidden
	case "o_proj":
		return c.Hidden, c.QDim()
	case "gate_proj", "up_proj":
		return c.Intermediate, c.Hidden
	case "down_proj":
		return c.Hidden, c.Intermediate
	}
	panic(fmt.Errorf("not a projection: %q", kind))
}

// moduleOf returns the module prefix of layer l's projection kind.
func moduleOf(l int, kind string) string {
	if kind == "gate_proj" || kind == "up_proj" || kind == "down_proj" {
		return fmt.Sprintf("model.layers.%d.mlp.%s", l, kind)
	}
	return fmt.Sprintf("model.layers.%d.self_attn.%s", l, kind)
}

// adapterParamList lists the adapters of cfg on a model of config c.
func adapterParamList(c Config, cfg LoRAConfig) []Param {
	var ps []Param
	for l := range c.Layers {
		for _, kind := range cfg.Modules() {
			out, in := c.projectionShape(kind)
			mod := moduleOf(l, kind)
			ps = append(ps, Param{mod + ".lora_A.weight", []int{cfg.Rank, in}}, Param{mod + ".lora_B.weight", []int{out, cfg.Rank}})
		}
	}
	return ps
}

// AddLoRA gives the model adapters of cfg, initialised from seed (A random as cfg.Init says,
// B zero), and freezes the base weights: a trainer built afterwards trains the adapters (and
// a value head, if the model has one: a new scalar head must learn, as PEFT's
// modules_to_save does for a classifier). A model has one set of adapters.
func (m *Model) AddLoRA(cfg LoRAConfig, seed uint64) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if m.lora != nil {
		return errors.New("lora: the model already has adapters")
	}
	st := &loraState{cfg: cfg, scale: cfg.Scale(), modules: map[string]bool{}, params: adapterParamList(m.Config, cfg), seed: seed}
	for _, k := range cfg.Modules() {
		st.modules[k] = true
	}
	rng := rand.New(rand.NewPCG(seed, 0x5354585f4c4f5241)) // "STX_LORA"
	for _, p := range st.params {
		data := make([]float32, shapeSize(p.Shape))
		if strings.HasSuffix(p.Name, ".lora_A.weight") {
			r, in := p.Shape[0], p.Shape[1]
			if cfg.Init == LoRAInitGaussian {
				std := 1 / float64(r)
				for i := range data {
					data[i] = float32(rng.NormFloat64() * std)
				}
			} else {
				bound := 1 / math.Sqrt(float64(in))
				for i := range data {
					data[i] = float32((2*rng.Float64() - 1) * bound)
				}
			}
		}
		m.setAdapterVar(p, data)
	}
	for _, p := range m.params {
		m.Variable(p.Name).SetTrainable(p.Name == "score.weight")
	}
	m.lora = st
	return m.holdBase(cfg.BaseDType)
}

// setAdapterVar sets (creating it if needed) the variable of adapter p, trainable.
func (m *Model) setAdapterVar(p Param, data []float32) {
	t := tensors.FromFlatDataAndDimensions(data, p.Shape...)
	if v := m.Variable(p.Name); v != nil {
		_ = v.SetValue(t) // shapes match by construction; SetValue fails only on shape
		return
	}
	scope, vn := m.variableScope(p.Name)
	m.ctx.InAbsPath(scope).Checked(false).VariableWithValue(vn, t).SetTrainable(true)
}

// SetAdapter sets an adapter tensor's values (row-major, float32).
func (m *Model) SetAdapter(name string, data []float32) error {
	if m.lora == nil {
		return errors.New("lora: the model has no adapters")
	}
	i := slices.IndexFunc(m.lora.params, func(p Param) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("lora: the model has no adapter %q", name)
	}
	p := m.lora.params[i]
	if len(data) != shapeSize(p.Shape) {
		return fmt.Errorf("lora: adapter %q: %d values for shape %v", name, len(data), p.Shape)
	}
	m.setAdapterVar(p, data)
	return nil
}

// LoRA returns the model's adapter configuration, or nil without adapters.
func (m *Model) LoRA() *LoRAConfig {
	if m.lora == nil {
		return nil
	}
	c := m.lora.cfg
	return &c
}

// AdapterParams lists the model's adapter tensors (nil without adapters), in a fixed order.
func (m *Model) AdapterParams() []Param {
	if m.lora == nil {
		return nil
	}
	return m.lora.params
}

// activeAdapterParams are the adapters graphs of this Model value read.
func (m *Model) activeAdapterParams() []Param {
	if m.adaptersOff {
		return nil
	}
	return m.AdapterParams()
}

// WithoutAdapters returns the model as it computes with its adapters switched off: the same
// variables (no copy of any weight), graphs built through it ignore the adapters. It is the
// frozen reference of a LoRA role, the initial policy, as TRL and verl compute it. Without
// adapters it returns m.
func (m *Model) WithoutAdapters() *Model {
	if m.lora == nil {
		return m
	}
	off := *m
	off.adaptersOff = true
	return &off
}

// trainableParams lists the tensors of w a trainer may train: the base tensors, then the
// adapters of a LoRA model.
func trainableParams(w Weights) []Param {
	m, ok := w.(*Model)
	if !ok || m.lora == nil {
		return w.Params()
	}
	return append(slices.Clip(m.Params()), m.lora.params...)
}

// mergedProjection returns W + s·B·A of the projection module ([out, in] row-major) given W's
// values w, or w itself when the module has no active adapter. The product is accumulated in
// float64 and rounded once.
func (m *Model) mergedProjection(module string, w []float32) ([]float32, error) {
	if !m.adapted(module) {
		return w, nil
	}
	a, err := m.ParamValues(module + ".lora_A.weight")
	if err != nil {
		return nil, err
	}
	b, err := m.ParamValues(module + ".lora_B.weight")
	if err != nil {
		return nil, err
	}
	r := m.lora.cfg.Rank
	out, in := len(b)/r, len(a)/r
	if out*in != len(w) {
		return nil, fmt.Errorf("lora: %s: adapters [%d,%d]·[%d,%d] for a weight of %d values", module, out, r, r, in, len(w))
	}
	merged := make([]float32, len(w))
	acc := make([]float64, in)
	for o := range out {
		clear(acc)
		for k := range r {
			bk := float64(b[o*r+k])
			if bk == 0 {
				continue
			}
			for i, av := range a[k*in : (k+1)*in] {
				acc[i] += bk * float64(av)
			}
		}
		for i := range in {
			merged[o*in+i] = float32(float64(w[o*in+i]) + m.lora.scale*acc[i])
		}
	}
	return merged, nil
}

// MergedModel returns a new model (own context, no adapters) whose projections are W + s·B·A:
// the model the adapters make, for saving as a plain Hugging Face directory.
func (m *Model) MergedModel() (*Model, error) {
	out := newEmptyModel(context.New(), "", m.Config)
	out.source, out.sourceConfig, out.dtypes = m.source, m.sourceConfig, m.dtypes
	out.ComputeDType, out.HeadChunkRows, out.ActivationCheckpointing = m.ComputeDType, m.HeadChunkRows, m.ActivationCheckpointing
	for _, p := range m.params {
		w, err := m.ParamValues(p.Name)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(p.Name, ".weight") {
			if w, err = m.mergedProjection(strings.TrimSuffix(p.Name, ".weight"), w); err != nil {
				return nil, err
			}
		}
		if err := out.SetParam(p.Name, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}
