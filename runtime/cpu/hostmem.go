package cpu

import (
	"runtime"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Large buffers live outside the Go heap, in anonymous memory mappings the pool unmaps itself.
//
// On the Go heap, storage the pool lets go is garbage until the next collection, and the
// collector lets the heap grow to twice what was live at the previous one (GOGC=100): a train
// step whose activations are a few GiB then peaks at about twice its live set, the excess being
// freed activations not yet collected. Mapped storage is returned to the system the moment the
// pool drops it, so the process's resident memory follows the buffers actually in use, and the
// pool (bufferPool.getFlat) keeps what it maps within the most that was ever in use at once.

// offHeapMin is the smallest buffer, in bytes, stored in its own mapping; smaller ones stay
// on the Go heap, where they cost a fraction of a page and the collector handles them well.
// Zero keeps every buffer on the Go heap: under the race detector (race.go), which watches
// only the Go heap and would otherwise miss races on the kernels' data; and where mappings are
// not supported (hostmem_other.go).
var offHeapMin = defaultOffHeapMin

// offHeap is one mapping holding a buffer's storage. Every Buffer whose flat slice points into
// it references it, so it is unmapped by the garbage collector (reclaim) only once no buffer
// can read it; the pool unmaps it explicitly (evict) when it drops it.
type offHeap struct {
	data    []byte // the whole mapping
	cleanup runtime.Cleanup
	pooled  bool // in the pool's free lists (guarded by the pool's lock)
}

// addr identifies a mapping, or a flat slice, by the address of its first byte.
func (m *offHeap) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(m.data))) }

// offHeapSize is the size of the mapping for a buffer of n elements of dtype: whole pages.
func offHeapSize(dtype dtypes.DType, n int) int {
	const page = 4096
	return (n*dtype.Size() + page - 1) &^ (page - 1)
}

// storedOffHeap says whether a buffer of n elements of dtype gets a mapping of its own. Booleans
// never do: a mapping is reused across dtypes, and a Go bool must hold 0 or 1.
func storedOffHeap(dtype dtypes.DType, n int) bool {
	return offHeapMin > 0 && dtype != dtypes.Bool && n*dtype.Size() >= offHeapMin
}

// view is the first n elements of the mapping as a flat slice of dtype.
func (m *offHeap) view(dtype dtypes.DType, n int) any {
	p := unsafe.Pointer(unsafe.SliceData(m.data))
	switch dtype {
	case dtypes.Float32:
		return unsafe.Slice((*float32)(p), n)
	case dtypes.Float64:
		return unsafe.Slice((*float64)(p), n)
	case dtypes.Int32:
		return unsafe.Slice((*int32)(p), n)
	case dtypes.Int64:
		return unsafe.Slice((*int64)(p), n)
	case dtypes.Uint8:
		return unsafe.Slice((*uint8)(p), n)
	case dtypes.BFloat16:
		return unsafe.Slice((*bf16)(p), n)
	}
	panic("cpu backend: dtype " + dtype.String() + " is not stored off the Go heap")
}

// flatAddr is the address of a non-empty flat slice's first element.
func flatAddr(flat any) uintptr {
	var p unsafe.Pointer
	switch f := flat.(type) {
	case []float32:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []float64:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []int32:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []int64:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []uint8:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []bool:
		p = unsafe.Pointer(unsafe.SliceData(f))
	case []bf16:
		p = unsafe.Pointer(unsafe.SliceData(f))
	}
	return uintptr(p)
}
