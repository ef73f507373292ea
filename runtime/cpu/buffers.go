package cpu

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Buffer is the cpu backend's tensor storage: a flat row-major Go slice ([]T for the shape's
// dtype) and its shape.
type Buffer struct {
	shape shapes.Shape
	flat  any
	// mem is the mapping flat points into when it lives off the Go heap (hostmem.go), nil when
	// it is an ordinary Go slice. Every Buffer over the same storage (aliases included) holds
	// it: the mapping is reclaimed when none is left.
	mem *offHeap
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

// maxPooledBytes bounds the memory the pool keeps for reuse in Go slices (small buffers, and
// the caller's shared ones); beyond it, released slices are left to the garbage collector.
const maxPooledBytes = 512 << 20

// bufferPool recycles storage between nodes and between executions. It is safe for concurrent
// use.
//
// Large buffers are mappings outside the Go heap (hostmem.go). Released ones are kept for
// reuse, by size; when no pooled mapping fits a request and a new one would take the memory
// mapped beyond the most ever in use at once, pooled ones are unmapped first to make room. So
// the memory mapped never exceeds the peak of the memory in use (which counts whole pages, and
// a larger mapping where one is reused for a buffer at most a quarter smaller), a train step
// reuses the previous step's memory, and nothing is left for a collector to find.
//
// Small buffers are Go slices, recycled by element type and length. Unlike a sync.Pool the
// pool survives garbage collections: small or large, storage would otherwise be dropped at
// every GC cycle and reallocated (and zeroed).
type bufferPool struct {
	mu    sync.Mutex
	free  map[poolKey][]any
	bytes int
	// mapped are the pooled mappings by size; mappedBytes their total.
	mapped      map[int][]*offHeap
	mappedBytes int
	// lent are the mappings handed out by get as bare slices (kernels' scratch), by address,
	// until put returns them.
	lent map[uintptr]*offHeap
	// live are all mappings not yet unmapped, by address, so that put finds the mapping of a
	// bare slice. Weak: only buffers keep a mapping in use alive.
	live map[uintptr]weak.Pointer[offHeap]
	// inUse and total are the bytes mapped and not pooled, and mapped in all; peakInUse and
	// peak are the most each ever was. The pool keeps total within peakInUse.
	inUse, total, peakInUse, peak int
	// maps and unmaps count the mappings made and the pooled ones dropped (not those reclaimed).
	maps, unmaps int
}

// poolStats is a snapshot of the pool's mappings, in bytes.
type poolStats struct {
	InUse, Pooled, Total, PeakInUse, Peak int
	Maps, Unmaps                          int
}

func (p *bufferPool) stats() poolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return poolStats{InUse: p.inUse, Pooled: p.mappedBytes, Total: p.total, PeakInUse: p.peakInUse, Peak: p.peak, Maps: p.maps, Unmaps: p.unmaps}
}

// get returns a flat slice of the dtype and length, not zeroed: every kernel writes all of its
// output. The caller must give it back with put.
func (p *bufferPool) get(dtype dtypes.DType, length int) any {
	flat, _ := p.getFlat(dtype, length, true)
	return flat
}

// newHeapBuffer returns a pooled, uninitialised buffer of the shape stored in a Go slice, for
// storage the caller receives (see hostmem.go).
func (p *bufferPool) newHeapBuffer(shape shapes.Shape) *Buffer {
	return &Buffer{shape: shape, flat: p.getHeap(shape.DType, shape.Size()), valid: true}
}

// newBuffer returns a pooled, uninitialised buffer of the shape, for storage that never leaves
// an execution: large ones are mappings (hostmem.go).
func (p *bufferPool) newBuffer(shape shapes.Shape) *Buffer {
	flat, m := p.getFlat(shape.DType, shape.Size(), false)
	return &Buffer{shape: shape, flat: flat, mem: m, valid: true}
}

// getFlat returns a flat slice of the dtype and length, and its mapping if it has one. A lent
// mapping is remembered until put; otherwise the caller's buffer holds it.
func (p *bufferPool) getFlat(dtype dtypes.DType, length int, lend bool) (any, *offHeap) {
	if !storedOffHeap(dtype, length) {
		return p.getHeap(dtype, length), nil
	}
	size := offHeapSize(dtype, length)
	p.mu.Lock()
	m := p.takeMappedLocked(size)
	var evicted []*offHeap
	if m == nil {
		// Count the new mapping now, in the same critical section as the evictions it causes,
		// so that concurrent requests cannot map past the peak together.
		p.inUse += size
		p.total += size
		p.peakInUse = max(p.peakInUse, p.inUse)
		evicted = p.evictLocked(p.total - p.peakInUse)
		p.peak = max(p.peak, p.total)
	}
	p.mu.Unlock()
	for _, e := range evicted {
		unmapMemory(e.data)
	}
	if m == nil {
		if m = p.mapNew(size); m == nil {
			// Out of mappings: the Go heap may still have room.
			p.mu.Lock()
			p.inUse -= size
			p.total -= size
			p.mu.Unlock()
			return makeFlat(dtype, length), nil
		}
	}
	if lend {
		p.mu.Lock()
		p.lent[m.addr()] = m
		p.mu.Unlock()
	}
	return m.view(dtype, length), m
}

// takeMappedLocked takes a pooled mapping of the size, or else the smallest of at most a
// quarter more, or returns nil.
func (p *bufferPool) takeMappedLocked(size int) *offHeap {
	best := 0
	if len(p.mapped[size]) > 0 {
		best = size
	} else {
		for s, l := range p.mapped {
			if len(l) > 0 && s > size && s <= size+size/4 && (best == 0 || s < best) {
				best = s
			}
		}
	}
	if best == 0 {
		return nil
	}
	l := p.mapped[best]
	m := l[len(l)-1]
	l[len(l)-1] = nil
	p.mapped[best] = l[:len(l)-1]
	m.pooled = false
	p.mappedBytes -= best
	p.inUse += best
	p.peakInUse = max(p.peakInUse, p.inUse)
	return m
}

// evictLocked drops pooled mappings that together free at least size bytes, or all of them:
// the smallest one that is large enough alone, or else the largest ones. The caller unmaps
// them once it releases the lock.
func (p *bufferPool) evictLocked(size int) []*offHeap {
	if size <= 0 || p.mappedBytes == 0 {
		return nil
	}
	sizes := make([]int, 0, len(p.mapped))
	for s, l := range p.mapped {
		if len(l) > 0 {
			sizes = append(sizes, s)
		}
	}
	slices.Sort(sizes)
	var out []*offHeap
	take := func(s int) {
		l := p.mapped[s]
		m := l[len(l)-1]
		l[len(l)-1] = nil
		p.mapped[s] = l[:len(l)-1]
		p.mappedBytes -= s
		p.total -= s
		p.unmaps++
		m.cleanup.Stop()
		delete(p.live, m.addr())
		out = append(out, m)
	}
	if i, _ := slices.BinarySearch(sizes, size); i < len(sizes) {
		take(sizes[i])
		return out
	}
	freed := 0
	for i := len(sizes) - 1; i >= 0 && freed < size; i-- {
		for len(p.mapped[sizes[i]]) > 0 && freed < size {
			take(sizes[i])
			freed += sizes[i]
		}
	}
	return out
}

// mapNew maps a new buffer of size bytes (already counted by getFlat), or returns nil if the
// system refuses.
func (p *bufferPool) mapNew(size int) *offHeap {
	data, err := mapMemory(size)
	if err != nil {
		return nil
	}
	m := &offHeap{data: data}
	// Mappings never leave an execution, which releases each at its last use; one that failed
	// half-way drops its intermediates, unmapped when the collector finds them unreachable. The
	// cleanup holds the pool weakly: a pool (and its backend) left to the collector then goes
	// with its pooled mappings.
	m.cleanup = runtime.AddCleanup(m, reclaim, reclaimArg{data, weak.Make(p)})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live == nil {
		p.live = make(map[uintptr]weak.Pointer[offHeap])
		p.lent = make(map[uintptr]*offHeap)
		p.mapped = make(map[int][]*offHeap)
	}
	p.live[m.addr()] = weak.Make(m)
	p.maps++
	return m
}

// reclaimArg is what reclaim needs of a mapping that is no longer referenced.
type reclaimArg struct {
	data []byte
	pool weak.Pointer[bufferPool]
}

// reclaim unmaps the storage of a mapping no buffer references any more.
func reclaim(a reclaimArg) {
	if p := a.pool.Value(); p != nil {
		p.mu.Lock()
		delete(p.live, uintptr(unsafe.Pointer(unsafe.SliceData(a.data))))
		p.total -= len(a.data)
		p.inUse -= len(a.data)
		p.mu.Unlock()
	}
	unmapMemory(a.data)
}

// getHeap returns a Go slice of the dtype and length, recycled if one was pooled.
func (p *bufferPool) getHeap(dtype dtypes.DType, length int) any {
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
func (p *bufferPool) put(dtype dtypes.DType, flat any) { p.putFlat(dtype, flat, nil) }

// putBuffer hands a buffer's storage back for reuse; no buffer may use it any more.
func (p *bufferPool) putBuffer(b *Buffer) {
	p.putFlat(b.shape.DType, b.flat, b.mem)
	b.flat, b.mem = nil, nil
}

// putFlat pools flat: into its mapping's list if it has one (m, else found by address), else
// with the Go slices.
func (p *bufferPool) putFlat(dtype dtypes.DType, flat any, m *offHeap) {
	n := flatLen(flat)
	if n == 0 {
		return
	}
	addr := flatAddr(flat)
	p.mu.Lock()
	defer p.mu.Unlock()
	if lm, ok := p.lent[addr]; ok {
		m = lm
		delete(p.lent, addr)
	} else if w, ok := p.live[addr]; ok && m == nil {
		m = w.Value()
	}
	if m != nil {
		if m.pooled {
			return // a second put of the same storage: pool it once
		}
		m.pooled = true
		size := len(m.data)
		p.mapped[size] = append(p.mapped[size], m)
		p.mappedBytes += size
		p.inUse -= size
		return
	}
	size := n * dtype.Size()
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

// ReleasePooled unmaps the storage the pool keeps for reuse and drops its pooled Go slices,
// returning the bytes unmapped: between two train steps a pool keeps the step's activations
// mapped, which a phase that runs no large program (host sampling, a checkpoint's writing)
// would otherwise hold resident beside its own memory. The next executions map afresh.
func (b *Backend) ReleasePooled() int { return b.pool.drain() }

// PooledBytes is the storage the pool keeps mapped for reuse, in bytes (what ReleasePooled
// would unmap).
func (b *Backend) PooledBytes() int { return b.pool.stats().Pooled }

// drain unmaps the pooled mappings and drops the pooled Go slices; it returns the bytes
// unmapped.
func (p *bufferPool) drain() int {
	p.mu.Lock()
	var evicted []*offHeap
	for size, l := range p.mapped {
		for _, m := range l {
			m.cleanup.Stop()
			delete(p.live, m.addr())
			p.total -= size
			evicted = append(evicted, m)
		}
		delete(p.mapped, size)
	}
	released := p.mappedBytes
	p.mappedBytes = 0
	p.free, p.bytes = nil, 0
	p.mu.Unlock()
	for _, m := range evicted {
		unmapMemory(m.data)
	}
	return released
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
	b.pool.putBuffer(buf)
	buf.valid = false
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
	buf := b.pool.newHeapBuffer(shape)
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
	// A Go slice, never a mapping (hostmem.go): the caller holds it, not the buffer.
	flat := b.pool.getHeap(shape.DType, shape.Size())
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
