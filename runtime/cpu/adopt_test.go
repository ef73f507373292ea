package cpu

import (
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestAdoptFlat: the buffer's storage is the slice given, not a copy, and it can be donated
// (not shared); slices that do not match the shape, or a device that does not exist, are errors.
func TestAdoptFlat(t *testing.T) {
	b := &Backend{}
	flat := []float32{1, 2, 3, 4, 5, 6}
	buf, err := b.AdoptFlat(0, flat, shapes.Make(dtypes.Float32, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	data, err := b.BufferData(buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := data.([]float32); unsafe.SliceData(d) != unsafe.SliceData(flat) || len(d) != len(flat) {
		t.Errorf("BufferData is a copy of the adopted slice")
	}
	if buf.(*Buffer).shared.Load() {
		t.Errorf("an adopted buffer is shared: programs could not donate it")
	}
	if err := b.BufferFinalize(buf); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		flat  any
		shape shapes.Shape
		dev   int
	}{
		"length": {[]float32{1, 2, 3}, shapes.Make(dtypes.Float32, 2, 3), 0},
		"dtype":  {[]int32{1, 2, 3, 4, 5, 6}, shapes.Make(dtypes.Float32, 2, 3), 0},
		"device": {[]float32{1, 2, 3, 4, 5, 6}, shapes.Make(dtypes.Float32, 2, 3), 1},
	} {
		if _, err := b.AdoptFlat(backends.DeviceNum(c.dev), c.flat, c.shape); err == nil {
			t.Errorf("%s: AdoptFlat accepted a mismatch", name)
		}
	}
}
