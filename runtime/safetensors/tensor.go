package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tensor is one named tensor: its element type, its shape (row-major, an empty
// shape is a scalar) and its raw little-endian bytes.
//
// Tensors returned by Decode and ReadFile share Data with the decoded buffer.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
	// Fill, when set (and Data nil), produces the data as the tensor is written, so that a
	// large file is encoded one tensor at a time (a checkpoint's optimizer state) instead of
	// holding every tensor's bytes at once.
	Fill func() ([]byte, error)
}

// Size returns the tensor's data size in bytes, from its dtype and shape (valid tensors).
func (t Tensor) Size() int64 {
	n, _ := byteSize(t.DType, t.Shape)
	return int64(n)
}

// bytes returns the tensor's data: Data, or what Fill produces, checked against the shape.
func (t Tensor) bytes() ([]byte, error) {
	if t.Fill == nil {
		return t.Data, nil
	}
	data, err := t.Fill()
	if err != nil {
		return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	if int64(len(data)) != t.Size() {
		return nil, fmt.Errorf("safetensors: tensor %q: filled %d data bytes, but %s%v needs %d",
			t.Name, len(data), t.DType, t.Shape, t.Size())
	}
	return data, nil
}

// NumElements returns the product of the shape's dimensions (1 for a scalar).
// Overflow is not checked here; Decode and Encode check it.
func (t Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s returns the elements converted to float32: F32 as is, F16 and BF16
// widened exactly, F64 rounded to nearest. Other dtypes are an error.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	n := t.NumElements()
	out := make([]float32, n)
	d := t.Data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = bf16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:])))
		}
	default:
		return nil, fmt.Errorf("safetensors: tensor %q: cannot convert %s to float32", t.Name, t.DType)
	}
	return out, nil
}

// FromFloat32 returns an F32 tensor holding a copy of data.
// len(data) should equal the product of shape; Encode rejects a mismatch.
func FromFloat32(name string, shape []int, data []float32) Tensor {
	t, _ := FromFloat32As(name, F32, shape, data) // F32 never fails
	return t
}

// FromFloat32As returns a tensor of dtype dt (F32, BF16, F16 or F64) holding
// data, narrowed with round-to-nearest-even where dt is smaller than float32.
func FromFloat32As(name string, dt DType, shape []int, data []float32) (Tensor, error) {
	t := Tensor{Name: name, DType: dt, Shape: append([]int(nil), shape...)}
	switch dt {
	case F32:
		t.Data = make([]byte, 4*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
		}
	case BF16:
		t.Data = make([]byte, 2*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint16(t.Data[2*i:], f32ToBF16(v))
		}
	case F16:
		t.Data = make([]byte, 2*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint16(t.Data[2*i:], f32ToF16(v))
		}
	case F64:
		t.Data = make([]byte, 8*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint64(t.Data[8*i:], math.Float64bits(float64(v)))
		}
	default:
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: cannot store float32 data as %q", name, dt)
	}
	return t, nil
}

// check verifies that the dtype is known, the dimensions are non-negative,
// and len(Data) equals elements × element size, without overflowing.
func (t Tensor) check() error {
	if !t.DType.Valid() {
		return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	n, err := byteSize(t.DType, t.Shape)
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	if t.Fill != nil {
		if t.Data != nil {
			return fmt.Errorf("safetensors: tensor %q: both Data and Fill set", t.Name)
		}
		return nil
	}
	if uint64(len(t.Data)) != n {
		return fmt.Errorf("safetensors: tensor %q: %d data bytes, but %s%v needs %d",
			t.Name, len(t.Data), t.DType, t.Shape, n)
	}
	return nil
}

// byteSize returns elements × element size of a shape, rejecting negative
// dimensions and sizes that do not fit an int.
func byteSize(dt DType, shape []int) (uint64, error) {
	n := uint64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/uint64(d) {
			return 0, fmt.Errorf("shape %v of %s overflows", shape, dt)
		}
		n *= uint64(d)
	}
	return n, nil
}
