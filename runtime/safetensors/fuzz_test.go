package safetensors

import (
	"bytes"
	"testing"
)

// FuzzDecode checks that Decode never panics, and that whatever it accepts
// survives an encode/decode round trip with the same tensors and metadata.
// Run longer with: go test -run '^$' -fuzz FuzzDecode -fuzztime 60s ./runtime/safetensors
func FuzzDecode(f *testing.F) {
	f.Add(golden)
	f.Add(golden[:len(golden)-1])
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[1,3]}}`, []byte{1, 2, 3}))
	f.Add(rawFile(`{"__metadata__":{"k":"v"}}  `, nil))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, []byte{0, 0, 0x80, 0x7f}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode(data)
		if err != nil {
			return
		}
		var tensors []Tensor
		for name, tt := range file.Tensors {
			if tt.Name != name {
				t.Fatalf("tensor %q filed under %q", tt.Name, name)
			}
			if tt.DType.IsFloat() {
				if _, err := tt.Float32s(); err != nil {
					t.Fatalf("Float32s of accepted tensor %q: %v", name, err)
				}
			}
			tensors = append(tensors, tt)
		}
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, file.Metadata); err != nil {
			t.Fatalf("Encode of a decoded file: %v", err)
		}
		back, err := Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("Decode of a re-encoded file: %v", err)
		}
		if len(back.Tensors) != len(file.Tensors) || len(back.Metadata) != len(file.Metadata) {
			t.Fatalf("round trip: %d tensors, %d metadata keys; want %d, %d",
				len(back.Tensors), len(back.Metadata), len(file.Tensors), len(file.Metadata))
		}
		for k, v := range file.Metadata {
			if back.Metadata[k] != v {
				t.Fatalf("metadata %q: %q, want %q", k, back.Metadata[k], v)
			}
		}
		for name, tt := range file.Tensors {
			b := back.Tensors[name]
			if b.DType != tt.DType || !bytes.Equal(b.Data, tt.Data) || len(b.Shape) != len(tt.Shape) {
				t.Fatalf("round trip changed tensor %q", name)
			}
		}
	})
}
