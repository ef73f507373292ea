package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile assembles a file from a header string and data, without padding.
func rawFile(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func TestDecodeErrors(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "truncated file: 0 bytes"},
		{"short length", []byte{1, 2, 3}, "truncated file: 3 bytes"},
		{"header beyond file", rawFile(ok, make([]byte, 8))[:20], "beyond the file"},
		{"huge header length", huge, "exceeds the limit"},
		{"data truncated", rawFile(ok, make([]byte, 5)), "out of range"},
		{"malformed JSON", rawFile(`{"a":{"dtype":`, nil), "malformed JSON header"},
		{"not an object", rawFile(`[1]`, nil), "does not start with an object"},
		{"garbage after object", rawFile(`{} {}`, nil), "after the header object"},
		{"duplicate name", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), `names "a" twice`},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), `unknown dtype "F8_E4M3"`},
		{"missing offsets", rawFile(`{"a":{"dtype":"U8","shape":[1]}}`, nil), "lacks data_offsets"},
		{"negative dimension", rawFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, []byte{1}), "malformed JSON header"},
		{"three offsets", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{1}), "has 3 numbers"},
		{"reversed offsets", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}`, []byte{1}), "end before they begin"},
		{"offsets beyond data", rawFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, []byte{1}), "out of range"},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), "needs 8"},
		{"overlap", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)), `overlap tensor "a"`},
		{"gap", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, make([]byte, 3)), "gap"},
		{"not starting at zero", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "gap"},
		{"trailing data", rawFile(ok, make([]byte, 9)), "cover 8 data bytes, but the file has 9"},
		{"shape overflow", rawFile(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil), "overflows"},
		{"metadata not strings", rawFile(`{"__metadata__":{"k":1}}`, nil), "__metadata__"},
		{"dtype not a string", rawFile(`{"a":{"dtype":3,"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "malformed JSON header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.file)
			if err == nil {
				t.Fatalf("Decode succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode error %q, want one containing %q", err, c.want)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	cases := []struct {
		name string
		file []byte
		n    int
	}{
		{"empty header object", rawFile(`{}`, nil), 0},
		{"padding and null metadata", rawFile(`{"__metadata__":null}   `, nil), 0},
		{"zero-size tensor", rawFile(`{"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{7}), 2},
		{"unknown field ignored", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, []byte{1}), 1},
		{"offsets not in header order", rawFile(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1, 2}), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Decode(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Tensors) != c.n {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), c.n)
			}
		})
	}
}

func TestReadFileErrorNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(p, rawFile(`{"a":`, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("ReadFile error = %v, want one naming %s and the problem", err, p)
	}
}

func TestEncodeErrors(t *testing.T) {
	u8 := func(name string) Tensor { return Tensor{Name: name, DType: U8, Shape: []int{1}, Data: []byte{0}} }
	cases := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"duplicate", []Tensor{u8("a"), u8("b"), u8("a")}, `duplicate tensor name "a"`},
		{"empty name", []Tensor{u8("")}, "empty name"},
		{"reserved name", []Tensor{u8("__metadata__")}, "reserved"},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F8", Shape: []int{1}, Data: []byte{0}}}, `unknown dtype "F8"`},
		{"short data", []Tensor{{Name: "x", DType: F32, Shape: []int{2, 2}, Data: make([]byte, 15)}}, "15 data bytes, but F32[2 2] needs 16"},
		{"negative dimension", []Tensor{{Name: "x", DType: F32, Shape: []int{-1}}}, "negative dimension"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Encode(&buf, c.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Encode error = %v, want one containing %q", err, c.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Encode wrote %d bytes before failing", buf.Len())
			}
		})
	}
}
