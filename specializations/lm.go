package specializations

import (
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

// lmBase is what every language-model specialization shares: its contract and role
// config, the loss_agg_mode reducer, the forward pass and the forward-only outputs.
type lmBase struct {
	selfLoss[*runtime.Model]
	contract Contract
	cfg      RoleConfig
	// tempered roles score tokens the rollout sampler drew: their log-probs (and those of the
	// roles that produce log_probs for them: the reference, the teacher) come from
	// log_softmax(logits/temperature), the distribution the sampler drew from, so that the
	// importance ratio of an on-policy step is 1 at any temperature.
	tempered bool
	// fixedRows: the loss couples the rows of a micro-batch (KTO's z0 is estimated per
	// micro-batch), so packed micro-batches keep opts.MicroBatchSize rows each (packed inside)
	// rather than taking the rows a token budget holds: regrouping them would change the loss.
	fixedRows bool
	// noEmptyUnits: an empty unit is not inert in the loss (a preference pair of two empty rows
	// still has −log σ(0)), so token-budget micro-batches take a ladder count of units
	// (runtime.PackGroups onLadder) rather than being rounded up with empty ones.
	noEmptyUnits bool
}

// bInvTemp is the batch key of 1/temperature, a scalar graph input of tempered roles: the
// temperature is a hot knob, and an input changes without recompiling the graph.
const bInvTemp = "inv_temperature"

// invTemperature is the factor the sampler applied to the logits: 1/T, and 1 when greedy
// (T = 0), whose log-probs the sampler reports from the unscaled logits.
func invTemperature(t float64) float64 {
	if t <= 0 {
		return 1
	}
	return 1 / t
}

func newLMBase(name string, cfg RoleConfig) (lmBase, error) {
	c, err := Get(name)
	if err != nil {
		return lmBase{}, err
	}
	if _, err := loss.ParseAggMode(cfg.Knobs.LossAggMode); err != nil {
		return lmBase{}, err
	}
	return lmBase{contract: c, cfg: cfg}, nil
}

func (b lmBase) Contract() Contract { return b.contract }

// requires checks data against the role's required keys.
func (b lmBase) requires(data *rollout.Rollout) error {
	return requireKeys(b.contract.Name, data, b.contract.Requires(b.cfg))
}

// Reducer is loss_agg_mode (and loss_scale_factor) over the mini-batch denominators the
// batch carries; without them the micro-batch's own counts are used.
func (b lmBase) Reducer(batch Batch) loss.Reducer {
	mode, _ := loss.ParseAggMode(b.cfg.Knobs.LossAggMode) // checked by newLMBase
	r := loss.Reducer{Mode: mode}
	if f := b.cfg.Knobs.LossScaleFactor; f != nil {
		r.LossScaleFactor = *f
	}
	if batch[bDenTokens] != nil {
		r.Denominators = &loss.Denominators{Tokens: batch[bDenTokens], Sequences: batch[bDenSeqs], Rows: batch[bDenRows]}
	}
	return r
}

// perPosition runs f, a per-position function of the final hidden states [R,T,d] and of per-token
// inputs in (each [R,T,...]), on the batch's tokens; in a tempered role's batch (bInvTemp) the
// hidden states are scaled by 1/temperature, so that the head's logits are those of the
// temperature-scaled distribution (Linear(h/T, W) = logits/T). A packed batch (runtime.Pack: the
// PrepareBatch option Pack) runs the decoder and f on its packed rows, f's inputs packed and its
// outputs laid back out as [R,T,...]: nothing is computed for padding, which at a real vocabulary
// matters as much in the head as in the decoder.
func perPosition(ctx *context.Context, m *runtime.Model, batch Batch, in []*Node, f func(h *Node, in []*Node) []*Node) []*Node {
	p := runtime.PackedFrom(batch)
	if p == nil {
		return f(tempered(m.Forward(ctx, batch[bTokens]), batch), in)
	}
	packed := make([]*Node, len(in))
	for i, x := range in {
		packed[i] = p.Pack(x)
	}
	outs := f(tempered(m.ForwardPacked(ctx, batch[bTokens], p), batch), packed)
	for i := range outs {
		outs[i] = p.Unpack(outs[i])
	}
	return outs
}

// tempered scales hidden states by the batch's 1/temperature, if it has one.
func tempered(h *Node, batch Batch) *Node {
	if inv := batch[bInvTemp]; inv != nil {
		h = Mul(h, ConvertDType(inv, h.DType()))
	}
	return h
}

// headOutputs returns the target log-probs [R,T] and f's further per-token outputs of the
// (temperature-scaled, see perPosition) next-token logits, each [R,T], given the rows of inputs.
// The logits are computed over chunks of rows (runtime.ChunkedHead), forward and backward:
// with a real vocabulary, the [R,T,V] logits of a whole batch and their gradient would not fit.
func headOutputs(ctx *context.Context, m *runtime.Model, batch Batch, inputs []*Node, f runtime.HeadFn) []*Node {
	in := append([]*Node{batch[bTargets]}, inputs...)
	head := func(z *Node, rows []*Node) []*Node {
		out := []*Node{runtime.LogProbs(z, rows[0])}
		if f != nil {
			out = append(out, f(z, rows[1:])...)
		}
		return out
	}
	return perPosition(ctx, m, batch, in, func(h *Node, in []*Node) []*Node { return m.Head(ctx, h, in, head) })
}

// forward returns the target log-probs [R,T]; in a tempered role's batch (bInvTemp) those of
// the temperature-scaled distribution, logits/T.
func forward(ctx *context.Context, m *runtime.Model, batch Batch) *Node {
	return headOutputs(ctx, m, batch, nil, nil)[0]
}

// checkInputs reports a batch without the tokens and targets every LM output needs.
func (b lmBase) checkInputs(batch Batch) error {
	if batch[bTokens] == nil || batch[bTargets] == nil {
		return fmt.Errorf("%s: the batch has no tokens/targets", b.contract.Name)
	}
	return nil
}

// ExtractModelOutput is the policy's log-probs of the target tokens.
func (b lmBase) ExtractModelOutput(ctx *context.Context, m *runtime.Model, batch Batch) (Output, error) {
	if err := b.checkInputs(batch); err != nil {
		return nil, err
	}
	return Output{rollout.KeyLogProbs: forward(ctx, m, batch)}, nil
}

// Produce is the forward-only log_probs (with the in-role reference the same function
// runs on the frozen copy, see Producer).
func (b lmBase) Produce() runtime.OutputFn {
	return func(ctx *context.Context, m *runtime.Model, batch map[string]*Node) map[string]*Node {
		return map[string]*Node{rollout.KeyLogProbs: forward(ctx, m, batch)}
	}
}

// frozenOrChecked is the start of every LM PrepareBatch: a frozen role's micro-batches are the
// forward-only ones, a trainable role's data must hold its required keys. done reports that
// mbs and err are PrepareBatch's answer (a frozen role, or missing keys).
func (b lmBase) frozenOrChecked(data *rollout.Rollout, opts BatchOptions) (mbs []map[string]*tensors.Tensor, done bool, err error) {
	if !b.cfg.Role.Trainable {
		mbs, err = b.forwardBatches(data, opts, 1)
		return mbs, true, err
	}
	if err := b.requires(data); err != nil {
		return nil, true, err
	}
	return nil, false, nil
}

// forwardBatches are the micro-batches of a forward-only pass: tokens, targets, loss mask,
// last-token one-hot. A frozen role's PrepareBatch is exactly this.
func (b lmBase) forwardBatches(data *rollout.Rollout, opts BatchOptions, unit int) ([]map[string]*tensors.Tensor, error) {
	if err := requireKeys(b.contract.Name, data, []string{rollout.KeyTokens, rollout.KeyLossMask}); err != nil {
		return nil, err
	}
	// A forward pass couples no rows, and Producer.Produce reads each micro-batch's rows back
	// in order, with no empty ones among them.
	b.fixedRows, b.noEmptyUnits = false, true
	return b.lmBatches(data, opts, unit, nil)
}

// lmBatches cuts data into micro-batches of opts.MicroBatchSize units of unit rows (1 for
// sequences, 2 for preference pairs), with the forward keys, the loss_agg_mode denominators of the
// whole mini-batch, and whatever extra adds for each micro-batch's rows. Packed (opts.Pack), a
// micro-batch is instead opts.MicroBatchSize·unit packed rows of pack_tokens tokens and holds the
// units those rows take (microBatchRows): every loss normalises by mini-batch counts, so how rows
// are grouped changes no loss or gradient beyond float32 rounding.
func (b lmBase) lmBatches(data *rollout.Rollout, opts BatchOptions, unit int,
	extra func(mb map[string]*tensors.Tensor, rows []int) error) ([]map[string]*tensors.Tensor, error) {
	n := data.Len()
	if n%unit != 0 {
		return nil, fmt.Errorf("%s: %d rows do not form units of %d", b.contract.Name, n, unit)
	}
	T := seqLength(data)
	cut, err := b.microBatchRows(data, opts, unit, T)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.contract.Name, err)
	}
	var mbs []map[string]*tensors.Tensor
	for _, c := range cut.groups {
		rows := span(c[0]*unit, c[1]*unit)
		mb := lmInputs(data, rows, T, opts.Pad)
		if extra != nil {
			if err := extra(mb, rows); err != nil {
				return nil, fmt.Errorf("%s: %w", b.contract.Name, err)
			}
		}
		if opts.Pack {
			laid := len(rows)
			if cut.padUnits {
				laid = runtime.RowBucket(c[1]-c[0]) * unit
				padRows(mb, len(rows), laid)
			}
			if err := packInto(mb, data, rows, laid, T, cut.L, cut.maxRows); err != nil {
				return nil, fmt.Errorf("%s: %w", b.contract.Name, err)
			}
		}
		mbs = append(mbs, mb)
	}
	denominators(mbs, loss.CountMask(shiftedMasks(data.Mask, span(0, n))))
	if b.tempered {
		setScalar(mbs, bInvTemp, invTemperature(opts.Temperature))
	}
	return mbs, nil
}

// microBatchCut is how lmBatches cuts a mini-batch: the micro-batches' unit ranges and, packed,
// the packed rows' length (0: each micro-batch's own, runtime.PackAuto's), the most packed rows
// a micro-batch has (0: one per sequence) and whether each micro-batch is rounded up to a ladder
// count of units with empty ones (runtime.RowBucket).
type microBatchCut struct {
	groups     [][2]int
	L, maxRows int
	padUnits   bool
}

// microBatchRows cuts data's units into micro-batches. Unpacked, or packed for a loss that
// couples a micro-batch's rows (KTO's z0: fixedRows), a micro-batch is opts.MicroBatchSize
// units. Packed otherwise it is the units that opts.MicroBatchSize·unit rows (all of them for 0)
// of pack_tokens tokens take (runtime.CutByTokens); pack_tokens 0 keeps the token slots of an
// unpacked micro-batch, opts.MicroBatchSize·unit rows of T (the mini-batch's padded length), laid
// out as rows of T, 2T or 4T, whichever computes least. Its units are rounded up to the row ladder
// with empty units, inert in every loss that reduces over masks with mini-batch denominators, or,
// where an empty unit would count (noEmptyUnits), its count rounded down.
func (b lmBase) microBatchRows(data *rollout.Rollout, opts BatchOptions, unit, T int) (microBatchCut, error) {
	units := data.Len() / unit
	if !opts.Pack || b.fixedRows {
		return microBatchCut{groups: chunks(units, opts.MicroBatchSize), L: opts.PackTokens}, nil
	}
	rows := opts.MicroBatchSize * unit
	if rows <= 0 || rows > data.Len() {
		rows = data.Len()
	}
	lengths := make([]int, data.Len())
	for i, t := range data.Tokens {
		if lengths[i] = len(t); opts.PackTokens > 0 && lengths[i] > opts.PackTokens { // named by its row of the mini-batch, which the user can find
			return microBatchCut{}, fmt.Errorf("row %d has %d tokens, more than pack_tokens %d (raise pack_tokens, or set pack: false)", i, lengths[i], opts.PackTokens)
		}
	}
	cut, err := runtime.CutByTokens(lengths, unit, rows, T, opts.PackTokens, b.noEmptyUnits)
	return microBatchCut{groups: cut.Groups, L: cut.Length, maxRows: cut.Rows, padUnits: !b.noEmptyUnits}, err
}

// Producer runs an LM specialization forward-only and writes what it produces into a
// rollout: the reference behaviour of a non-trainable role (e.g. its log_probs become
// another role's ref_log_probs through an inject sync) and the in-role frozen reference.
type Producer struct {
	spec LM
	eval *runtime.Evaluator
}

// NewProducer prepares spec's forward-only outputs with model m on backend.
func NewProducer(backend *runtime.Backend, spec LM, m *runtime.Model) (*Producer, error) {
	e, err := runtime.NewEvaluator(backend, m, spec.Produce())
	if err != nil {
		return nil, fmt.Errorf("%s producer: %w", spec.Contract().Name, err)
	}
	return &Producer{spec: spec, eval: e}, nil
}

// forwarder is implemented by every LM specialization of this package.
type forwarder interface {
	forwardBatches(data *rollout.Rollout, opts BatchOptions, unit int) ([]map[string]*tensors.Tensor, error)
}

// Produce computes the produced keys for every row of data and stores them in data, each
// under rename[key] when set: per-token outputs in data.Tok aligned with the tokens
// (token 0, which nothing predicts, gets 0), per-row outputs in data.Row, per-token
// vectors (logits) as wide Tok columns.
func (p *Producer) Produce(data *rollout.Rollout, opts BatchOptions, rename map[string]string) error {
	f, ok := p.spec.(forwarder)
	if !ok {
		return fmt.Errorf("%s: no forward-only batches", p.spec.Contract().Name)
	}
	mbs, err := f.forwardBatches(data, opts, 1)
	if err != nil {
		return err
	}
	row := 0
	tok := map[string][][]float32{}
	perRow := map[string][]float64{}
	wide := map[string][][][]float32{}
	for _, mb := range mbs {
		in := map[string]*tensors.Tensor{bTokens: mb[bTokens], bTargets: mb[bTargets],
			bLossMask: mb[bLossMask], bLastToken: mb[bLastToken]}
		for _, k := range []string{bInvTemp, runtime.PackIndexKey, runtime.UnpackIndexKey, runtime.PackPositionsKey, runtime.PackSegmentsKey} {
			if t := mb[k]; t != nil {
				in[k] = t
			}
		}
		outs, err := p.eval.Run(in)
		if err != nil {
			return fmt.Errorf("%s produce: %w", p.spec.Contract().Name, err)
		}
		R := mb[bTokens].Shape().Dimensions[0]
		for key, t := range outs {
			name := key
			if rename[key] != "" {
				name = rename[key]
			}
			flat, err := tensors.CopyFlatData[float32](t)
			if err != nil {
				return fmt.Errorf("%s produce %q: %w", p.spec.Contract().Name, key, err)
			}
			dims := t.Shape().Dimensions
			switch len(dims) {
			case 1:
				for i := range R {
					perRow[name] = append(perRow[name], float64(flat[i]))
				}
			case 2, 3:
				T, V := dims[1], 1
				if len(dims) == 3 {
					V = dims[2]
				}
				for i := range R {
					n := len(data.Tokens[row+i])
					vecs := make([][]float32, n)
					col := make([]float32, n)
					for tt := 1; tt < n && tt <= T; tt++ {
						base := (i*T + tt - 1) * V
						col[tt] = flat[base]
						vecs[tt] = flat[base : base+V]
					}
					if len(dims) == 2 {
						tok[name] = append(tok[name], col)
					} else {
						for tt := range vecs {
							if vecs[tt] == nil {
								vecs[tt] = make([]float32, V)
							}
						}
						wide[name] = append(wide[name], vecs)
					}
				}
			default:
				return fmt.Errorf("%s produce %q: unexpected shape %v", p.spec.Contract().Name, key, dims)
			}
		}
		row += R
	}
	for k, v := range tok {
		if err := data.SetTok(k, v); err != nil {
			return err
		}
	}
	for k, v := range perRow {
		if k == rollout.KeyRewards { // the rollout's own reward column
			data.Reward = v
			continue
		}
		if err := data.SetRow(k, v); err != nil {
			return err
		}
	}
	for k, v := range wide {
		if err := SetTokenVectors(data, k, v); err != nil {
			return err
		}
	}
	return nil
}

// NewReference returns a frozen copy of m: the in-role reference of a role with
// init.with_ref, whose log-probs (Producer with rename log_probs → ref_log_probs) feed
// the role's KL or preference loss.
func NewReference(m *runtime.Model) (*runtime.Model, error) {
	ref, err := runtime.NewModel(m.Config, 0)
	if err != nil {
		return nil, fmt.Errorf("reference model: %w", err)
	}
	for _, p := range m.Params() {
		v, err := m.ParamValues(p.Name)
		if err != nil {
			return nil, fmt.Errorf("reference model: %w", err)
		}
		if err := ref.SetParam(p.Name, v); err != nil {
			return nil, fmt.Errorf("reference model: %w", err)
		}
	}
	ref.SetTrainable(false)
	return ref, nil
}

// setScalar puts a scalar into every micro-batch: a mini-batch count, or a hot-reloadable
// coefficient, which as a graph input can change without recompiling.
func setScalar(mbs []map[string]*tensors.Tensor, key string, v float64) {
	for _, mb := range mbs {
		mb[key] = scalarF32(v)
	}
}
