package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFileChecksBeforeReading: a header length beyond the file, or
// beyond the limit, is refused from the first 8 bytes, and special files
// are never read.
func TestReadFileChecksBeforeReading(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, 1<<62)
	beyond := make([]byte, 16)
	binary.LittleEndian.PutUint64(beyond, 1000)
	for _, tc := range []struct {
		path, want string
	}{
		{write("huge.safetensors", huge), "header length 4611686018427387904 exceeds the limit"},
		{write("beyond.safetensors", beyond), "header length 1000 is beyond the file's 16 bytes"},
		{write("short.safetensors", []byte{1, 2, 3}), "truncated file: 3 bytes"},
		{write("offsets.safetensors", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8))),
			`tensor "a": data_offsets [0, 16] out of range: the data section has 8 bytes`},
		{dir, "a directory, not a regular file"},
	} {
		_, err := ReadFile(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("ReadFile(%s) = %v, want an error naming the file with %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	if st, err := os.Stat("/dev/zero"); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		if _, err := ReadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "character device") {
			t.Errorf("ReadFile(/dev/zero) = %v", err)
		}
	}
}
