package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/runtime/safetensors"
)

// decodeParam sets the float32 weight p from a BF16 or F32 file tensor t decoded straight into
// the variable's new storage, and reports whether it did (other dtypes, and a weight its
// variable holds in another dtype, go through Float32s and SetParam). Decoding into a slice
// that SetParam then copies into a tensor wrote every weight to fresh memory twice: the copy
// was 60 % of a load's time here (a 196M-parameter BF16 file: 10.6 s a load, 15.6 s of 25 s of
// CPU in the copy), first-touch page faults being slow on this kind of machine. Non-finite
// weights are refused as setFromTensors refuses them.
func (m *Model) decodeParam(p Param, t safetensors.Tensor) (bool, error) {
	v := m.Variable(p.Name)
	if v != nil && v.Shape().DType != dtypes.Float32 {
		return false, nil
	}
	n := shapeSize(p.Shape)
	if (t.DType != safetensors.BF16 && t.DType != safetensors.F32) || len(t.Data) != n*t.DType.Size() {
		return false, nil
	}
	val := tensors.FromShape(shapes.Make(dtypes.Float32, p.Shape...))
	var bad error
	err := tensors.MutableFlatData(val, func(dst []float32) {
		d := t.Data
		if t.DType == safetensors.BF16 {
			for i := range dst {
				dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[2*i:])) << 16)
			}
		} else {
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
			}
		}
		if i := slices.IndexFunc(dst, func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }); i >= 0 {
			bad = fmt.Errorf("tensor %q: element %d is %v: the weights are not finite", p.Name, i, dst[i])
		}
	})
	if err != nil {
		return false, fmt.Errorf("tensor %q: %w", p.Name, err)
	}
	if bad != nil {
		return false, bad
	}
	if err := m.setTensor(p.Name, val); err != nil {
		return false, err
	}
	return true, nil
}
