package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// AdoptFlat returns a buffer of the shape whose storage is flat itself, not a copy: the upload
// of a host tensor that its owner gives up (a model's freshly loaded weights, an optimizer's
// zeroed state). BufferFromFlatData copies, and the host copy it leaves behind is garbage the
// collector frees only at its next cycle: at a 0.5B-parameter model's first train step that was
// the weights and both AdamW moments (6 GiB) held twice. The buffer is not shared: a program may
// donate it and write its result in place. The caller must not read or write flat afterwards
// except through the buffer.
func (b *Backend) AdoptFlat(deviceNum backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	if err := b.checkDevice(deviceNum); err != nil {
		return nil, fmt.Errorf("AdoptFlat: %w", err)
	}
	if !dtypeSupported(shape.DType) {
		return nil, fmt.Errorf("AdoptFlat: dtype %s not supported by the cpu backend", shape.DType)
	}
	if err := checkFlat(flat, shape); err != nil {
		return nil, fmt.Errorf("AdoptFlat: %w", err)
	}
	// A Go slice: the pool's putFlat keeps it with the small buffers' slices (or leaves it to
	// the collector) once the buffer is finalized, as for any buffer the caller received.
	return &Buffer{shape: shape, flat: flat, valid: true, device: deviceNum}, nil
}
