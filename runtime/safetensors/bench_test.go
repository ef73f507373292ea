package safetensors

import (
	"bytes"
	"io"
	"testing"
)

// benchTensors returns 16 MiB of F32 data in 16 tensors.
func benchTensors() []Tensor {
	var ts []Tensor
	for i := range 16 {
		v := make([]float32, 1<<18)
		for j := range v {
			v[j] = float32(j%1000) * 0.001
		}
		ts = append(ts, FromFloat32(string(rune('a'+i)), []int{512, 512}, v))
	}
	return ts
}

func BenchmarkEncode16MiB(b *testing.B) {
	ts := benchTensors()
	b.SetBytes(16 << 20)
	for b.Loop() {
		if err := Encode(io.Discard, ts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode16MiB(b *testing.B) {
	var buf bytes.Buffer
	if err := Encode(&buf, benchTensors(), nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(16 << 20)
	for b.Loop() {
		if _, err := Decode(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}

func benchConvert(b *testing.B, dt DType) {
	v := make([]float32, 1<<20)
	for j := range v {
		v[j] = float32(j) * 1e-3
	}
	t, err := FromFloat32As("w", dt, []int{len(v)}, v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("to", func(b *testing.B) {
		b.SetBytes(int64(4 * len(v)))
		for b.Loop() {
			if _, err := FromFloat32As("w", dt, []int{len(v)}, v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("from", func(b *testing.B) {
		b.SetBytes(int64(4 * len(v)))
		for b.Loop() {
			if _, err := t.Float32s(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkConvertBF16(b *testing.B) { benchConvert(b, BF16) }
func BenchmarkConvertF16(b *testing.B)  { benchConvert(b, F16) }
func BenchmarkConvertF32(b *testing.B)  { benchConvert(b, F32) }
