package cpu

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestReadBuffersStayDonatable: a buffer the host has read through BufferData (what
// Tensor.ConstFlatData does with a tensor held on the backend) is still consumed when an
// execution is given it as donated, its storage reused by the execution. Host reads of the
// weights between train steps (host decoding, weight sync, checkpoints) must not cost the next
// step its donations.
func TestReadBuffersStayDonatable(t *testing.T) {
	b, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	vec := shapes.Make(dtypes.Float32, 4)
	x := mustBuffer(t, b, []float32{1, 2, 3, 4}, 4)
	flat, err := b.BufferData(x)
	if err != nil {
		t.Fatal(err)
	}
	storage := &flat.([]float32)[0]
	outs := buildAndRun(t, b, []shapes.Shape{vec}, func(bld backends.Builder, p []backends.Op) []backends.Op {
		return []backends.Op{must(bld.Neg(p[0]))}
	}, []backends.Buffer{x}, []bool{true})
	if _, err := b.BufferShape(x); err == nil {
		t.Error("a donated input read through BufferData is still valid: the donation was refused")
	}
	out, err := b.BufferData(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := out.([]float32); !slices.Equal(got, []float32{-1, -2, -3, -4}) {
		t.Errorf("-x = %v", got)
	} else if &got[0] != storage {
		t.Error("-x did not reuse the donated input's storage")
	}
}

// TestTensorReadStaysDonatable is the same through GoMLX's tensors: a tensor on the backend,
// read on the host with ConstFlatData, then donated.
func TestTensorReadStaysDonatable(t *testing.T) {
	b, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	x, err := tensors.FromBuffer(b, mustBuffer(t, b, []float32{1, 2, 3, 4}, 4))
	if err != nil {
		t.Fatal(err)
	}
	var storage *float32
	if err := tensors.ConstFlatData(x, func(flat []float32) { storage = &flat[0] }); err != nil {
		t.Fatal(err)
	}
	buf, err := x.DonateBuffer(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	outs := buildAndRun(t, b, []shapes.Shape{shapes.Make(dtypes.Float32, 4)}, func(bld backends.Builder, p []backends.Op) []backends.Op {
		return []backends.Op{must(bld.Neg(p[0]))}
	}, []backends.Buffer{buf}, []bool{true})
	out, err := b.BufferData(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	if &out.([]float32)[0] != storage {
		t.Error("the donated tensor's storage was not reused: the host read made it undonatable")
	}
}
