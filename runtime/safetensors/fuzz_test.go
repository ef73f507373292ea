package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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

// FuzzReadFile checks that reading a file agrees with decoding its bytes:
// the checks ReadFile makes before reading (header length against the
// file's size) must never refuse a file Decode accepts, nor accept one it
// refuses. Run longer with:
// go test -run '^$' -fuzz FuzzReadFile -fuzztime 60s ./runtime/safetensors
func FuzzReadFile(f *testing.F) {
	f.Add(golden)
	f.Add(golden[:9])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Add(rawFile(`{}`, nil)[:8])
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{0, 0, 0x80}))
	path := filepath.Join(f.TempDir(), "model.safetensors")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, rerr := ReadFile(path)
		_, derr := Decode(data)
		if (rerr == nil) != (derr == nil) {
			t.Fatalf("ReadFile: %v; Decode: %v", rerr, derr)
		}
		if rerr != nil && !strings.Contains(rerr.Error(), path) {
			t.Fatalf("error does not name the file: %v", rerr)
		}
	})
}
