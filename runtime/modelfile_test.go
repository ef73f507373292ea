package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadModelFileLinks: links inside the model directory (or a Hugging
// Face cache repository) are followed; a link leading outside is refused.
func TestReadModelFileLinks(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("private key"), 0o600); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(root, "model")
	snap := filepath.Join(root, "hub", "models--a--b", "snapshots", "abc123")
	blob := filepath.Join(root, "hub", "models--a--b", "blobs", "f00d")
	for _, d := range []string{model, snap, filepath.Dir(blob)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(model, "real.json"), []byte("{}"), 0o644)
	os.WriteFile(blob, []byte(`{"hub": 1}`), 0o644)
	os.Symlink("real.json", filepath.Join(model, "tokenizer_config.json"))
	os.Symlink(secret, filepath.Join(model, "tokenizer.json"))
	os.Symlink("../../blobs/f00d", filepath.Join(snap, "tokenizer.json"))
	os.Symlink("../../../../secret", filepath.Join(snap, "vocab.json"))

	if data, err := ReadModelFile(model, "tokenizer_config.json"); err != nil || string(data) != "{}" {
		t.Errorf("link inside the directory: %q, %v", data, err)
	}
	if data, err := ReadModelFile(snap, "tokenizer.json"); err != nil || string(data) != `{"hub": 1}` {
		t.Errorf("cache snapshot link to its blob: %q, %v", data, err)
	}
	for _, p := range [][2]string{{model, "tokenizer.json"}, {snap, "vocab.json"}} {
		if _, err := ReadModelFile(p[0], p[1]); err == nil || !strings.Contains(err.Error(), "outside the model directory") {
			t.Errorf("%s/%s: %v, want refused", filepath.Base(p[0]), p[1], err)
		}
	}
	if _, err := ReadModelFile(model, "merges.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// SaveHF copies side files the same way: the link outside fails the save
	// instead of copying the secret.
	m, err := OpenModel("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	m.source = model
	out := t.TempDir()
	if err := m.SaveHF(out, 0); err == nil || !strings.Contains(err.Error(), "outside the model directory") {
		t.Errorf("SaveHF: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err == nil {
		t.Error("the secret was copied")
	}
}
