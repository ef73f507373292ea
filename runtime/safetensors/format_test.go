package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// golden is a file laid out by hand from the format description: 8-byte
// little-endian header length (264 = 0x108), the JSON header padded with five
// spaces to a multiple of 8, then the data in the order the header gives:
// I64 first, then F32, BF16, U8 (descending element size).
var golden = bytes.Join([][]byte{
	{0x08, 0x01, 0, 0, 0, 0, 0, 0},
	[]byte(`{"__metadata__":{"format":"pt","note":"x"},` +
		`"z":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},` +
		`"a":{"dtype":"F32","shape":[],"data_offsets":[8,12]},` +
		`"b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},` +
		`"c":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}` + "     "),
	{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // z: int64 −1
	{0x00, 0x00, 0xc0, 0x3f},                         // a: float32 1.5
	{0x80, 0x3f, 0x00, 0xc0},                         // b: bfloat16 1, −2
	{1, 2, 3},                                        // c
}, nil)

func goldenTensors() []Tensor {
	return []Tensor{
		{Name: "c", DType: U8, Shape: []int{3}, Data: []byte{1, 2, 3}},
		{Name: "a", DType: F32, Shape: []int{}, Data: []byte{0x00, 0x00, 0xc0, 0x3f}},
		{Name: "b", DType: BF16, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x00, 0xc0}},
		{Name: "z", DType: I64, Shape: []int{1}, Data: bytes.Repeat([]byte{0xff}, 8)},
	}
}

func TestGoldenEncode(t *testing.T) {
	if n := binary.LittleEndian.Uint64(golden); n%8 != 0 || int(n) != len(golden)-8-19 {
		t.Fatalf("golden file is inconsistent: header length %d", n)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, goldenTensors(), map[string]string{"note": "x", "format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), golden) {
		t.Fatalf("Encode differs from the hand-made file:\n got %q\nwant %q", buf.Bytes(), golden)
	}
}

func TestGoldenDecode(t *testing.T) {
	f, err := Decode(golden)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"format": "pt", "note": "x"}; !reflect.DeepEqual(f.Metadata, want) {
		t.Errorf("metadata = %v, want %v", f.Metadata, want)
	}
	for _, want := range goldenTensors() {
		got, ok := f.Tensors[want.Name]
		if !ok {
			t.Fatalf("tensor %q missing", want.Name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("tensor %q = %+v, want %+v", want.Name, got, want)
		}
	}
	a, _ := f.Tensors["a"].Float32s()
	b, _ := f.Tensors["b"].Float32s()
	if !reflect.DeepEqual(a, []float32{1.5}) || !reflect.DeepEqual(b, []float32{1, -2}) {
		t.Errorf("Float32s: a = %v, b = %v", a, b)
	}
	if _, err := f.Tensors["z"].Float32s(); err == nil {
		t.Error("Float32s of I64 should fail")
	}
}

// randomTensor makes a tensor of dt with random shape and random bytes (for
// floats, random values including specials, so round trips cover NaN payloads).
func randomTensor(rng *rand.Rand, name string, dt DType) Tensor {
	shape := make([]int, rng.IntN(4))
	for i := range shape {
		shape[i] = rng.IntN(5)
	}
	t := Tensor{Name: name, DType: dt, Shape: shape}
	t.Data = make([]byte, t.NumElements()*dt.Size())
	for i := range t.Data {
		t.Data[i] = byte(rng.Uint32())
	}
	if dt == BOOL {
		for i := range t.Data {
			t.Data[i] &= 1
		}
	}
	return t
}

var allDTypes = []DType{F32, F16, BF16, F64, I32, I64, U8, BOOL}

func TestRoundTripEveryDType(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dt := range allDTypes {
		t.Run(string(dt), func(t *testing.T) {
			var in []Tensor
			for i := range 20 {
				in = append(in, randomTensor(rng, string(dt)+"."+string(rune('a'+i)), dt))
			}
			// One tensor of every dtype alongside, so mixed layouts are covered.
			for _, other := range allDTypes {
				in = append(in, randomTensor(rng, "mixed."+string(other), other))
			}
			var buf bytes.Buffer
			meta := map[string]string{"format": "pt", "a<b>&c": "\"quoted\"\n"}
			if err := Encode(&buf, in, meta); err != nil {
				t.Fatal(err)
			}
			if hdr := binary.LittleEndian.Uint64(buf.Bytes()); hdr%8 != 0 {
				t.Errorf("header length %d is not a multiple of 8", hdr)
			}
			checkAligned(t, buf.Bytes())
			f, err := Decode(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Metadata, meta) {
				t.Errorf("metadata = %v, want %v", f.Metadata, meta)
			}
			if len(f.Tensors) != len(in) {
				t.Fatalf("%d tensors back, want %d", len(f.Tensors), len(in))
			}
			for _, want := range in {
				got := f.Tensors[want.Name]
				if got.DType != want.DType || !reflect.DeepEqual(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("tensor %q: got %s%v %x, want %s%v %x", want.Name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
				}
			}
			again := bytes.Buffer{}
			var out []Tensor
			for _, tt := range f.Tensors {
				out = append(out, tt)
			}
			if err := Encode(&again, out, f.Metadata); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Bytes(), buf.Bytes()) {
				t.Error("re-encoding the decoded file changed its bytes")
			}
		})
	}
}

func TestAlignment(t *testing.T) {
	// A BF16 tensor with an odd element count must not push an F32 tensor off
	// a 4-byte boundary, whatever the names.
	in := []Tensor{
		{Name: "a.odd", DType: BF16, Shape: []int{3}, Data: make([]byte, 6)},
		{Name: "b.u8", DType: U8, Shape: []int{1}, Data: []byte{9}},
		{Name: "c.f32", DType: F32, Shape: []int{1}, Data: make([]byte, 4)},
		{Name: "d.f64", DType: F64, Shape: []int{1}, Data: make([]byte, 8)},
	}
	var buf bytes.Buffer
	if err := Encode(&buf, in, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint64{"d.f64": {0, 8}, "c.f32": {8, 12}, "a.odd": {12, 18}, "b.u8": {18, 19}}
	if got := headerOffsets(t, buf.Bytes()); !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
	checkAligned(t, buf.Bytes())
}

// headerOffsets reads every tensor's data_offsets with encoding/json, apart
// from the decoder under test.
func headerOffsets(t *testing.T, file []byte) map[string][2]uint64 {
	t.Helper()
	n := binary.LittleEndian.Uint64(file)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(file[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]uint64{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var info struct {
			DataOffsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			t.Fatal(err)
		}
		out[name] = info.DataOffsets
	}
	return out
}

// checkAligned verifies that every tensor starts, in the file, at a multiple
// of its element size.
func checkAligned(t *testing.T, file []byte) {
	t.Helper()
	f, err := Decode(file)
	if err != nil {
		t.Fatal(err)
	}
	start := 8 + binary.LittleEndian.Uint64(file)
	for name, o := range headerOffsets(t, file) {
		if size := uint64(f.Tensors[name].DType.Size()); (start+o[0])%size != 0 {
			t.Errorf("tensor %q (%s) starts at file offset %d", name, f.Tensors[name].DType, start+o[0])
		}
	}
}

func TestFloat32Conversions(t *testing.T) {
	vals := []float32{0, 1, -1.5, 3.14159, 65504, 1e-8, float32(math.Inf(-1)), 1e30}
	for _, dt := range []DType{F32, F64, BF16, F16} {
		tt, err := FromFloat32As("w", dt, []int{2, 4}, vals)
		if err != nil {
			t.Fatal(err)
		}
		if tt.NumElements() != 8 || len(tt.Data) != 8*dt.Size() {
			t.Fatalf("%s: %d elements, %d bytes", dt, tt.NumElements(), len(tt.Data))
		}
		got, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			var want float32
			switch dt {
			case F32, F64:
				want = v
			case BF16:
				want = float32(refBF16(newRounder(refBF16, 0x7f80, math.Ldexp(1, 128)).round(v)))
			case F16:
				want = float32(refF16(newRounder(refF16, 0x7c00, 65536).round(v)))
			}
			if got[i] != want {
				t.Errorf("%s: element %d = %g, want %g", dt, i, got[i], want)
			}
		}
	}
	if _, err := FromFloat32As("w", I32, []int{1}, []float32{1}); err == nil {
		t.Error("FromFloat32As(I32) should fail")
	}
	ft := FromFloat32("x", []int{2}, []float32{1, 2})
	if ft.DType != F32 || !bytes.Equal(ft.Data, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}) {
		t.Errorf("FromFloat32 = %+v", ft)
	}
	// F64 data is rounded to nearest float32.
	f64 := Tensor{Name: "d", DType: F64, Shape: []int{1}, Data: binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1))}
	if got, _ := f64.Float32s(); got[0] != float32(0.1) {
		t.Errorf("F64 0.1 → %g", got[0])
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "w.safetensors")
	if err := WriteFile(p, goldenTensors(), map[string]string{"format": "pt", "note": "x"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, golden) {
		t.Error("WriteFile content differs from the golden file")
	}
	// A failing write leaves the previous file intact and no temporary behind.
	bad := []Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}
	if err := WriteFile(p, bad, nil); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("WriteFile of a bad tensor: err = %v, want one naming %s", err, p)
	}
	if b2, _ := os.ReadFile(p); !bytes.Equal(b2, golden) {
		t.Error("a failed write changed the file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
	f, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 4 {
		t.Errorf("ReadFile: %d tensors", len(f.Tensors))
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.safetensors")); err == nil {
		t.Error("ReadFile of a missing file should fail")
	}
}
