package plainfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := ReadFile(p, 0)
	if err != nil || string(data) != "hello" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if data, err := ReadFile(p, 5); err != nil || string(data) != "hello" {
		t.Fatalf("ReadFile at the limit = %q, %v", data, err)
	}
	if _, err := ReadFile(p, 4); err == nil || !strings.Contains(err.Error(), "more than the 4") {
		t.Fatalf("ReadFile over the limit: %v", err)
	}
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(link, 0); err != nil || string(data) != "hello" {
		t.Fatalf("ReadFile through a link = %q, %v", data, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
