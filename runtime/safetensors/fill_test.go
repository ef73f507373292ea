package safetensors

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestFillEncodesAsData: tensors whose data is produced as they are written encode to the same
// bytes as the same tensors given whole, and a Fill that fails or produces the wrong size fails
// the encoding with the tensor's name.
func TestFillEncodesAsData(t *testing.T) {
	whole := goldenTensors()
	var want bytes.Buffer
	if err := Encode(&want, whole, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	lazy := make([]Tensor, len(whole))
	for i, w := range whole {
		lazy[i] = Tensor{Name: w.Name, DType: w.DType, Shape: w.Shape, Fill: func() ([]byte, error) { return w.Data, nil }}
	}
	var got bytes.Buffer
	if err := Encode(&got, lazy, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("filled tensors encode differently from whole ones")
	}
	for _, tt := range []struct {
		name string
		t    Tensor
		want string
	}{
		{"short", Tensor{Name: "a", DType: F32, Shape: []int{2}, Fill: func() ([]byte, error) { return make([]byte, 4), nil }}, `tensor "a": filled 4 data bytes, but F32[2] needs 8`},
		{"failing", Tensor{Name: "b", DType: F32, Shape: []int{1}, Fill: func() ([]byte, error) { return nil, errors.New("boom") }}, `tensor "b": boom`},
		{"both", Tensor{Name: "c", DType: F32, Shape: []int{1}, Data: make([]byte, 4), Fill: func() ([]byte, error) { return nil, nil }}, `tensor "c": both Data and Fill set`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Encode(&bytes.Buffer{}, []Tensor{tt.t}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}
