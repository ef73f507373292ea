package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/internal/plainfile"
	"stx.dev/stx/runtime/safetensors"
)

// VelocityModel is the small velocity model of the flow-matching roles (Liu et al., 2022):
// an MLP v_θ(x, σ) over continuous vectors, trained by the same Trainer and saved in the
// same checkpoint format as the language models (it implements Weights).
//
// The model is v = W_out·silu(W_h·silu(W_x·x + W_σ·φ(σ) + b_0) + b_h) + b_out with the
// time features φ(σ) = (σ, sin πσ, cos πσ). The input projections of x and φ(σ) are two
// matmuls rather than one over a concatenation, because Concatenate's gradient needs Slice
// (and so Pad), which SimpleGo lacks. Weights are stored [in, out] (x·W), under the names
// of the formula: w_x, w_sigma, b_0, w_h, b_h, w_out, b_out.
type VelocityModel struct {
	Config VelocityConfig
	ctx    *context.Context
	params []Param
}

// VelocityConfig sizes the MLP.
type VelocityConfig struct {
	Dim    int `json:"dim"`    // dimension of the data vectors x
	Hidden int `json:"hidden"` // width of the two hidden layers
}

// velocityModelType is config.json's model_type of a saved velocity model.
const velocityModelType = "stx_velocity_mlp"

// velocityScope is where the model's variables live in its context.
const velocityScope = "/velocity"

// builtinVelocityConfigs are the velocity models a recipe's model.source can name.
var builtinVelocityConfigs = map[string]VelocityConfig{
	"flow_mlp": {Dim: 2, Hidden: 64}, // the 2-D mixture tasks of the flow recipes
}

// BuiltinVelocityConfig returns the velocity model config of a built-in name ("flow_mlp").
func BuiltinVelocityConfig(name string) (VelocityConfig, bool) {
	c, ok := builtinVelocityConfigs[name]
	return c, ok
}

// NewVelocityModel initialises a model from seed (He-style normal weights, zero biases).
func NewVelocityModel(cfg VelocityConfig, seed uint64) (*VelocityModel, error) {
	if cfg.Dim <= 0 || cfg.Hidden <= 0 {
		return nil, fmt.Errorf("velocity model: dim %d and hidden %d must be > 0", cfg.Dim, cfg.Hidden)
	}
	d, h := cfg.Dim, cfg.Hidden
	m := &VelocityModel{Config: cfg, ctx: context.New(), params: []Param{
		{"w_x", []int{d, h}}, {"w_sigma", []int{3, h}}, {"b_0", []int{h}},
		{"w_h", []int{h, h}}, {"b_h", []int{h}},
		{"w_out", []int{h, d}}, {"b_out", []int{d}},
	}}
	rng := rand.New(rand.NewPCG(seed, 0x564c4f43)) // "VLOC"
	for _, p := range m.params {
		data := make([]float32, shapeSize(p.Shape))
		if len(p.Shape) == 2 {
			std := math.Sqrt(1 / float64(p.Shape[0]))
			for i := range data {
				data[i] = float32(rng.NormFloat64() * std)
			}
		}
		if err := m.SetParam(p.Name, data); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func shapeSize(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Context returns the context holding the model's variables.
func (m *VelocityModel) Context() *context.Context { return m.ctx }

// Params lists the model's tensors in canonical order.
func (m *VelocityModel) Params() []Param { return m.params }

// Variable returns the context variable holding the named tensor, or nil.
func (m *VelocityModel) Variable(name string) *context.Variable {
	return m.ctx.GetVariableByScopeAndName(velocityScope, name)
}

// SetParam sets a tensor's values (row-major, float32), creating its variable if needed.
func (m *VelocityModel) SetParam(name string, data []float32) error {
	return setParamValue(m.params, m.Variable(name), "velocity model", name, data, func(t *tensors.Tensor) {
		m.ctx.InAbsPath(velocityScope).Checked(false).VariableWithValue(name, t)
	})
}

// ParamValues returns a copy of a tensor's values (row-major, float32).
func (m *VelocityModel) ParamValues(name string) ([]float32, error) {
	return variableValues(m.Variable(name), "velocity model", name)
}

// SaveDType is F32: the velocity model is always saved in float32.
func (m *VelocityModel) SaveDType(string) safetensors.DType { return safetensors.F32 }

// SaveHF writes the model as a Hugging Face-style directory: config.json (model_type
// "stx_velocity_mlp", dim, hidden) and model.safetensors (sharded past maxShardBytes when
// positive), float32 tensors under the names of Params.
func (m *VelocityModel) SaveHF(dir string, maxShardBytes int64) error {
	var ts []safetensors.Tensor
	for _, p := range m.params {
		data, err := m.ParamValues(p.Name)
		if err != nil {
			return fmt.Errorf("saving velocity model: %w", err)
		}
		ts = append(ts, safetensors.FromFloat32(p.Name, p.Shape, data))
	}
	if err := safetensors.WriteDir(dir, ts, maxShardBytes); err != nil {
		return fmt.Errorf("saving velocity model: %w", err)
	}
	js, err := json.MarshalIndent(velocityHFConfig{ModelType: velocityModelType, Architectures: []string{"StxVelocityMLP"},
		VelocityConfig: m.Config, TorchDType: "float32"}, "", "  ")
	if err != nil {
		return fmt.Errorf("saving velocity model: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.json"), append(js, '\n')); err != nil {
		return fmt.Errorf("saving velocity model: %w", err)
	}
	return nil
}

// velocityHFConfig is the config.json of a saved velocity model.
type velocityHFConfig struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`
	VelocityConfig
	TorchDType string `json:"torch_dtype"`
}

// LoadWeights replaces m's weights with those of a directory SaveHF wrote for a model of the
// same config: every tensor with its shape, and no other.
func (m *VelocityModel) LoadWeights(dir string) error {
	raw, err := plainfile.ReadFile(filepath.Join(dir, "config.json"), maxConfigFile)
	if err != nil {
		return fmt.Errorf("loading velocity weights: %w", err)
	}
	var cfg velocityHFConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("loading velocity weights: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	if cfg.ModelType != velocityModelType || cfg.VelocityConfig != m.Config {
		return fmt.Errorf("loading velocity weights from %s: model_type %q dim %d hidden %d, want %q dim %d hidden %d",
			dir, cfg.ModelType, cfg.Dim, cfg.Hidden, velocityModelType, m.Config.Dim, m.Config.Hidden)
	}
	heads, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return fmt.Errorf("loading velocity weights from %s: %w", dir, err)
	}
	var extra []string
	for name := range heads {
		if !slices.ContainsFunc(m.params, func(p Param) bool { return p.Name == name }) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return fmt.Errorf("loading velocity weights from %s: unexpected tensors %s", dir, strings.Join(extra, ", "))
	}
	for _, p := range m.params {
		h, ok := heads[p.Name]
		if !ok {
			return fmt.Errorf("loading velocity weights from %s: missing tensor %q", dir, p.Name)
		}
		if !slices.Equal(h.Shape, p.Shape) || h.DType != safetensors.F32 {
			return fmt.Errorf("loading velocity weights from %s: tensor %q is %s%v, want F32%v", dir, p.Name, h.DType, h.Shape, p.Shape)
		}
	}
	ts, err := safetensors.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("loading velocity weights from %s: %w", dir, err)
	}
	for _, p := range m.params {
		data, err := ts[p.Name].Float32s()
		if err != nil {
			return fmt.Errorf("loading velocity weights from %s: tensor %q: %w", dir, p.Name, err)
		}
		if err := m.SetParam(p.Name, data); err != nil {
			return fmt.Errorf("loading velocity weights from %s: %w", dir, err)
		}
	}
	return nil
}

func (m *VelocityModel) weight(ctx *context.Context, g *Graph, name string) *Node {
	v := ctx.GetVariableByScopeAndName(velocityScope, name)
	if v == nil {
		panic(fmt.Errorf("velocity model: variable %q not found", name))
	}
	return graphValue(v, g) // under FSDP, the weight gathered from the devices' shards (fsdp.go)
}

func silu(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// Forward returns v_θ(x, σ): x [N, Dim] (float32), sigma [N] → [N, Dim].
func (m *VelocityModel) Forward(ctx *context.Context, x, sigma *Node) *Node {
	g := x.Graph()
	n := x.Shape().Dimensions[0]
	s := Reshape(ConvertDType(sigma, x.DType()), n, 1)
	pi := Scalar(g, x.DType(), math.Pi)
	// The three time features, each [N, 1], each projected by one row of w_sigma; the rows
	// are picked with one-hot matmuls (no Slice on a differentiated path).
	wS := m.weight(ctx, g, "w_sigma")
	feat := Add(Add(Mul(s, rowOf(wS, 0)), Mul(Sin(Mul(s, pi)), rowOf(wS, 1))), Mul(Cos(Mul(s, pi)), rowOf(wS, 2)))
	bias := func(name string) *Node { return InsertAxes(m.weight(ctx, g, name), 0) } // [1, H] broadcasts over N
	h := silu(Add(Add(Dot(x, m.weight(ctx, g, "w_x")), feat), bias("b_0")))
	h = silu(Add(Dot(h, m.weight(ctx, g, "w_h")), bias("b_h")))
	return Add(Dot(h, m.weight(ctx, g, "w_out")), bias("b_out"))
}

// rowOf returns row i of w [3, H] as [1, H] through a one-hot product.
func rowOf(w *Node, i int) *Node {
	oh := make([]float32, w.Shape().Dimensions[0])
	oh[i] = 1
	return Dot(Const(w.Graph(), tensors.FromFlatDataAndDimensions(oh, 1, len(oh))), w)
}
