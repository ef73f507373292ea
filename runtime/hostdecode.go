package runtime

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/cpu"
)

// hostDecoder runs the sampler's prefill and decode steps in plain Go on the CPU, the products
// through rowMatMul (C kernels where cgo is available). With SimpleGo a decode step is a handful of
// [batch, in]·[out, in] products with batch ≈ 8, which SimpleGo executes with its small-matrix
// kernel at about 1 GFLOP/s and with a copy of every input; a matrix-times-few-vectors loop that
// streams each weight row once is several times faster, and OpenBLAS, which packs the weights
// at every call, is slower at these shapes and rounds a row differently with the number of rows.
// It computes exactly the model of forward (same weights, same RoPE, same masking), in float32,
// and is checked against the full forward in the tests. For a model computing in bfloat16
// (Model.ComputeDType) it computes what the graph's bfloat16 products do (see bf16): every
// product's operands rounded to bfloat16, float32 sums, the result rounded to bfloat16. It is used for the CPU backends
// (SimpleGo and stx's cpu backend, where a decode step as a graph would pay a graph launch and
// a cache upload per token): on an accelerator the graph decode stays on the device.
type hostDecoder struct {
	c       Config
	layers  []hostLayer
	emb     []float32 // [vocab, hidden]
	norm    []float32 // final RMSNorm weight
	head    []float32 // lm_head, in the layout of the layers (emb itself when tied; nil with bf16)
	workers int
	// transposed says that the projections are stored [in, out] (see hostLayer); never set
	// now that rowMatMul reads them [out, in].
	transposed bool
	// bf16 mirrors a model whose products compute in bfloat16: the projections and the head
	// are stored rounded to bfloat16 (layersBF16, headBF16), each product's input is rounded
	// before it and its output after it, keys and values are rounded as they enter the cache,
	// and attention rounds its queries, scores, weights and output as the graph's two bfloat16
	// products do. The projections' products are bfloat16 dot products with float32
	// accumulation (rowMatMulBF16Dot: VDPBF16PS or its emulation, see xb16); attention's, whose
	// products of two bfloat16 values are exact in float32, float32 sums of the rounded operands.
	bf16 bool
	// xb is the rounded input of a product (bf16); qs, per worker, a rounded query.
	xb []float32
	qs [][]float32
	// xb16 is the input of a bfloat16 product as bfloat16 bits, for the bfloat16 dot-product
	// kernels (rowmatmul_bf16dot.go), which read the projections as stored (layersBF16,
	// headBF16) and multiply-add pairs of bfloat16 values into float32 sums (VDPBF16PS, or its
	// emulation: the same bits on every CPU). widenInputs has the products of bf16 use the
	// float32 kernels on the rounded input instead (rowMatMulBF16: the weights widened, one
	// float32 FMA per value), as before those kernels: the same numerics up to the order of the
	// float32 sums and the flush of denormals (tests and benchmarks compare the two).
	xb16        []uint16
	widenInputs bool
	// scratch, sized for the largest call so far: token rows × width.
	x, h, qkv, attn, gu, act, mlp, last []float32
	// rowSeq, rowSlot and lastRow map a step's token rows to sequences (see step).
	rowSeq, rowSlot, lastRow []int
	// layersBF16 and headBF16 are the projections and the head as bfloat16 (bf16 only: the
	// float32 layers then hold the norms and biases, and no projection).
	layersBF16 []hostLayerBF16
	headBF16   []uint16
	cos, sin   []float32 // RoPE rotation of each token row [tokens, hd/2]
	// scores holds one attention row per worker.
	scores [][]float32
	// invFreq[i] is RoPE's float32 frequency of rotation pair i, as the graph computes it.
	invFreq []float32
	// goAttention runs attention in the Go loops even where cpu.Attend is available (tests).
	goAttention bool
	// names and srcs are the weights the snapshot was read from and their tensors (see current);
	// read, the same by name (see load), nil when every part must be read again.
	names []string
	srcs  []*tensors.Tensor
	read  map[string]*tensors.Tensor
	part  string // the prefix of read's keys for the part being read (see loadWeights)
	// loadedBytes and storedBytes are the bytes the last load read from the model's weights
	// and wrote into the snapshot.
	loadedBytes, storedBytes int64
}

// hostLayer holds one decoder layer's weights, the projections [out, in] as stored (rowMatMul
// takes a dot product per output; see hostDecoder.transposed). Projections that read the same input
// are concatenated along the output axis: q, k and v as one [hidden+2·kvDim] output, gate and
// up as one [2·intermediate] output. One product per group instead of three (two) halves the
// GEMM calls of a step.
type hostLayer struct {
	inNorm, postNorm []float32
	qkv              []float32 // [hidden, qDim+2·kvDim] (transposed) or [qDim+2·kvDim, hidden]
	qkvBias          []float32 // [qDim+2·kvDim], nil without attention biases
	qNorm, kNorm     []float32 // [headDim] per-head RMSNorm weights (Qwen3), nil without
	o                []float32 // [qDim, hidden] (transposed) or [hidden, qDim]
	oBias            []float32 // [hidden], nil without an output bias
	gateUp           []float32 // [hidden, 2·intermediate] (transposed) or [2·intermediate, hidden]
	down             []float32 // [intermediate, hidden] (transposed) or [hidden, intermediate]
}

// newHostDecoder snapshots the model's current weights.
func newHostDecoder(m *Model) (*hostDecoder, error) {
	d := new(hostDecoder)
	if err := d.load(m); err != nil {
		return nil, err
	}
	return d, nil
}

// current says whether the snapshot still holds the model's weights: every weight's variable
// still holds the tensor it was read from. A weight changes only by its variable getting a new
// tensor (a train step's outputs, SetParam, a load, a weight sync or offload: GoMLX and stx
// never rewrite a variable's tensor in place), so comparing pointers sees every change without
// reading a value. The snapshot keeps the old tensors referenced, so a new tensor can never be
// allocated at an old one's address.
func (d *hostDecoder) current(m *Model) bool {
	if len(d.srcs) == 0 || len(d.srcs) != len(d.names) || d.bf16 != m.MixedPrecision() {
		return false
	}
	for i, name := range d.names {
		if !d.holds(m, name, d.srcs[i]) {
			return false
		}
	}
	return true
}

// holds says whether the named weight's variable holds tensor t.
func (d *hostDecoder) holds(m *Model, name string, t *tensors.Tensor) bool {
	v := m.Variable(name)
	if v == nil || !v.HasValue() {
		return false
	}
	vt, err := v.Value()
	return err == nil && vt == t
}

// load brings the snapshot up to date with the model's weights, in place: a part of it (a
// norm, a projection group, the head) is read again only when one of the weights it was read
// from has changed since (a LoRA run changes its adapters and the projections they merge into,
// never the embeddings, the norms or the head), into the buffers it already has. After an
// error the snapshot is not current and must be loaded again before use.
func (d *hostDecoder) load(m *Model) error {
	c := m.Config
	// The projections stay [out, in], as stored: rowMatMul reads them so (see matMul).
	if d.c != c || d.bf16 != m.MixedPrecision() || len(d.srcs) != len(d.names) {
		d.read = nil // a new shape or dtype: every part again
	}
	d.c, d.workers, d.transposed = c, max(1, runtime.GOMAXPROCS(0)), false
	d.bf16 = m.MixedPrecision()
	if d.read == nil {
		d.read = map[string]*tensors.Tensor{}
	}
	d.loadedBytes, d.storedBytes = 0, 0
	d.names, d.srcs = d.names[:0], d.srcs[:0]
	d.invFreq = d.invFreq[:0]
	for _, f := range c.RopeInvFreq() {
		d.invFreq = append(d.invFreq, float32(f))
	}
	if err := d.loadWeights(m); err != nil {
		d.srcs, d.read = d.srcs[:0], nil
		return fmt.Errorf("host decoder: %w", err)
	}
	if !d.bf16 {
		d.layersBF16, d.headBF16 = nil, nil
	}
	return nil
}

// forget makes the next load read every weight again (benchmarks: the cost of a train step
// that changed them all).
func (d *hostDecoder) forget() { d.read = nil }

// hostLayerBF16 holds a layer's projections as bfloat16 values (a model computing in bfloat16):
// the decode products read them (rowMatMulBF16), half the bytes of float32, the same products.
type hostLayerBF16 struct{ qkv, o, gateUp, down []uint16 }

func (d *hostDecoder) loadWeights(m *Model) error {
	c := m.Config
	hd := c.HeadDim()
	hid, qd, kvd, inter := c.Hidden, c.QDim(), c.KVHeads*hd, c.Intermediate
	var err error
	vec := func(dst *[]float32, name string) {
		if d.part = ""; err == nil && !d.unchanged(m, name) {
			err = d.readVector(m, dst, name)
		}
	}
	// proj reads a projection group into the float32 buffer, or, for a model computing in
	// bfloat16, into the bfloat16 one (rounded), the float32 one then left unused.
	proj := func(dst *[]float32, dstBF *[]uint16, in int, names []string, outs []int) {
		// "proj/": the tied head is a part of its own, read from the embeddings' weight.
		if d.part = "proj/"; err == nil && !d.unchanged(m, d.withAdapters(m, names)...) {
			if d.bf16 {
				*dst = nil
				err = d.readProjectionsBF16(m, dstBF, in, names, outs)
			} else {
				*dstBF = nil
				err = d.readProjections(m, dst, in, names, outs)
			}
		}
	}
	vec(&d.emb, "model.embed_tokens.weight")
	vec(&d.norm, "model.norm.weight")
	if c.TieEmbeddings && !d.bf16 && !m.adapted("model.embed_tokens") {
		// The head is the embedding matrix, [vocab, hidden] as a projection is stored: the
		// decoder reads the embeddings' copy, not a second one.
		d.head, d.headBF16 = d.emb, nil
	} else {
		head := "lm_head.weight"
		if c.TieEmbeddings {
			head = "model.embed_tokens.weight"
		}
		if c.TieEmbeddings && !d.bf16 {
			d.head = nil // a buffer of its own, not the embeddings'
		}
		proj(&d.head, &d.headBF16, hid, []string{head}, []int{c.VocabSize})
	}
	if len(d.layers) != c.Layers {
		d.layers = make([]hostLayer, c.Layers)
	}
	if d.bf16 && len(d.layersBF16) != c.Layers {
		d.layersBF16 = make([]hostLayerBF16, c.Layers)
	}
	var none hostLayerBF16 // the bfloat16 buffers of a float32 model: never used
	for l := range d.layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		ly, lb := &d.layers[l], &none
		if d.bf16 {
			lb = &d.layersBF16[l]
		}
		vec(&ly.inNorm, pre+"input_layernorm.weight")
		vec(&ly.postNorm, pre+"post_attention_layernorm.weight")
		proj(&ly.qkv, &lb.qkv, hid, []string{pre + "self_attn.q_proj.weight", pre + "self_attn.k_proj.weight", pre + "self_attn.v_proj.weight"},
			[]int{qd, kvd, kvd})
		if c.AttentionBias {
			bias := []string{pre + "self_attn.q_proj.bias", pre + "self_attn.k_proj.bias", pre + "self_attn.v_proj.bias"}
			if d.part = ""; err == nil && !d.unchanged(m, bias...) {
				ly.qkvBias = ly.qkvBias[:0]
				for _, name := range bias {
					var b []float32
					if err == nil {
						err = d.readVector(m, &b, name)
					}
					ly.qkvBias = append(ly.qkvBias, b...)
				}
			}
		} else {
			ly.qkvBias = nil
		}
		if c.QKNorm {
			vec(&ly.qNorm, pre+"self_attn.q_norm.weight")
			vec(&ly.kNorm, pre+"self_attn.k_norm.weight")
		}
		proj(&ly.o, &lb.o, qd, []string{pre + "self_attn.o_proj.weight"}, []int{hid})
		if c.OutputBias {
			vec(&ly.oBias, pre+"self_attn.o_proj.bias")
		}
		proj(&ly.gateUp, &lb.gateUp, hid, []string{pre + "mlp.gate_proj.weight", pre + "mlp.up_proj.weight"}, []int{inter, inter})
		proj(&ly.down, &lb.down, inter, []string{pre + "mlp.down_proj.weight"}, []int{hid})
	}
	return err
}

// withAdapters returns the names of the projections' weights and, for those with a LoRA
// adapter (merged into the decoder's copy), of its two matrices.
func (d *hostDecoder) withAdapters(m *Model, names []string) []string {
	all := names
	for _, name := range names {
		if module := strings.TrimSuffix(name, ".weight"); m.adapted(module) {
			all = append(all[:len(all):len(all)], module+".lora_A.weight", module+".lora_B.weight")
		}
	}
	return all
}

// unchanged says whether the snapshot's current part (d.part) read every named weight from the
// tensor its variable holds now; if so it records them as read again (see current), and the part they make needs
// no update.
func (d *hostDecoder) unchanged(m *Model, names ...string) bool {
	for _, name := range names {
		if t, ok := d.read[d.part+name]; !ok || !d.holds(m, name, t) {
			return false
		}
	}
	for _, name := range names {
		d.names, d.srcs = append(d.names, name), append(d.srcs, d.read[d.part+name])
	}
	return true
}

// source returns the tensor holding the named weight and records it as read by the snapshot.
func (d *hostDecoder) source(m *Model, name string) (*tensors.Tensor, error) {
	v := m.Variable(name)
	if v == nil {
		return nil, fmt.Errorf("model has no tensor %q", name)
	}
	t, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", name, err)
	}
	d.names, d.srcs = append(d.names, name), append(d.srcs, t)
	d.read[d.part+name] = t // the variable's own value: unchanged() compares against it
	switch t.DType() {
	case dtypes.Float32:
		d.loadedBytes += int64(4 * t.Size())
		return t, nil
	case dtypes.BFloat16:
		// A LoRA model's frozen base held in bfloat16: widened exactly, one tensor at a time,
		// so the decoder computes what the training graphs compute from the same weights.
		d.loadedBytes += int64(2 * t.Size())
		w, err := tensorFloat32s(t)
		if err != nil {
			return nil, fmt.Errorf("reading %q: %w", name, err)
		}
		return tensors.FromFlatDataAndDimensions(w, t.Shape().Dimensions...), nil
	}
	return nil, fmt.Errorf("reading %q: %s, want float32 or bfloat16", name, t.DType())
}

// readVector copies the named weight into *dst (resized).
func (d *hostDecoder) readVector(m *Model, dst *[]float32, name string) error {
	t, err := d.source(m, name)
	if err != nil {
		return err
	}
	*dst = grow(*dst, t.Size())
	d.storedBytes += int64(4 * t.Size())
	return tensors.ConstFlatData(t, func(src []float32) { copy(*dst, src) })
}

// readProjections sets *dst (resized) to the named matrices ([outs[i], in] row-major, as
// Hugging Face stores a projection) concatenated along the output axis, [Σ outs, in], or, when
// the decoder stores projections transposed, side by side: [in, Σ outs].
func (d *hostDecoder) readProjections(m *Model, dst *[]float32, in int, names []string, outs []int) error {
	total := 0
	for _, o := range outs {
		total += o
	}
	*dst = grow(*dst, in*total)
	d.storedBytes += int64(4 * in * total)
	return d.eachProjection(m, in, names, outs, func(w []float32, col, out int) {
		d.placeProjection(*dst, w, in, total, col, out)
	})
}

// readProjectionsBF16 is readProjections into bfloat16 values for a model computing in
// bfloat16: each weight rounded to the nearest bfloat16 as it is read, one pass over the
// trainer's float32 weights, no float32 copy.
func (d *hostDecoder) readProjectionsBF16(m *Model, dst *[]uint16, in int, names []string, outs []int) error {
	total := 0
	for _, o := range outs {
		total += o
	}
	if cap(*dst) < in*total {
		*dst = make([]uint16, in*total)
	}
	*dst = (*dst)[:in*total]
	d.storedBytes += int64(2 * in * total)
	return d.eachProjection(m, in, names, outs, func(w []float32, col, out int) {
		part := (*dst)[col*in : (col+out)*in]
		d.parallel(len(part), func(_, lo, hi int) { rowNarrowBF16(part[lo:hi], w[lo:hi]) })
	})
}

// eachProjection reads the named projections ([outs[i], in] each) and hands each one's float32
// values, with its LoRA adapter merged in where it has one, to place with its first output
// column (the running sum of outs) and its output count.
func (d *hostDecoder) eachProjection(m *Model, in int, names []string, outs []int, place func(w []float32, col, out int)) error {
	col := 0
	for p, name := range names {
		t, err := d.source(m, name)
		if err != nil {
			return err
		}
		if t.Size() != outs[p]*in {
			return fmt.Errorf("tensor %q has shape %s, want [%d, %d]", name, t.Shape(), outs[p], in)
		}
		if module := strings.TrimSuffix(name, ".weight"); m.adapted(module) {
			var w []float32
			if w, err = d.merged(m, t, module); err == nil {
				place(w, col, outs[p])
			}
		} else {
			err = tensors.ConstFlatData(t, func(w []float32) { place(w, col, outs[p]) })
		}
		if err != nil {
			return fmt.Errorf("reading %q: %w", name, err)
		}
		col += outs[p]
	}
	return nil
}

// merged returns the projection module's weight t with its LoRA adapter merged in, in fresh
// memory, the adapters recorded as read.
func (d *hostDecoder) merged(m *Model, t *tensors.Tensor, module string) ([]float32, error) {
	for _, ab := range []string{".lora_A.weight", ".lora_B.weight"} {
		if _, err := d.source(m, module+ab); err != nil {
			return nil, err
		}
	}
	w, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return nil, err
	}
	return m.mergedProjection(module, w)
}

// placeProjection writes w ([out, in]) into dst at output column col of total (see
// readProjections).
func (d *hostDecoder) placeProjection(dst, w []float32, in, total, col, out int) {
	if !d.transposed {
		copy(dst[col*in:], w[:out*in])
		return
	}
	// Sixteen source rows at a time, so that each destination row is written in runs of
	// sixteen rather than one element per cache line; the blocks split across the workers.
	d.parallel((out+15)/16, func(_, lo, hi int) {
		for j0 := lo * 16; j0 < min(hi*16, out); j0 += 16 {
			j1 := min(j0+16, out)
			for i := range in {
				run := dst[i*total+col+j0 : i*total+col+j1]
				for j := range run {
					run[j] = w[(j0+j)*in+i]
				}
			}
		}
	})
}

// parallel runs fn over [0, n) split across the decoder's workers (see parallelFor).
func (d *hostDecoder) parallel(n int, fn func(worker, lo, hi int)) { parallelFor(d.workers, n, fn) }

// parallelFor runs fn over [0, n) split into one contiguous range per worker (fewer when n is
// small), the last range on the calling goroutine. Every item is computed by exactly one call,
// so results never depend on the split.
func parallelFor(workers, n int, fn func(worker, lo, hi int)) {
	workers = min(workers, n)
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for w, lo := 0, 0; lo < n; w, lo = w+1, lo+chunk {
		hi := min(lo+chunk, n)
		if hi == n {
			fn(w, lo, hi)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, lo, hi)
		}()
	}
	wg.Wait()
}

// matMul computes out = x·Wᵀ for x [rows, inDim] and the projection W [outDim, inDim] with
// rowMatMul, whose every output row depends on its input row alone, so that a sequence's
// samples never depend on the other rows of its batch (OpenBLAS rounds a row differently
// with the number of rows of the call; see rowmatmul.go).
// With bf16 the weights are rounded already; x is rounded into a scratch first (bfloat16 bits
// for the bfloat16 dot-product kernels, which the bfloat16 weights take unless widenInputs)
// and the product rounded in place.
// wb, when not nil, is W as bfloat16 values (see hostLayerBF16), read instead of w.
func (d *hostDecoder) matMul(out []float32, w []float32, wb []uint16, x []float32, rows, outDim, inDim int) {
	if d.bf16 && wb != nil && !d.widenInputs {
		if cap(d.xb16) < rows*inDim {
			d.xb16 = make([]uint16, rows*inDim)
		}
		d.xb16 = d.xb16[:rows*inDim]
		rowNarrowBF16(d.xb16, x[:rows*inDim])
		rowMatMulBF16Dot(d.workers, out, wb, d.xb16, rows, outDim, inDim)
		cpu.RoundToBF16(out[:rows*outDim], out[:rows*outDim])
		return
	}
	if d.bf16 {
		d.xb = grow(d.xb, rows*inDim)
		cpu.RoundToBF16(d.xb, x[:rows*inDim])
		x = d.xb
	}
	if wb != nil {
		rowMatMulBF16(d.workers, out, wb, x, rows, outDim, inDim)
	} else {
		rowMatMul(d.workers, out, w, x, rows, outDim, inDim)
	}
	if d.bf16 {
		cpu.RoundToBF16(out[:rows*outDim], out[:rows*outDim])
	}
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func (d *hostDecoder) rmsNorm(out, x, w []float32, rows int) {
	d.rmsNormWidth(out, x, w, rows, d.c.Hidden)
}

// rmsNormWidth normalises rows rows of n values each (n = len(w)).
func (d *hostDecoder) rmsNormWidth(out, x, w []float32, rows, n int) {
	for r := range rows {
		xr, or := x[r*n:(r+1)*n], out[r*n:(r+1)*n]
		var ms float32
		for _, v := range xr {
			ms += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ms/float32(n))+d.c.RMSNormEps))
		for i, v := range xr {
			or[i] = v * inv * w[i]
		}
	}
}

// rope rotates heads [heads][hd] of one token row by the angles whose cosines and sines are
// cos, sin [hd/2] (rotate-half).
func rope(x []float32, heads, hd int, cos, sin []float32) {
	half := hd / 2
	for h := range heads {
		x1, x2 := x[h*hd:h*hd+half], x[h*hd+half:(h+1)*hd]
		for i, c := range cos[:half] {
			s := sin[i]
			a, b := x1[i], x2[i]
			x1[i] = a*c - b*s
			x2[i] = b*c + a*s
		}
	}
}

// hostSeq is one sequence's key/value cache for the host decoder: per layer, keys and values
// [kvHeads, capacity, headDim] (values not transposed, unlike the graph decode's), the first
// n slots filled, slot i holding position i (sequences are not padded).
type hostSeq struct {
	k, v     [][]float32
	capacity int
	n        int
}

// newHostSeq returns a sequence with room for capacity positions, in fresh memory.
func newHostSeq(c Config, capacity int) *hostSeq {
	size := c.KVHeads * capacity * c.HeadDim()
	q := &hostSeq{k: make([][]float32, c.Layers), v: make([][]float32, c.Layers), capacity: capacity}
	for l := range q.k {
		q.k[l], q.v[l] = make([]float32, size), make([]float32, size)
	}
	return q
}

// copyPrefix makes q's first n slots those of src (same model, capacities ≥ n): a sequence
// that starts with the same n tokens has the same keys and values there, computed once.
func (q *hostSeq) copyPrefix(src *hostSeq, hd, n int) {
	for l := range q.k {
		kvh := len(q.k[l]) / (q.capacity * hd)
		for g := range kvh {
			at, from := g*q.capacity*hd, g*src.capacity*hd
			copy(q.k[l][at:at+n*hd], src.k[l][from:from+n*hd])
			copy(q.v[l][at:at+n*hd], src.v[l][from:from+n*hd])
		}
	}
	q.n = n
}

// step runs counts[i] new tokens of each sequence seqs[i] through the model (one each when
// counts is nil): tokens holds them one sequence after the other; the t-th of sequence i takes
// position and cache slot seqs[i].n+t and attends to slots 0…seqs[i].n+t; each sequence's n
// then grows by its count. A decode step has one token per sequence; a prefill runs one or
// more prompts, or spans of them, at once. Every product goes through rowMatMul, whose output
// rows depend on their input rows alone, so a token's results are the same whether it is
// decoded alone, among other sequences' tokens or in a prefill. The logits of each
// sequence's last token go to logits [len(seqs), vocab].
func (d *hostDecoder) step(seqs []*hostSeq, counts []int, tokens []int32, logits []float32) {
	c := d.c
	rows := len(seqs)
	n := len(tokens) // token rows
	hid, hd, kvh, qd := c.Hidden, c.HeadDim(), c.KVHeads, c.QDim()
	kvd, group, half := kvh*hd, c.Heads/kvh, hd/2
	qkvDim, inter := qd+2*kvd, c.Intermediate
	d.x = grow(d.x, n*hid)
	d.h = grow(d.h, n*hid)
	d.qkv = grow(d.qkv, n*qkvDim)
	d.attn = grow(d.attn, n*qd)
	d.gu = grow(d.gu, n*2*inter)
	d.act = grow(d.act, n*inter)
	d.mlp = grow(d.mlp, n*hid)
	d.cos = grow(d.cos, n*half)
	d.sin = grow(d.sin, n*half)
	for len(d.scores) < d.workers {
		d.scores = append(d.scores, nil)
	}
	for len(d.qs) < d.workers {
		d.qs = append(d.qs, make([]float32, hd))
	}
	// rowSeq and rowSlot: each token row's sequence and cache slot (= position); lastRow:
	// each sequence's last token row.
	d.rowSeq, d.rowSlot, d.lastRow = d.rowSeq[:0], d.rowSlot[:0], d.lastRow[:0]
	longest := 0
	for i, q := range seqs {
		cnt := 1
		if counts != nil {
			cnt = counts[i]
		}
		for t := range cnt {
			d.rowSeq, d.rowSlot = append(d.rowSeq, i), append(d.rowSlot, q.n+t)
		}
		d.lastRow = append(d.lastRow, len(d.rowSeq)-1)
		longest = max(longest, q.n+cnt)
	}
	if len(d.rowSeq) != n {
		panic(fmt.Sprintf("host decoder: %d tokens for %d token rows", n, len(d.rowSeq)))
	}
	for w := range d.scores {
		d.scores[w] = grow(d.scores[w], longest)
	}
	for i, tok := range tokens {
		copy(d.x[i*hid:(i+1)*hid], d.emb[int(tok)*hid:(int(tok)+1)*hid])
		// The rotation angles depend only on the position: computed once for all layers.
		for j, f := range d.invFreq {
			a := float64(float32(d.rowSlot[i]) * f) // as the graph: float32 position × float32 frequency
			d.cos[i*half+j], d.sin[i*half+j] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	var lb hostLayerBF16
	for l, ly := range d.layers {
		if d.layersBF16 != nil {
			lb = d.layersBF16[l]
		}
		d.rmsNorm(d.h, d.x, ly.inNorm, n)
		d.matMul(d.qkv, ly.qkv, lb.qkv, d.h, n, qkvDim, hid)
		// RoPE, then every new key and value into the cache before any attention: a prompt's
		// tokens attend to the keys of the same call.
		d.parallel(n, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				qkv := d.qkv[i*qkvDim : (i+1)*qkvDim]
				if ly.qkvBias != nil {
					for j, b := range ly.qkvBias {
						qkv[j] += b
					}
				}
				if ly.qNorm != nil { // Qwen3: RMSNorm of every head before RoPE
					d.rmsNormWidth(qkv[:qd], qkv[:qd], ly.qNorm, c.Heads, hd)
					d.rmsNormWidth(qkv[qd:qd+kvd], qkv[qd:qd+kvd], ly.kNorm, kvh, hd)
				}
				cs, sn := d.cos[i*half:(i+1)*half], d.sin[i*half:(i+1)*half]
				rope(qkv[:qd], c.Heads, hd, cs, sn)
				rope(qkv[qd:qd+kvd], kvh, hd, cs, sn)
				q, s := seqs[d.rowSeq[i]], d.rowSlot[i]
				kc, vc := q.k[l], q.v[l]
				for g := range kvh {
					at := (g*q.capacity + s) * hd
					copy(kc[at:at+hd], qkv[qd+g*hd:qd+(g+1)*hd])
					copy(vc[at:at+hd], qkv[qd+kvd+g*hd:qd+kvd+(g+1)*hd])
					if d.bf16 { // keys and values only ever enter bfloat16 products
						cpu.RoundToBF16(kc[at:at+hd], kc[at:at+hd])
						cpu.RoundToBF16(vc[at:at+hd], vc[at:at+hd])
					}
				}
			}
		})
		// Attention, one (token row, head) pair at a time.
		d.parallel(n*c.Heads, func(w, lo, hi int) {
			for it := lo; it < hi; it++ {
				i, h := it/c.Heads, it%c.Heads
				q, s, blk := seqs[d.rowSeq[i]], d.rowSlot[i], h/group
				span := q.capacity * hd
				d.attendHead(w, q.k[l][blk*span:(blk+1)*span], q.v[l][blk*span:(blk+1)*span],
					0, s, d.qkv[i*qkvDim+h*hd:i*qkvDim+(h+1)*hd], d.attn[i*qd+h*hd:i*qd+(h+1)*hd])
			}
		})
		d.matMul(d.mlp, ly.o, lb.o, d.attn, n, hid, qd)
		if ly.oBias != nil {
			for i := range n {
				addInto(d.mlp[i*hid:(i+1)*hid], ly.oBias)
			}
		}
		addInto(d.x, d.mlp)
		d.rmsNorm(d.h, d.x, ly.postNorm, n)
		d.matMul(d.gu, ly.gateUp, lb.gateUp, d.h, n, 2*inter, hid)
		d.parallel(n, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				g, u, a := d.gu[i*2*inter:i*2*inter+inter], d.gu[i*2*inter+inter:(i+1)*2*inter], d.act[i*inter:(i+1)*inter]
				siluMul(a, g, u) // SiLU(gate)·up
			}
		})
		d.matMul(d.mlp, ly.down, lb.down, d.act, n, hid, inter)
		addInto(d.x, d.mlp)
	}
	for i, q := range seqs {
		q.n = d.rowSlot[d.lastRow[i]] + 1
	}
	// Only each sequence's last token needs logits.
	last := d.x
	if n > rows {
		d.last = grow(d.last, rows*hid)
		for r, i := range d.lastRow {
			copy(d.last[r*hid:(r+1)*hid], d.x[i*hid:(i+1)*hid])
		}
		last = d.last
	}
	d.rmsNorm(d.h, last, d.norm, rows)
	d.matMul(logits, d.head, d.headBF16, d.h, rows, c.VocabSize, hid)
}

// attendHead computes one head's attention output out [hd] for the query q [hd] over the
// cache slots first…s of one key/value block, kc and vc [capacity, hd]. Both are read as one
// sequential run: a transposed value cache ([hd, capacity], read as hd strided rows) made the
// step's attention over a cache that no longer fits in cache about twice slower.
// With the cpu package's C kernels one cgo call does all of it, vectorised (see cpu.Attend: the
// query·key sums in another order than scaledDots', the rest bit-identical).
func (d *hostDecoder) attendHead(w int, kc, vc []float32, first, s int, q, out []float32) {
	hd := len(q)
	sc := d.scores[w][:s+1-first]
	scale := float32(1 / math.Sqrt(float64(hd)))
	if d.bf16 {
		d.attendHeadBF16(w, kc, vc, first, s, q, out, scale)
		return
	}
	if cpu.HasAttend && !d.goAttention {
		cpu.Attend(q, kc[first*hd:], vc[first*hd:], scale, sc, out)
		return
	}
	scaledDots(sc, kc[first*hd:], hd, q, scale)
	den := softmaxUnnormalised(sc)
	weightedSum(out, vc[first*hd:], hd, sc, 1/den)
}

// attendHeadBF16 is attendHead for a model computing in bfloat16, the graph's way: the scaled
// query rounded (the graph folds the scale into RoPE's tables), the scores q·k rounded, the
// softmax's weights in float32, its numerators rounded for the weighted sum of the (rounded)
// values, and that sum rounded before the division by the float32 denominator. With the cpu
// package's C kernels, one call (cpu.AttendBF16, the query·key sums in another order).
func (d *hostDecoder) attendHeadBF16(w int, kc, vc []float32, first, s int, q, out []float32, scale float32) {
	hd := len(q)
	sc := d.scores[w][:s+1-first]
	qs := d.qs[w][:hd]
	for i, v := range q {
		qs[i] = v * scale
	}
	cpu.RoundToBF16(qs, qs)
	if cpu.HasAttend && !d.goAttention {
		cpu.AttendBF16(qs, kc[first*hd:], vc[first*hd:], sc, out)
		return
	}
	scaledDots(sc, kc[first*hd:], hd, qs, 1)
	cpu.RoundToBF16(sc, sc)
	den := softmaxUnnormalised(sc)
	cpu.RoundToBF16(sc, sc)
	weightedSum(out, vc[first*hd:], hd, sc, 1)
	cpu.RoundToBF16(out, out)
	for i := range out {
		out[i] /= den
	}
}

// softmaxUnnormalised replaces x by exp(x - max x) and returns the sum of the results.
func softmaxUnnormalised(x []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var den float32
	for j, v := range x {
		e := cpu.Exp32(v - mx)
		x[j] = e
		den += e
	}
	return den
}

// scaledDots sets out[j] = scale · (rows[j·stride : j·stride+len(x)] · x) for each j. Attention
// over the cache is a few hundred such products per step, too small for a GEMM call each
// (OpenBLAS packs both operands at every call; measured no faster, also with all heads of a row
// batched into one call): Go loops that share each load of x across four rows.
func scaledDots(out, rows []float32, stride int, x []float32, scale float32) {
	n := len(x)
	j := 0
	for ; j+4 <= len(out); j += 4 {
		o := j * stride
		s0, s1, s2, s3 := dot4(x, rows[o:o+n], rows[o+stride:o+stride+n], rows[o+2*stride:o+2*stride+n], rows[o+3*stride:o+3*stride+n])
		out[j], out[j+1], out[j+2], out[j+3] = s0*scale, s1*scale, s2*scale, s3*scale
	}
	for ; j < len(out); j++ {
		out[j] = dot(x, rows[j*stride:j*stride+n]) * scale
	}
}

// dot returns x·y (len(y) ≥ len(x)) with four partial sums, which hide the add latency.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// weightedSum sets out[i] = scale · Σ_j p[j]·rows[j·stride+i]: four rows at a time, so that out
// is loaded and stored once per four rows while the rows stream through in order.
func weightedSum(out, rows []float32, stride int, p []float32, scale float32) {
	clear(out)
	n := len(out)
	j := 0
	for ; j+4 <= len(p); j += 4 {
		p0, p1, p2, p3 := p[j], p[j+1], p[j+2], p[j+3]
		o := j * stride
		r0, r1, r2, r3 := rows[o:o+n], rows[o+stride:o+stride+n], rows[o+2*stride:o+2*stride+n], rows[o+3*stride:o+3*stride+n]
		for i := range out {
			out[i] += p0*r0[i] + p1*r1[i] + p2*r2[i] + p3*r3[i]
		}
	}
	for ; j < len(p); j++ {
		pj, r := p[j], rows[j*stride:j*stride+n]
		for i := range out {
			out[i] += pj * r[i]
		}
	}
	for i := range out {
		out[i] *= scale
	}
}

// dot4 returns x·a, x·b, x·c, x·e (each at least len(x) long): every element of x is loaded
// once for the four products, and two partial sums per product hide the add latency.
func dot4(x, a, b, c, e []float32) (float32, float32, float32, float32) {
	n := len(x)
	a, b, c, e = a[:n], b[:n], c[:n], e[:n]
	var a0, a1, b0, b1, c0, c1, e0, e1 float32
	i := 0
	for ; i+2 <= n; i += 2 {
		x0, x1 := x[i], x[i+1]
		a0 += x0 * a[i]
		a1 += x1 * a[i+1]
		b0 += x0 * b[i]
		b1 += x1 * b[i+1]
		c0 += x0 * c[i]
		c1 += x1 * c[i+1]
		e0 += x0 * e[i]
		e1 += x1 * e[i+1]
	}
	if i < n {
		a0 += x[i] * a[i]
		b0 += x[i] * b[i]
		c0 += x[i] * c[i]
		e0 += x[i] * e[i]
	}
	return a0 + a1, b0 + b1, c0 + c1, e0 + e1
}

// siluMul sets a[j] = SiLU(g[j])·u[j] = g[j]/(1+e^-g[j])·u[j]. Four elements go through the
// exponential's polynomial together (written out, as one call per element left the CPU
// waiting on each polynomial's chain of dependent operations).
func siluMul(a, g, u []float32) {
	u, a = u[:len(g)], a[:len(g)]
	j := 0
	for ; j+4 <= len(g); j += 4 {
		x0, x1, x2, x3 := -g[j], -g[j+1], -g[j+2], -g[j+3]
		if !(x0 >= -87 && x0 <= 87 && x1 >= -87 && x1 <= 87 && x2 >= -87 && x2 <= 87 && x3 >= -87 && x3 <= 87) {
			for k := j; k < j+4; k++ {
				a[k] = g[k] / (1 + cpu.Exp32(-g[k])) * u[k]
			}
			continue
		}
		e0, e1, e2, e3 := expPoly4(x0, x1, x2, x3)
		a[j] = g[j] / (1 + e0) * u[j]
		a[j+1] = g[j+1] / (1 + e1) * u[j+1]
		a[j+2] = g[j+2] / (1 + e2) * u[j+2]
		a[j+3] = g[j+3] / (1 + e3) * u[j+3]
	}
	for ; j < len(g); j++ {
		a[j] = g[j] / (1 + cpu.Exp32(-g[j])) * u[j]
	}
}

// expPoly4 is cpu.Exp32 of four values in [-87, 87], the lanes interleaved so that their operations overlap.
func expPoly4(x0, x1, x2, x3 float32) (float32, float32, float32, float32) {
	const (
		log2e   = 1.44269504088896341
		ln2Hi   = 0.693359375
		ln2Lo   = -2.12194440e-4
		shifter = 12582912
		c0      = 1.9875691500e-4
		c1      = 1.3981999507e-3
		c2      = 8.3334519073e-3
		c3      = 4.1665795894e-2
		c4      = 1.6666665459e-1
		c5      = 5.0000001201e-1
	)
	k0, k1, k2, k3 := x0*log2e+shifter, x1*log2e+shifter, x2*log2e+shifter, x3*log2e+shifter
	f0, f1, f2, f3 := k0-shifter, k1-shifter, k2-shifter, k3-shifter
	r0, r1, r2, r3 := x0-f0*ln2Hi-f0*ln2Lo, x1-f1*ln2Hi-f1*ln2Lo, x2-f2*ln2Hi-f2*ln2Lo, x3-f3*ln2Hi-f3*ln2Lo
	p0, p1, p2, p3 := c0*r0+c1, c0*r1+c1, c0*r2+c1, c0*r3+c1
	p0, p1, p2, p3 = p0*r0+c2, p1*r1+c2, p2*r2+c2, p3*r3+c2
	p0, p1, p2, p3 = p0*r0+c3, p1*r1+c3, p2*r2+c3, p3*r3+c3
	p0, p1, p2, p3 = p0*r0+c4, p1*r1+c4, p2*r2+c4, p3*r3+c4
	p0, p1, p2, p3 = p0*r0+c5, p1*r1+c5, p2*r2+c5, p3*r3+c5
	y0, y1, y2, y3 := p0*r0*r0+r0+1, p1*r1*r1+r1+1, p2*r2*r2+r2+1, p3*r3*r3+r3+1
	scale := func(k float32) float32 {
		return math.Float32frombits(uint32(int32(math.Float32bits(k))-0x4B400000+127) << 23)
	}
	return y0 * scale(k0), y1 * scale(k1), y2 * scale(k2), y3 * scale(k3)
}

func addInto(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}
