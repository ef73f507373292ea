package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// modelTensors returns n F32 tensors of 100 bytes each, named layer.00 … .
func modelTensors(n int) []Tensor {
	rng := rand.New(rand.NewPCG(3, 4))
	var ts []Tensor
	for i := range n {
		v := make([]float32, 25)
		for j := range v {
			v[j] = rng.Float32()
		}
		ts = append(ts, FromFloat32(fmt.Sprintf("layer.%02d", i), []int{5, 5}, v))
	}
	return ts
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func sameTensors(t *testing.T, got map[string]Tensor, want []Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[w.Name]
		if !ok || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("tensor %q differs", w.Name)
		}
	}
}

func TestWriteDirSharded(t *testing.T) {
	dir := t.TempDir()
	ts := modelTensors(7)
	// 250 bytes per shard: two 100-byte tensors each, the 7th alone.
	if err := WriteDir(dir, ts, 250); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
		"model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
		IndexFileName,
	}
	if got := listDir(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("files = %v, want %v", got, want)
	}
	raw, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.Metadata.TotalSize != 700 {
		t.Errorf("total_size = %d, want 700", idx.Metadata.TotalSize)
	}
	if got := idx.WeightMap["layer.03"]; got != "model-00002-of-00004.safetensors" {
		t.Errorf("layer.03 in %q", got)
	}
	if got := idx.WeightMap["layer.06"]; got != "model-00004-of-00004.safetensors" {
		t.Errorf("layer.06 in %q", got)
	}
	// Shards carry the metadata transformers requires.
	f, err := ReadFile(filepath.Join(dir, "model-00001-of-00004.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 2 {
		t.Errorf("shard 1: metadata %v, %d tensors", f.Metadata, len(f.Tensors))
	}
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, got, ts)

	// Rewriting unsharded removes the shards and the index.
	if err := WriteDir(dir, ts[:3], 0); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); !reflect.DeepEqual(got, []string{SingleFileName}) {
		t.Fatalf("after unsharded rewrite: files = %v", got)
	}
	got, err = ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, got, ts[:3])

	// And sharding again removes model.safetensors (which readers would prefer).
	if err := WriteDir(dir, ts, 450); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); slices.Contains(got, SingleFileName) || len(got) != 3 {
		t.Fatalf("after sharded rewrite: files = %v", got)
	}
	got, err = ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, got, ts)
}

func TestWriteDirSingle(t *testing.T) {
	for _, max := range []int64{0, 700, 1 << 30} {
		dir := filepath.Join(t.TempDir(), "nested", "model")
		ts := modelTensors(7)
		if err := WriteDir(dir, ts, max); err != nil {
			t.Fatal(err)
		}
		if got := listDir(t, dir); !reflect.DeepEqual(got, []string{SingleFileName}) {
			t.Fatalf("max %d: files = %v", max, got)
		}
		got, err := ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, got, ts)
	}
	if err := WriteDir(t.TempDir(), modelTensors(1), -1); err == nil {
		t.Error("negative shard size should fail")
	}
}

func TestReadDirErrors(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shard := func(t *testing.T, dir, name string, names ...string) {
		t.Helper()
		var ts []Tensor
		for _, n := range names {
			ts = append(ts, FromFloat32(n, []int{1}, []float32{1}))
		}
		if err := WriteFile(filepath.Join(dir, name), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"empty dir", func(t *testing.T, dir string) {}, "has neither model.safetensors nor model.safetensors.index.json"},
		{"malformed index", func(t *testing.T, dir string) { write(t, dir, IndexFileName, `{"weight_map":`) }, "malformed index"},
		{"empty weight map", func(t *testing.T, dir string) { write(t, dir, IndexFileName, `{"metadata":{}}`) }, "empty or missing weight_map"},
		{"missing shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", "a")
			write(t, dir, IndexFileName, `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`)
		}, "names shard s2.safetensors, which is missing"},
		{"missing tensor", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", "a")
			write(t, dir, IndexFileName, `{"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}}`)
		}, `maps tensor "b" to s1.safetensors, which lacks it`},
		{"unmapped tensor", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", "a", "c")
			write(t, dir, IndexFileName, `{"weight_map":{"a":"s1.safetensors"}}`)
		}, `holds tensor "c"`},
		{"tensor in the wrong shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", "a")
			shard(t, dir, "s2.safetensors", "a")
			write(t, dir, IndexFileName, `{"weight_map":{"a":"s1.safetensors"}}`)
		}, "", // s2 is not referenced, so it is not read: no error
		},
		{"shard outside the directory", func(t *testing.T, dir string) {
			write(t, dir, IndexFileName, `{"weight_map":{"a":"../x.safetensors"}}`)
		}, "not a file name in the directory"},
		{"corrupt shard", func(t *testing.T, dir string) {
			write(t, dir, "s1.safetensors", "\x02\x00\x00")
			write(t, dir, IndexFileName, `{"weight_map":{"a":"s1.safetensors"}}`)
		}, "s1.safetensors: safetensors: truncated file"},
		{"corrupt single file", func(t *testing.T, dir string) {
			write(t, dir, SingleFileName, "\x02\x00\x00")
		}, "model.safetensors: safetensors: truncated file"},
	}
	readers := map[string]func(string) error{
		"ReadDir":        func(dir string) error { _, err := ReadDir(dir); return err },
		"ReadDirHeaders": func(dir string) error { _, err := ReadDirHeaders(dir); return err },
	}
	for _, c := range cases {
		for rname, read := range readers {
			t.Run(c.name+"/"+rname, func(t *testing.T) {
				dir := t.TempDir()
				c.setup(t, dir)
				err := read(dir)
				if c.want == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%s error = %v, want one containing %q", rname, err, c.want)
				}
			})
		}
	}
}

// TestReadDirHeadersMatchData: the headers read without the data describe
// exactly the tensors ReadDir decodes, single file and sharded; a file cut
// short is refused from its header alone.
func TestReadDirHeadersMatchData(t *testing.T) {
	for _, shardBytes := range []int64{0, 250} {
		dir := t.TempDir()
		if err := WriteDir(dir, modelTensors(7), shardBytes); err != nil {
			t.Fatal(err)
		}
		full, err := ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		heads, err := ReadDirHeaders(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(heads) != len(full) {
			t.Fatalf("shards of %d bytes: %d headers, %d tensors", shardBytes, len(heads), len(full))
		}
		for name, tt := range full {
			h := heads[name]
			if h.DType != tt.DType || !reflect.DeepEqual(h.Shape, tt.Shape) || filepath.Dir(h.File) != dir {
				t.Errorf("shards of %d bytes: %s: header %+v, tensor %s%v", shardBytes, name, h, tt.DType, tt.Shape)
			}
		}
	}
	dir := t.TempDir()
	if err := WriteDir(dir, modelTensors(3), 0); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, SingleFileName)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, st.Size()-4); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeader(p); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("truncated file: %v", err)
	}
}
