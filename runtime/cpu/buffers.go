package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Buffer is the cpu backend's tensor storage: a flat row-major Go slice ([]T for the shape's
// dtype) and its shape.
type Buffer struct {
	shape shapes.Shape
	flat  any
	// shared buffers were handed to the caller by NewSharedBuffer: the caller may write their
	// slice, so they are never donated nor written in place.
	shared atomic.Bool
	valid  bool
	device backends.DeviceNum // the virtual device the buffer belongs to (devices.go)
}

// poolKey identifies interchangeable flat slices: same element type, same length.
type poolKey struct {
	dtype  dtypes.DType
	length int
}

// maxPooledBytes bounds the memory the pool keeps for reuse; beyond it, released slices are
// left to the garbage collector.
const maxPooledBytes = 512 << 20

// bufferPool recycles flat slices between nodes and between executions. It is safe for
// concurrent use. Unlike a sync.Pool it survives garbage collections: the large activations of
// a train step would otherwise be dropped at every GC cycle and reallocated (and zeroed).
type bufferPool struct {
	mu    sync.Mutex
	free  map[poolKey][]any
	bytes int
}

// get returns a flat slice of the dtype and length, not zeroed: every kernel writes all of its
// output.
func (p *bufferPool) get(dtype dtypes.DType, length int) any {
	if length == 0 {
		return makeFlat(dtype, 0)
	}
	key := poolKey{dtype, length}
	p.mu.Lock()
	if l := p.free[key]; len(l) > 0 {
		flat := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[key] = l[:len(l)-1]
		p.bytes -= length * dtype.Size()
		p.mu.Unlock()
		return flat
	}
	p.mu.Unlock()
	return makeFlat(dtype, length)
}

// put hands a flat slice back for reuse; the caller must hold no other reference to it.
func (p *bufferPool) put(dtype dtypes.DType, flat any) {
	n := flatLen(flat)
	size := n * dtype.Size()
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+size > maxPooledBytes {
		return
	}
	if p.free == nil {
		p.free = make(map[poolKey][]any)
	}
	key := poolKey{dtype, n}
	p.free[key] = append(p.free[key], flat)
	p.bytes += size
}

// newBuffer returns a pooled, uninitialised buffer of the shape.
func (p *bufferPool) newBuffer(shape shapes.Shape) *Buffer {
	return &Buffer{shape: shape, flat: p.get(shape.DType, shape.Size()), valid: true}
}

// makeFlat allocates a zeroed []T of the dtype.
func makeFlat(dtype dtypes.DType, n int) any {
	switch dtype {
	case dtypes.Float32:
		return make([]float32, n)
	case dtypes.Float64:
		return make([]float64, n)
	case dtypes.Int32:
		return make([]int32, n)
	case dtypes.Int64:
		return make([]int64, n)
	case dtypes.Uint8:
		return make([]uint8, n)
	case dtypes.Bool:
		return make([]bool, n)
	case dtypes.BFloat16:
		return make([]bf16, n)
	}
	panic(fmt.Sprintf("cpu backend: dtype %s is not supported", dtype))
}

// flatLen is len() of any supported flat slice.
func flatLen(flat any) int {
	switch f := flat.(type) {
	case []float32:
		return len(f)
	case []float64:
		return len(f)
	case []int32:
		return len(f)
	case []int64:
		return len(f)
	case []uint8:
		return len(f)
	case []bool:
		return len(f)
	case []bf16:
		return len(f)
	}
	panic(fmt.Sprintf("cpu backend: unsupported flat type %T", flat))
}

// copyFlat copies src into dst (same element type and length).
func copyFlat(dst, src any) {
	switch d := dst.(type) {
	case []float32:
		copy(d, src.([]float32))
	case []float64:
		copy(d, src.([]float64))
	case []int32:
		copy(d, src.([]int32))
	case []int64:
		copy(d, src.([]int64))
	case []uint8:
		copy(d, src.([]uint8))
	case []bool:
		copy(d, src.([]bool))
	case []bf16:
		copy(d, src.([]bf16))
	default:
		panic(fmt.Sprintf("cpu backend: unsupported flat type %T", dst))
	}
}

// supportedDTypes are the element types the backend stores and computes.
// BFloat16 is stored and moved, converted, and multiplied (bf16.go); other ops compute it in
// float32.
var supportedDTypes = []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.Int32, dtypes.Int64, dtypes.Uint8, dtypes.Bool,
	dtypes.BFloat16}

func dtypeSupported(dt dtypes.DType) bool {
	for _, d := range supportedDTypes {
		if d == dt {
			return true
		}
	}
	return false
}

func (b *Backend) checkBuffer(buffer backends.Buffer) (*Buffer, error) {
	buf, ok := buffer.(*Buffer)
	if !ok {
		return nil, fmt.Errorf("cpu backend: buffer of type %T was not created by this backend", buffer)
	}
	if buf == nil || !buf.valid {
		return nil, fmt.Errorf("cpu backend: buffer is nil or was finalized (or donated)")
	}
	return buf, nil
}

// BufferFinalize releases the buffer; its storage is recycled unless it was shared.
func (b *Backend) BufferFinalize(buffer backends.Buffer) error {
	buf, err := b.checkBuffer(buffer)
	if err != nil {
		return fmt.Errorf("BufferFinalize: %w", err)
	}
	// Shared buffers too: GoMLX drops its reference to their slice when it finalizes them.
	b.pool.put(buf.shape.DType, buf.flat)
	buf.flat, buf.valid = nil, false
	return nil
}

// BufferShape returns the buffer's shape.
func (b *Backend) BufferShape(buffer backends.Buffer) (shapes.Shape, error) {
	buf, err := b.checkBuffer(buffer)
	if err != nil {
		return shapes.Invalid(), fmt.Errorf("BufferShape: %w", err)
	}
	return buf.shape, nil
}

// BufferDeviceNum returns the virtual device the buffer belongs to.
func (b *Backend) BufferDeviceNum(buffer backends.Buffer) (backends.DeviceNum, error) {
	buf, err := b.checkBuffer(buffer)
	if err != nil {
		return 0, fmt.Errorf("BufferDeviceNum: %w", err)
	}
	return buf.device, nil
}

// BufferToFlatData copies the buffer's values into flat, a slice of the buffer's element type
// and size.
func (b *Backend) BufferToFlatData(buffer backends.Buffer, flat any) error {
	buf, err := b.checkBuffer(buffer)
	if err != nil {
		return fmt.Errorf("BufferToFlatData: %w", err)
	}
	if err := checkFlat(flat, buf.shape); err != nil {
		return fmt.Errorf("BufferToFlatData: %w", err)
	}
	copyFlat(flat, buf.flat)
	return nil
}

// BufferFromFlatData copies flat into a new buffer of the shape.
func (b *Backend) BufferFromFlatData(deviceNum backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, fmt.Errorf("BufferFromFlatData: %w", err)
	}
	if !dtypeSupported(shape.DType) {
		return nil, fmt.Errorf("BufferFromFlatData: dtype %s not supported by the cpu backend", shape.DType)
	}
	if err := checkFlat(flat, shape); err != nil {
		return nil, fmt.Errorf("BufferFromFlatData: %w", err)
	}
	buf := b.pool.newBuffer(shape)
	buf.device = deviceNum
	copyFlat(buf.flat, flat)
	return buf, nil
}

// checkFlat verifies that flat is a []T of the shape's dtype with shape.Size() elements.
func checkFlat(flat any, shape shapes.Shape) error {
	dt := flatDType(flat)
	if dt == dtypes.InvalidDType {
		return fmt.Errorf("flat of type %T is not a slice of a dtype the cpu backend supports", flat)
	}
	if dt != shape.DType {
		return fmt.Errorf("flat of type %T does not match shape %s", flat, shape)
	}
	if n := flatLen(flat); n != shape.Size() {
		return fmt.Errorf("flat has %d elements, shape %s needs %d", n, shape, shape.Size())
	}
	return nil
}

// flatDType is the dtype of a supported flat slice, or InvalidDType.
func flatDType(flat any) dtypes.DType {
	switch flat.(type) {
	case []float32:
		return dtypes.Float32
	case []float64:
		return dtypes.Float64
	case []int32:
		return dtypes.Int32
	case []int64:
		return dtypes.Int64
	case []uint8:
		return dtypes.Uint8
	case []bool:
		return dtypes.Bool
	case []bf16:
		return dtypes.BFloat16
	}
	return dtypes.InvalidDType
}

// HasSharedBuffers is true: buffers are Go slices the caller may read and write directly.
func (b *Backend) HasSharedBuffers() bool { return true }

// NewSharedBuffer returns a buffer of the shape and its flat slice, which the caller may read
// and write until it finalizes the buffer. The values are not initialised (GoMLX fills them).
func (b *Backend) NewSharedBuffer(deviceNum backends.DeviceNum, shape shapes.Shape) (backends.Buffer, any, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, nil, fmt.Errorf("NewSharedBuffer: %w", err)
	}
	if !dtypeSupported(shape.DType) {
		return nil, nil, fmt.Errorf("NewSharedBuffer: dtype %s not supported by the cpu backend", shape.DType)
	}
	flat := b.pool.get(shape.DType, shape.Size())
	buf := &Buffer{shape: shape, flat: flat, valid: true, device: deviceNum}
	buf.shared.Store(true)
	return buf, flat, nil
}

// BufferData returns the buffer's flat slice itself (no copy). Unlike NewSharedBuffer's, the
// buffer stays donatable: GoMLX calls BufferData only to read a tensor's value under the
// tensor's lock (Tensor.ConstFlatData), and a tensor donates its buffer under that same lock,
// after which the slice is no longer its to use (the interface's "invalid after the buffer is
// destroyed"). Marking it shared here would cost every weight the host reads between train
// steps (host decoding, weight sync, checkpoints) its donation at the next step: its storage
// neither reused by the step nor returned to the pool, a fresh model-sized allocation a step.
func (b *Backend) BufferData(buffer backends.Buffer) (any, error) {
	buf, err := b.checkBuffer(buffer)
	if err != nil {
		return nil, fmt.Errorf("BufferData: %w", err)
	}
	return buf.flat, nil
}

// BufferCopyToDevice copies the buffer to another virtual device.
func (b *Backend) BufferCopyToDevice(source backends.Buffer, deviceNum backends.DeviceNum) (backends.Buffer, error) {
	return b.copyToDevice(source, deviceNum)
}
