package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/safetensors"
)

// The frozen base of a LoRA model may be held in bfloat16 while the adapters, their gradients
// and their optimizer state stay float32 (lora.base_dtype): half the memory of the weights
// that no optimizer step ever changes. Only the matrices are narrowed (projections,
// embeddings, the LM head): norms and biases are a few thousand values and stay float32, so
// the float32 activations never meet a bfloat16 vector. Graphs read a narrowed matrix as it
// is: a bfloat16-compute model multiplies with it directly, a float32-compute one widens it at
// each use (DotGeneralIn), exactly, so that a bfloat16-stored base computes the log-probs it
// computed when it was widened at load; the backward pass widens it again rather than keeping
// the forward's float32 copy alive until then (dotGeneralGrad).

// LoRA base dtypes (lora.base_dtype).
const (
	LoRABaseStored   = ""         // the dtype the base was stored in (bfloat16 stays bfloat16)
	LoRABaseBFloat16 = "bfloat16" // narrowed to bfloat16 (rounded to nearest even)
	LoRABaseFloat32  = "float32"  // widened to float32 (today's full-precision copy)
)

// baseHoldDType returns the dtype in which the frozen base tensor name (of the given shape,
// stored in file dtype stored) is held for the setting want.
func baseHoldDType(want, name string, shape []int, stored safetensors.DType) dtypes.DType {
	if len(shape) != 2 || name == "score.weight" {
		return dtypes.Float32 // vectors, and the value head, which trains
	}
	switch want {
	case LoRABaseBFloat16:
		return dtypes.BFloat16
	case LoRABaseStored:
		if stored == safetensors.BF16 {
			return dtypes.BFloat16
		}
	}
	return dtypes.Float32
}

// holdBase re-holds the frozen base tensors in the dtypes that want says (see baseHoldDType).
// A tensor converts in place of its variable, one at a time, so that the model never holds
// two full copies.
func (m *Model) holdBase(want string) error {
	for _, p := range m.params {
		v := m.Variable(p.Name)
		if v == nil || v.Trainable {
			continue
		}
		dt := baseHoldDType(want, p.Name, p.Shape, m.dtypes[p.Name])
		if v.Shape().DType == dt {
			continue
		}
		data, err := m.ParamValues(p.Name)
		if err != nil {
			return err
		}
		var t *tensors.Tensor
		if dt == dtypes.BFloat16 {
			t = bf16Tensor(data, p.Shape)
		} else {
			t = tensors.FromFlatDataAndDimensions(data, p.Shape...)
		}
		if err := v.SetValue(t); err != nil {
			return fmt.Errorf("lora: holding %q in %s: %w", p.Name, dt, err)
		}
	}
	return nil
}

// BaseBytes returns the bytes the model's weights that no optimizer trains (the frozen base
// of a LoRA model) take, as held.
func (m *Model) BaseBytes() int64 {
	var n int64
	for _, p := range m.params {
		if v := m.Variable(p.Name); v != nil && !v.Trainable {
			n += int64(v.Shape().Memory())
		}
	}
	return n
}

// bf16Tensor returns data (row-major) as a bfloat16 tensor, each value rounded to nearest even.
func bf16Tensor(data []float32, shape []int) *tensors.Tensor {
	out := make([]bfloat16.BFloat16, len(data))
	for i, f := range data {
		out[i] = bf16RNE(f)
	}
	return tensors.FromFlatDataAndDimensions(out, shape...)
}

// bf16RNE narrows f to bfloat16 with round-to-nearest-even (bfloat16.FromFloat32 truncates);
// NaNs stay NaNs.
func bf16RNE(f float32) bfloat16.BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return bfloat16.BFloat16(uint16(b>>16) | 0x0040)
	}
	b += 0x7fff + (b>>16)&1
	return bfloat16.BFloat16(b >> 16)
}

// tensorFloat32s returns a copy of t's values as float32: float32 as is, bfloat16 widened
// (exactly).
func tensorFloat32s(t *tensors.Tensor) ([]float32, error) {
	if t.DType() != dtypes.BFloat16 {
		return tensors.CopyFlatData[float32](t)
	}
	h, err := tensors.CopyFlatData[bfloat16.BFloat16](t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(h))
	for i, v := range h {
		out[i] = v.Float32()
	}
	return out, nil
}

// OpenModelForLoRA is OpenModel for a model that will get adapters (AddLoRA) with its base
// held as baseDType says: a model directory's matrices that are to be held in bfloat16 are
// read into bfloat16 tensors directly, without the float32 copy that a load would otherwise
// make (and AddLoRA would then narrow), which sets the peak memory of a LoRA run.
func OpenModelForLoRA(spec string, seed uint64, baseDType string) (*Model, error) {
	if err := (LoRAConfig{Rank: 1, Alpha: 1, Targets: []string{LoRAAllLinear}, BaseDType: baseDType}).Validate(); err != nil {
		return nil, err
	}
	if _, ok := BuiltinConfig(spec); ok {
		return OpenModel(spec, seed)
	}
	if st, err := os.Stat(spec); err != nil || !st.IsDir() {
		return OpenModel(spec, seed) // its error
	}
	return loadModel(spec, func(p Param, t safetensors.Tensor) (*tensors.Tensor, error) {
		if baseHoldDType(baseDType, p.Name, p.Shape, t.DType) != dtypes.BFloat16 {
			return nil, nil
		}
		return bf16FromFile(t)
	})
}

// bf16FromFile returns safetensors tensor t (BF16 as is, other float dtypes rounded to
// nearest even) as a bfloat16 tensor, refusing non-finite values as a load does.
func bf16FromFile(t safetensors.Tensor) (*tensors.Tensor, error) {
	n := t.NumElements()
	out := make([]bfloat16.BFloat16, n)
	if t.DType == safetensors.BF16 {
		if len(t.Data) != 2*n {
			return nil, fmt.Errorf("tensor %q: %d bytes for %d bfloat16 values", t.Name, len(t.Data), n)
		}
		for i := range out {
			out[i] = bfloat16.BFloat16(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	} else {
		data, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		for i, f := range data {
			out[i] = bf16RNE(f)
		}
	}
	for i, h := range out {
		if h&0x7f80 == 0x7f80 { // exponent all ones: Inf or NaN
			return nil, fmt.Errorf("tensor %q: element %d is %v: the weights are not finite", t.Name, i, h.Float32())
		}
	}
	return tensors.FromFlatDataAndDimensions(out, t.Shape...), nil
}
