package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"stx.dev/stx/runtime/safetensors"
)

// maskValue is the additive attention bias of masked keys: large enough to zero their softmax
// weight in float32, finite so that a fully masked row never produces NaN.
const maskValue = -1e9

// Param is one named model tensor, named as in a Hugging Face checkpoint.
type Param struct {
	Name  string // e.g. "model.layers.0.self_attn.q_proj.weight"
	Shape []int  // e.g. [out, in] for projections
}

// Model is one Llama/Qwen2-family decoder whose weights are variables of a GoMLX context.
// Several models may share a context under different scopes (a policy and its frozen reference
// in one graph); graph functions take the context they run with and find the weights there.
type Model struct {
	Config Config
	ctx    *context.Context
	scope  string // absolute scope prefix of the model's variables, "" for the root
	params []Param
	// source is the Hugging Face directory the model was loaded from ("" if none), and
	// sourceConfig its config.json: SaveHF keeps the fields this package does not model and
	// copies the tokenizer files, so a saved model opens in other tools like the original.
	source       string
	sourceConfig map[string]any
	// dtypes holds the file dtype of each tensor loaded from safetensors, which SaveHF writes
	// back (a bf16 checkpoint stays bf16); nil for a new model (float32).
	dtypes map[string]safetensors.DType
	// HeadChunkRows is the number of rows (positions) whose logits Head and TokenLogProbs
	// compute at a time; 0 sizes chunks for the vocabulary (LogitChunkRows). Graphs built
	// afterwards use it.
	HeadChunkRows int
	// ActivationCheckpointing keeps only each decoder layer's input for the backward pass of a
	// training graph and recomputes the layer's activations there (Checkpoint): about one
	// more forward pass of compute for activations that no longer grow with the layer's width.
	// Graphs built afterwards use it.
	ActivationCheckpointing bool
	// ComputeDType is the dtype the model's matrix products compute in (mixed precision,
	// recipe field model.dtype): BFloat16 converts both operands of every product (projections,
	// attention's two products, the LM and value heads) to bfloat16, multiplies in bfloat16
	// with float32 accumulation, and converts the product back to float32 at once, as PyTorch's
	// autocast does; norms, softmax, residuals and losses stay float32, and so do the weights
	// (the master copy the optimizer updates), their gradients, the optimizer's state and the
	// checkpoints. InvalidDType (the zero value) or Float32 computes everything in float32.
	// Scorers, trainers and samplers built afterwards use it, the host decoder included.
	ComputeDType dtypes.DType
	// lora holds the model's low-rank adapters (nil without; see AddLoRA), and adaptersOff
	// makes graphs built through this Model value compute with the base weights alone: the
	// frozen reference of a LoRA role is the same variables with adapters off
	// (WithoutAdapters), not a second copy of the weights.
	lora        *loraState
	adaptersOff bool
	// dropping marks a trainer's view of a model with adapter dropout, and dropDraw is the
	// dropout counter of the graph being built through it (lora_dropout.go).
	dropping bool
	dropDraw *Node
}

// ParseComputeDType maps a recipe's model.dtype to a ComputeDType: "float32" (or "") and
// "bfloat16".
func ParseComputeDType(name string) (dtypes.DType, error) {
	switch name {
	case "", "float32":
		return dtypes.Float32, nil
	case "bfloat16":
		return dtypes.BFloat16, nil
	}
	return dtypes.InvalidDType, fmt.Errorf("compute dtype %q: want \"float32\" or \"bfloat16\"", name)
}

// computeDType is ComputeDType, Float32 when unset.
func (m *Model) computeDType() dtypes.DType {
	if m.ComputeDType == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return m.ComputeDType
}

// MixedPrecision reports whether the model's products compute in a lower precision than its
// float32 weights (ComputeDType BFloat16).
func (m *Model) MixedPrecision() bool { return m.computeDType() != dtypes.Float32 }

// linear is Linear in the model's compute dtype.
func (m *Model) linear(x, w *Node) *Node { return LinearIn(m.computeDType(), x, w) }

// dot is DotGeneralWithAxes in the model's compute dtype.
func (m *Model) dot(lhs *Node, lhsContracting, lhsBatch []int, rhs *Node, rhsContracting, rhsBatch []int) *Node {
	return DotGeneralIn(m.computeDType(), lhs, lhsContracting, lhsBatch, rhs, rhsContracting, rhsBatch)
}

// NewModel creates a model with freshly initialised weights in a new context. Initialisation
// is deterministic: the same config and seed give bit-identical weights.
func NewModel(cfg Config, seed uint64) (*Model, error) {
	return NewModelIn(context.New(), "", cfg, seed)
}

// NewModelIn creates a model whose variables live in ctx under the absolute scope prefix
// (e.g. "/reference"; "" for the root).
func NewModelIn(ctx *context.Context, scope string, cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := newEmptyModel(ctx, scope, cfg)
	rng := rand.New(rand.NewPCG(seed, 0x5354585f494e4954)) // "STX_INIT"
	for _, p := range m.params {
		// Drawn straight into the variable's tensor: no second copy of a real-size model.
		t := tensors.FromShape(shapes.Make(dtypes.Float32, p.Shape...))
		if err := tensors.MutableFlatData(t, func(data []float32) {
			switch {
			case strings.HasSuffix(p.Name, "norm.weight"):
				for i := range data {
					data[i] = 1
				}
			case strings.HasSuffix(p.Name, ".bias"):
				clear(data)
			default:
				for i := range data {
					data[i] = float32(rng.NormFloat64() * cfg.InitStd)
				}
			}
		}); err != nil {
			return nil, fmt.Errorf("initialising %q: %w", p.Name, err)
		}
		if err := m.setTensor(p.Name, t); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newEmptyModel returns a model whose variables are not created yet (SetParam creates them).
func newEmptyModel(ctx *context.Context, scope string, cfg Config) *Model {
	return &Model{Config: cfg, ctx: ctx, scope: strings.TrimSuffix(scope, "/"), params: paramList(cfg)}
}

// paramList returns the model's tensors in a fixed order, with Hugging Face names and shapes.
func paramList(c Config) []Param {
	d, kv, q, hd := c.Hidden, c.KVHeads*c.HeadDim(), c.QDim(), c.HeadDim()
	ps := []Param{{"model.embed_tokens.weight", []int{c.VocabSize, d}}}
	for l := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		ps = append(ps,
			Param{pre + "input_layernorm.weight", []int{d}},
			Param{pre + "self_attn.q_proj.weight", []int{q, d}},
			Param{pre + "self_attn.k_proj.weight", []int{kv, d}},
			Param{pre + "self_attn.v_proj.weight", []int{kv, d}})
		if c.AttentionBias {
			ps = append(ps,
				Param{pre + "self_attn.q_proj.bias", []int{q}},
				Param{pre + "self_attn.k_proj.bias", []int{kv}},
				Param{pre + "self_attn.v_proj.bias", []int{kv}})
		}
		if c.QKNorm {
			ps = append(ps,
				Param{pre + "self_attn.q_norm.weight", []int{hd}},
				Param{pre + "self_attn.k_norm.weight", []int{hd}})
		}
		ps = append(ps, Param{pre + "self_attn.o_proj.weight", []int{d, q}})
		if c.OutputBias {
			ps = append(ps, Param{pre + "self_attn.o_proj.bias", []int{d}})
		}
		ps = append(ps,
			Param{pre + "post_attention_layernorm.weight", []int{d}},
			Param{pre + "mlp.gate_proj.weight", []int{c.Intermediate, d}},
			Param{pre + "mlp.up_proj.weight", []int{c.Intermediate, d}},
			Param{pre + "mlp.down_proj.weight", []int{d, c.Intermediate}})
	}
	ps = append(ps, Param{"model.norm.weight", []int{d}})
	if !c.TieEmbeddings {
		ps = append(ps, Param{"lm_head.weight", []int{c.VocabSize, d}})
	}
	if c.HasValueHead {
		ps = append(ps, Param{"score.weight", []int{1, d}})
	}
	return ps
}

// AddValueHead gives the model a scalar head ("score.weight", [1, hidden]) initialised from
// seed, e.g. to turn a loaded policy checkpoint into a critic or reward model. It is a no-op
// when the model already has one.
func (m *Model) AddValueHead(seed uint64) error {
	if m.Config.HasValueHead {
		return nil
	}
	m.Config.HasValueHead = true
	m.params = paramList(m.Config)
	rng := rand.New(rand.NewPCG(seed, 0x5354585f56414c55)) // "STX_VALU"
	w := make([]float32, m.Config.Hidden)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * m.Config.InitStd)
	}
	return m.SetParam("score.weight", w)
}

// Context returns the context holding the model's variables. Scorers, samplers and trainers
// of a model share its variables: a sampler sees the weights the last train step left (calls
// on one model must not run concurrently).
func (m *Model) Context() *context.Context { return m.ctx }

// Params lists the model's tensors in canonical order.
func (m *Model) Params() []Param { return m.params }

// variableScope maps a Hugging Face tensor name to the variable's scope and name.
func (m *Model) variableScope(name string) (scope, varName string) {
	i := strings.LastIndexByte(name, '.')
	return m.scope + "/" + strings.ReplaceAll(name[:i], ".", "/"), name[i+1:]
}

// Variable returns the context variable holding the named tensor, or nil.
func (m *Model) Variable(name string) *context.Variable {
	scope, v := m.variableScope(name)
	return m.ctx.GetVariableByScopeAndName(scope, v)
}

// Variables returns the model's variables in canonical order.
func (m *Model) Variables() []*context.Variable {
	vs := make([]*context.Variable, len(m.params))
	for i, p := range m.params {
		vs[i] = m.Variable(p.Name)
	}
	return vs
}

// SetParam sets a tensor's values (row-major, float32), creating its variable if needed.
func (m *Model) SetParam(name string, data []float32) error {
	return setParamValue(m.params, m.Variable(name), "model", name, data, func(t *tensors.Tensor) {
		_ = m.setTensor(name, t) // a new variable: nothing to fail
	})
}

// setTensor sets the named tensor's variable to t, in t's dtype and without a copy, creating
// the variable on first use.
func (m *Model) setTensor(name string, t *tensors.Tensor) error {
	if v := m.Variable(name); v != nil {
		if err := v.SetValue(t); err != nil {
			return fmt.Errorf("setting %q: %w", name, err)
		}
		return nil
	}
	scope, vn := m.variableScope(name)
	m.ctx.InAbsPath(scope).Checked(false).VariableWithValue(vn, t)
	return nil
}

// ParamValues returns a copy of a tensor's values (row-major, float32).
func (m *Model) ParamValues(name string) ([]float32, error) {
	return variableValues(m.Variable(name), "model", name)
}

// SetTrainable marks all the model's variables as trainable or frozen.
func (m *Model) SetTrainable(trainable bool) {
	for _, v := range m.Variables() {
		v.SetTrainable(trainable)
	}
}

// weight returns the named tensor inside graph g of the executing context ctx.
//
// Graph-building code reports misuse by panicking with an error value: GoMLX's executors turn
// error panics into returned errors, but re-panic anything else.
func (m *Model) weight(ctx *context.Context, g *Graph, name string) *Node {
	scope, vn := m.variableScope(name)
	v := ctx.GetVariableByScopeAndName(scope, vn)
	if v == nil {
		panic(fmt.Errorf("model tensor %q not found in context scope %q", name, scope))
	}
	return graphValue(v, g) // under FSDP, the weight gathered from the devices' shards (fsdp.go)
}

// kvCache is the attention state of earlier positions, per layer: keys [batch, kvHeads, past,
// headDim] and values transposed, [batch, kvHeads, headDim, past], the layouts SimpleGo's
// DotGeneral uses without copying; bias [batch, seq, past] is the additive bias of the past
// keys (0 or maskValue).
type kvCache struct {
	k, vT []*Node
	bias  *Node
}

// Forward runs the decoder on tokens [batch, seq] (int32) with causal attention and positions
// 0..seq-1, returning the final-normed hidden states [batch, seq, hidden]. Right padding is
// harmless: causal attention never lets a real position see a later pad.
func (m *Model) Forward(ctx *context.Context, tokens *Node) *Node {
	h, _ := m.decoder(ctx, tokens, nil, nil, nil, m.ActivationCheckpointing)
	return h
}

// Logits projects hidden states [..., hidden] to vocabulary logits [..., vocab].
func (m *Model) Logits(ctx *context.Context, hidden *Node) *Node {
	name := "lm_head.weight"
	if m.Config.TieEmbeddings {
		name = "model.embed_tokens.weight"
	}
	return m.linear(hidden, m.weight(ctx, hidden.Graph(), name))
}

// ValueHead maps hidden states [batch, seq, hidden] to scalars [batch, seq] with the
// "score.weight" head (Config.HasValueHead must be set).
func (m *Model) ValueHead(ctx *context.Context, hidden *Node) *Node {
	if !m.Config.HasValueHead {
		panic(errors.New("ValueHead: the model config has no value head (Config.HasValueHead)"))
	}
	v := m.linear(hidden, m.weight(ctx, hidden.Graph(), "score.weight"))
	return Squeeze(v, -1)
}

// forward is the decoder. positions [batch or 1, seq] (nil: 0..seq-1); bias [batch or 1, seq,
// seq] is the additive attention bias among the new tokens (nil: causal, within the sliding
// window if the model has one); past holds earlier keys/values (nil: none). It returns the
// hidden states and this call's keys and transposed values.
func (m *Model) forward(ctx *context.Context, tokens, positions, bias *Node, past *kvCache) (*Node, kvCache) {
	return m.decoder(ctx, tokens, positions, bias, past, false)
}

// decoder is forward, with each layer checkpointed (Checkpoint) when checkpoint is set; it
// then returns no keys and values (a training graph needs none).
func (m *Model) decoder(ctx *context.Context, tokens, positions, bias *Node, past *kvCache, checkpoint bool) (*Node, kvCache) {
	c := m.Config
	g := tokens.Graph()
	m = m.withDropoutDraw(ctx, g) // a trainer's graph with adapter dropout (lora_dropout.go)
	seq := tokens.Shape().Dimensions[1]
	if tokens.DType() != dtypes.Int32 {
		tokens = ConvertDType(tokens, dtypes.Int32)
	}
	if positions == nil {
		// One row of positions, shared by the batch: the RoPE tables are computed once and
		// broadcast (the backend reads them without materialising the broadcast).
		positions = Iota(g, shapes.Make(dtypes.Int32, 1, seq), 1)
	}
	if bias == nil {
		row := Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0)
		col := Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1)
		visible := GreaterOrEqual(row, col)
		if c.SlidingWindow > 0 && seq > c.SlidingWindow {
			// A query sees the SlidingWindow latest keys, itself included: row − col < window.
			visible = LogicalAnd(visible, LessThan(Sub(row, col), Scalar(g, dtypes.Int32, c.SlidingWindow)))
		}
		// [1, seq, seq]: the same for every sequence, broadcast where the scores add it.
		bias = InsertAxes(Where(visible, Scalar(g, dtypes.Float32, 0), Scalar(g, dtypes.Float32, maskValue)), 0)
	}
	// [batch or 1, 1, 1, seq, keys]: broadcast over kv heads and the query group.
	bias = InsertAxes(bias, 1, 1)
	var pastBias *Node
	if past != nil {
		pastBias = InsertAxes(past.bias, 1, 1)
	}
	// The queries' tables carry the attention scale 1/√headDim, so that scaling costs no pass
	// over the queries nor over the [T,S] scores (and is exact for power-of-two head sizes).
	kRot := ropeTables(positions, c.RopeInvFreq())
	rot := ropes{q: kRot.scaled(1 / math.Sqrt(float64(c.HeadDim()))), k: kRot}

	// A LoRA model's frozen embeddings may be held in bfloat16 (lora_base.go): the gathered
	// rows widen exactly, the activations are float32.
	x := ConvertDType(Gather(m.weight(ctx, g, "model.embed_tokens.weight"), InsertAxes(tokens, -1)), dtypes.Float32)
	var present kvCache
	for l := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		if checkpoint && past == nil {
			names := m.layerParams(pre)
			weights := make([]*Node, len(names))
			for i, n := range names {
				weights[i] = m.weight(ctx, g, n)
			}
			x = Checkpoint(x, weights, func(x *Node, weights []*Node) *Node {
				y, _, _ := m.layer(x, pre, lookup(names, weights), rot, bias, nil, nil, nil)
				return y
			})
			continue
		}
		var pk, pvT *Node
		if past != nil {
			pk, pvT = past.k[l], past.vT[l]
		}
		var k, vT *Node
		x, k, vT = m.layer(x, pre, func(name string) *Node { return m.weight(ctx, g, name) }, rot, bias, pk, pvT, pastBias)
		present.k = append(present.k, k)
		present.vT = append(present.vT, vT)
	}
	return rmsNorm(x, m.weight(ctx, g, "model.norm.weight"), c.RMSNormEps), present
}

// layerParams lists the names of the tensors of the decoder layer whose names start with pre.
func (m *Model) layerParams(pre string) []string {
	var names []string
	// The adapters of the layer are its weights too: a checkpointed layer must hand them to
	// its recomputation, or their gradients would be lost. They come first: Checkpoint ties
	// its input's gradient to its first weight, which must be one that trains (a LoRA
	// model's base is frozen, and so are the embeddings that feed layer 0).
	for _, p := range m.activeAdapterParams() {
		if strings.HasPrefix(p.Name, pre) {
			names = append(names, p.Name)
		}
	}
	for _, p := range m.params {
		if strings.HasPrefix(p.Name, pre) {
			names = append(names, p.Name)
		}
	}
	return names
}

// lookup maps names[i] to nodes[i].
func lookup(names []string, nodes []*Node) func(string) *Node {
	return func(name string) *Node {
		for i, n := range names {
			if n == name {
				return nodes[i]
			}
		}
		panic(fmt.Errorf("model tensor %q is not one of the layer's", name))
	}
}

// layer is one pre-norm decoder layer (attention and SwiGLU MLP, each with a residual) on x
// [B,T,hidden], its tensors named pre+… found by w. It returns the layer's output and its
// attention's new keys and transposed values (see attention).
func (m *Model) layer(x *Node, pre string, w func(string) *Node, rot ropes, bias, pastK, pastVT, pastBias *Node) (y, k, vT *Node) {
	c := m.Config
	h := rmsNorm(x, w(pre+"input_layernorm.weight"), c.RMSNormEps)
	attn, k, vT := m.attention(h, pre, w, rot, bias, pastK, pastVT, pastBias)
	x = Add(x, attn)
	h = rmsNorm(x, w(pre+"post_attention_layernorm.weight"), c.RMSNormEps)
	gate := m.project(h, w, pre+"mlp.gate_proj")
	up := m.project(h, w, pre+"mlp.up_proj")
	act := Mul(Mul(gate, Sigmoid(gate)), up) // SwiGLU: silu(gate)·up
	return Add(x, m.project(act, w, pre+"mlp.down_proj")), k, vT
}

// attention is one grouped-query attention block. h [B,T,hidden]; bias [B or 1,1,1,T,T]; with a
// past, pastK [B,kvh,S,hd], pastVT [B,kvh,hd,S] and pastBias [B,1,1,T,S]. It returns the
// block's output [B,T,hidden], the new keys [B,kvh,T,hd] (after RoPE) and the new values
// transposed [B,kvh,hd,T].
func (m *Model) attention(h *Node, pre string, w func(string) *Node, rot ropes, bias, pastK, pastVT, pastBias *Node) (out, k, vT *Node) {
	c := m.Config
	b, t := h.Shape().Dimensions[0], h.Shape().Dimensions[1]
	hd, kvh := c.HeadDim(), c.KVHeads
	group := c.Heads / kvh
	proj := func(name string) *Node {
		y := m.project(h, w, pre+"self_attn."+name)
		if c.AttentionBias {
			y = Add(y, lastAxis(w(pre+"self_attn."+name+".bias"), y.Rank()))
		}
		return y
	}
	q := Reshape(proj("q_proj"), b, t, c.Heads, hd)
	// The new keys, [B,T,kvh,hd].
	kt := Reshape(proj("k_proj"), b, t, kvh, hd)
	if c.QKNorm { // Qwen3: RMSNorm of every head before RoPE
		q = rmsNorm(q, w(pre+"self_attn.q_norm.weight"), c.RMSNormEps)
		kt = rmsNorm(kt, w(pre+"self_attn.k_norm.weight"), c.RMSNormEps)
	}
	q = rot.q.apply(q) // RoPE and the scale 1/√hd
	kt = rot.k.apply(kt)
	v := Reshape(proj("v_proj"), b, t, kvh, hd)
	// The cache's layouts, for a caller that keeps them (a forward or a train step does not,
	// and these transposes are then never computed).
	k, vT = TransposeAllAxes(kt, 0, 2, 1, 3), TransposeAllAxes(v, 0, 2, 3, 1) // [B,kvh,T,hd], [B,kvh,hd,T]
	// Queries of one kv head are grouped so that the score matmul batches over (B, kvh) and
	// needs no repeat of keys/values: head h uses kv head h/group, as in HF's repeat_kv. With
	// one query head per kv head, q is used as computed, [B,T,heads,hd], batched over axes 0
	// and 2 like the new keys and values: backends that read such operands in place (stx's
	// cpu backend) then transpose none of the three.
	qBatch := []int{0, 2}
	if group > 1 {
		q = Reshape(q, b, t, kvh, group, hd)
		q = TransposeAllAxes(q, 0, 2, 3, 1, 4) // [B,kvh,group,T,hd]
		q = Reshape(q, b, kvh, group*t, hd)
		qBatch = []int{0, 1}
	}
	// scores of q against S keys, stored [B,kvh,S,hd] (batch axes 0, 1: the cache) or
	// [B,S,kvh,hd] (0, 2: the new keys): [B,kvh,group,T,S].
	scores := func(keys *Node, keyBatch []int, bias *Node) *Node {
		s := m.dot(q, []int{3}, qBatch, keys, []int{3}, keyBatch) // [B,kvh,group*T,S]
		return Add(Reshape(s, b, kvh, group, t, s.Shape().Dimensions[3]), bias)
	}
	// weighted is Σ_s e·v → [B,kvh,group*T,hd], the values' S axis being contracted and their
	// (B, kvh) axes batch.
	weighted := func(e, values *Node, contracted int, batch []int) *Node {
		s := e.Shape().Dimensions[4]
		return m.dot(Reshape(e, b, kvh, group*t, s), []int{3}, []int{0, 1}, values, []int{contracted}, batch)
	}
	// Softmax over past and new keys together, without concatenating them (a copy of the
	// whole cache per step): shared max, exponentials, and a common denominator. The max is a
	// constant for the gradient, which is exact because softmax is shift-invariant.
	cur := scores(kt, []int{0, 2}, bias)
	mx := ReduceAndKeep(cur, ReduceMax, -1)
	var past *Node
	if pastK != nil {
		past = scores(pastK, []int{0, 1}, pastBias)
		mx = Max(mx, ReduceAndKeep(past, ReduceMax, -1))
	}
	mx = StopGradient(mx)
	eCur := Exp(Sub(cur, mx))
	den := ReduceAndKeep(eCur, ReduceSum, -1)
	var o *Node
	if past == nil {
		o = weighted(eCur, v, 1, []int{0, 2})
	} else {
		ePast := Exp(Sub(past, mx))
		den = Add(den, ReduceAndKeep(ePast, ReduceSum, -1))
		if m.MixedPrecision() {
			o = m.weightedSplit(eCur, v, ePast, pastVT, b, kvh, group, t)
		} else {
			o = Add(weighted(eCur, v, 1, []int{0, 2}), weighted(ePast, pastVT, 3, []int{0, 1}))
		}
	}
	o = Div(Reshape(o, b, kvh, group, t, hd), den) // den [B,kvh,group,T,1]
	o = TransposeAllAxes(o, 0, 3, 1, 2, 4)         // [B,T,kvh,group,hd]
	out = m.project(Reshape(o, b, t, c.Heads*hd), w, pre+"self_attn.o_proj")
	if c.OutputBias {
		out = Add(out, lastAxis(w(pre+"self_attn.o_proj.bias"), out.Rank()))
	}
	return out, k, vT
}

// weightedSplit is attention's Σ_s e·v over the new keys (eCur, v [B,T,kvh,hd]) and the
// cached ones (ePast, pastVT [B,kvh,hd,S]) for a model computing in a lower precision: the
// training graph takes it as one product over all keys, rounded once, and two products rounded
// each and then added differ from it by about that rounding (measured: the sampled log-probs
// then differed from the training graph's by 0.034 where bfloat16 and float32 differ by 0.044,
// against 5e-7 with this). So the two products take operands
// rounded to the compute dtype but multiply them in float32 (exact products, float32 sums, as
// the bf16 product does) and their sum is rounded once. Decode graphs only: it is never
// differentiated, and a decode step's products are small.
func (m *Model) weightedSplit(eCur, v, ePast, pastVT *Node, b, kvh, group, t int) *Node {
	dt := m.computeDType()
	round := func(x *Node) *Node { return ConvertDType(ConvertDType(x, dt), x.DType()) }
	part := func(e, values *Node, contracted int, batch []int) *Node {
		s := e.Shape().Dimensions[4]
		return DotGeneralWithAxes(round(Reshape(e, b, kvh, group*t, s)), []int{3}, []int{0, 1}, round(values), []int{contracted}, batch)
	}
	return round(Add(part(eCur, v, 1, []int{0, 2}), part(ePast, pastVT, 3, []int{0, 1})))
}

// rmsNorm is x / sqrt(mean(x²) + eps) · w over the last axis. It uses Div(·, Sqrt(·)) because
// GoMLX v0.26 has no gradient for Rsqrt.
func rmsNorm(x, w *Node, eps float64) *Node {
	ms := ReduceAndKeep(Square(x), ReduceMean, -1)
	return Mul(Div(x, Sqrt(AddScalar(ms, eps))), lastAxis(w, x.Rank()))
}

// lastAxis reshapes a vector to [1, ..., 1, n] of the given rank, for broadcasting (GoMLX
// binary ops broadcast dimensions of size 1 but need equal ranks).
func lastAxis(v *Node, rank int) *Node {
	dims := make([]int, rank)
	for i := range dims {
		dims[i] = 1
	}
	dims[rank-1] = v.Shape().Dimensions[0]
	return Reshape(v, dims...)
}

// rotary holds one forward pass's RoPE tables.
type rotary struct {
	// cos and sin of the angles, [B,T,1,1,headDim/2] (B is 1 when every sequence has the
	// same positions): they broadcast over heads and over the axis of the rotate-half pair.
	cos, sin *Node
	// signedSin is [-sin, sin] along the pair axis ([B,T,1,2,headDim/2]), present when the
	// backend has Reverse (see apply).
	signedSin *Node
}

// ropes are the RoPE tables of the keys and of the queries, the latter scaled.
type ropes struct{ q, k rotary }

// scaled returns the tables times s: apply then rotates and scales in the same passes.
func (r rotary) scaled(s float64) rotary {
	out := rotary{cos: MulScalar(r.cos, s), sin: MulScalar(r.sin, s)}
	if r.signedSin != nil {
		out.signedSin = MulScalar(r.signedSin, s)
	}
	return out
}

// ropeTables returns the RoPE tables for positions [B,T] (or [1,T]) and the frequencies invFreq
// [headDim/2].
func ropeTables(positions *Node, invFreq []float64) rotary {
	g := positions.Graph()
	half := len(invFreq)
	inv := make([]float32, half)
	for i, f := range invFreq {
		inv[i] = float32(f)
	}
	pos := ConvertDType(positions, dtypes.Float32)
	b, t := pos.Shape().Dimensions[0], pos.Shape().Dimensions[1]
	angles := Mul(Reshape(pos, b, t, 1, 1, 1), Reshape(Const(g, inv), 1, 1, 1, 1, half))
	r := rotary{cos: Cos(angles), sin: Sin(angles)}
	if g.Backend().Capabilities().Operations[backends.OpTypeReverse] {
		r.signedSin = Mul(r.sin, Reshape(Const(g, []float32{-1, 1}), 1, 1, 1, 2, 1))
	}
	return r
}

// apply rotates x [B,T,heads,headDim] with the rotate-half convention (HF Llama/Qwen2):
// x·cos + rotate_half(x)·sin, rotate_half([x1, x2]) = [-x2, x1]. With x seen as
// [..., 2, headDim/2], rotate_half(x)·sin is Reverse(x) along the pair axis times [-sin, sin].
// GoMLX has no gradient for Reverse, so the rotation is computed without one and the gradient,
// v·cos + Reverse(v·[-sin, sin]), is attached through an identity that adds exactly 0: six
// passes over x forward and five backward. Backends without Reverse (SimpleGo; nor Pad, which
// Slice's gradient needs) separate the halves by masked sums instead, about twice the passes,
// with the same bits (products by 0 or 1 and sums with 0 are exact).
func (r rotary) apply(x *Node) *Node {
	d := x.Shape().Dimensions
	xr := Reshape(x, d[0], d[1], d[2], 2, d[3]/2)
	if r.signedSin == nil {
		return Reshape(r.applyMasked(xr), d...)
	}
	xs := StopGradient(xr)
	value := Add(Mul(xs, r.cos), Mul(Reverse(xs, 3), r.signedSin))
	xc := IdentityWithCustomGradient(xr, func(_, v *Node) *Node {
		return Add(Mul(v, r.cos), Reverse(Mul(v, r.signedSin), 3))
	})
	return Reshape(Add(value, Sub(xc, StopGradient(xc))), d...)
}

// applyMasked is apply's rotation of xr [B,T,heads,2,headDim/2] without Reverse.
func (r rotary) applyMasked(xr *Node) *Node {
	g := xr.Graph()
	e0 := Reshape(Const(g, []float32{1, 0}), 1, 1, 1, 2, 1)
	e1 := Reshape(Const(g, []float32{0, 1}), 1, 1, 1, 2, 1)
	x1 := ReduceAndKeep(Mul(xr, e0), ReduceSum, 3)
	x2 := ReduceAndKeep(Mul(xr, e1), ReduceSum, 3)
	rot := Add(Mul(Neg(x2), e0), Mul(x1, e1))
	return Add(Mul(xr, r.cos), Mul(rot, r.sin))
}

// LogSoftmaxLast is a numerically stable log-softmax over the last axis.
func LogSoftmaxLast(logits *Node) *Node {
	mx := StopGradient(ReduceAndKeep(logits, ReduceMax, -1))
	shifted := Sub(logits, mx)
	return Sub(shifted, Log(ReduceAndKeep(Exp(shifted), ReduceSum, -1)))
}

// LogProbs gathers log-softmax(logits)[..., target]: logits [..., vocab], targets [...] (integer)
// → [...]. It gathers the target's logit and subtracts the log-sum-exp, which avoids
// materialising a one-hot or a full log-softmax; the gather's gradient is a scatter-add.
func LogProbs(logits, targets *Node) *Node {
	g := logits.Graph()
	dims := logits.Shape().Dimensions
	vocab := dims[len(dims)-1]
	n := logits.Shape().Size() / vocab
	if targets.DType() != dtypes.Int32 {
		targets = ConvertDType(targets, dtypes.Int32)
	}
	// Flat index of (row, target) in the [n·vocab] logits.
	rows := MulScalar(Iota(g, shapes.Make(dtypes.Int32, n), 0), vocab)
	idx := Add(rows, Reshape(targets, n))
	picked := Gather(Reshape(logits, n*vocab, 1), Reshape(idx, n, 1)) // [n, 1]
	mx := StopGradient(ReduceAndKeep(logits, ReduceMax, -1))
	lse := Add(Log(ReduceAndKeep(Exp(Sub(logits, mx)), ReduceSum, -1)), mx)
	return Reshape(Sub(Reshape(picked, n), Reshape(lse, n)), dims[:len(dims)-1]...)
}

// Entropy is −Σ p·log p of softmax(logits) over the last axis: [..., vocab] → [...].
func Entropy(logits *Node) *Node {
	lp := LogSoftmaxLast(logits)
	return Neg(ReduceSum(Mul(Exp(lp), lp), -1))
}

// MaskedMean is Σ x·mask / Σ mask, and 0 where the mask is empty (never NaN).
func MaskedMean(x, mask *Node) *Node {
	mk := ConvertDType(mask, x.DType())
	n := ReduceAllSum(mk)
	return Div(ReduceAllSum(Mul(x, mk)), Max(n, OnesLike(n)))
}

// TokenLogProbs is the model's log-probability of targets [B,T] given tokens [B,T]; targets are
// the next tokens (shifted on the host: targets[b,t] = tokens[b,t+1]).
// They are computed over chunks of rows (ChunkedLogProbs), so that a real vocabulary's logits
// and their gradient never exist for the whole batch at once.
func (m *Model) TokenLogProbs(ctx *context.Context, tokens, targets *Node) *Node {
	h := m.Forward(ctx, tokens)
	return chunkedLogProbs(m.computeDType(), h, m.headWeight(ctx, h.Graph()), targets, m.headChunkRows())
}

// FrozenCopy returns a frozen copy of the model's current weights in a context of its own (a
// policy's reference, which must keep the initial weights while the policy trains): the same
// config and tensors, nothing trainable, and otherwise a new model's settings. Each tensor is
// copied once, straight from the model's. A matrix whose every value is a bfloat16 (weights
// read from a bfloat16 checkpoint, as most are) is held in bfloat16: the same values in half
// the memory, which the graphs widen exactly at each use (lora_base.go), so the copy computes
// the same bits as a float32 copy would.
func (m *Model) FrozenCopy() (*Model, error) {
	c := newEmptyModel(context.New(), "", m.Config)
	for _, p := range c.params {
		v := m.Variable(p.Name)
		if v == nil {
			return nil, fmt.Errorf("frozen copy: the model has no tensor %q", p.Name)
		}
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("frozen copy: reading %q: %w", p.Name, err)
		}
		cp, err := frozenTensor(t, len(p.Shape) == 2 && p.Name != "score.weight")
		if err != nil {
			return nil, fmt.Errorf("frozen copy: %q: %w", p.Name, err)
		}
		if err := c.setTensor(p.Name, cp); err != nil {
			return nil, err
		}
	}
	c.SetTrainable(false)
	return c, nil
}

// frozenTensor copies t into a new host tensor: in bfloat16 when narrow allows it and every
// value of a float32 t is a bfloat16 (its low 16 bits are zero), else in t's dtype.
func frozenTensor(t *tensors.Tensor, narrow bool) (*tensors.Tensor, error) {
	var out *tensors.Tensor
	var inner error
	if narrow && t.DType() == dtypes.Float32 {
		err := tensors.ConstFlatData(t, func(f []float32) {
			if !bf16Exact(f) {
				return
			}
			out = tensors.FromShape(shapes.Make(dtypes.BFloat16, t.Shape().Dimensions...))
			inner = tensors.MutableFlatData(out, func(h []bfloat16.BFloat16) {
				for i, x := range f {
					h[i] = bfloat16.BFloat16(math.Float32bits(x) >> 16)
				}
			})
		})
		if err = firstErr(err, inner); err != nil || out != nil {
			return out, err
		}
	}
	out = tensors.FromShape(t.Shape())
	err := t.ConstBytes(func(src []byte) {
		inner = out.MutableBytes(func(dst []byte) { copy(dst, src) })
	})
	return out, firstErr(err, inner)
}

// bf16Exact reports whether every value of f is a bfloat16 widened (its low 16 bits zero).
func bf16Exact(f []float32) bool {
	for _, x := range f {
		if math.Float32bits(x)&0xffff != 0 {
			return false
		}
	}
	return true
}
