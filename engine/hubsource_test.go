package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stx.dev/stx/hub"
	"stx.dev/stx/hub/hubtest"
	"stx.dev/stx/schema"
)

// TestResolveModelSource: built-in names, paths and anything not shaped like a Hub id pass
// through; a Hub id is read from the cache, downloaded into it when missing.
func TestResolveModelSource(t *testing.T) {
	s := hubtest.New()
	t.Cleanup(s.Close)
	sha := s.Commit("model", "org/tiny", "main", []hubtest.File{
		{Path: "config.json", Data: []byte(`{}`)}, {Path: "model.safetensors", Data: []byte("weights")},
	})
	v1 := s.Commit("model", "org/tiny", "v1", []hubtest.File{
		{Path: "config.json", Data: []byte(`{"v": 1}`)}, {Path: "model.safetensors", Data: []byte("weights 1")},
	})
	cache := filepath.Join(t.TempDir(), "hub")
	t.Setenv("HF_ENDPOINT", s.URL())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	ctx := context.Background()
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("local/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, format) }
	for _, src := range []string{"", "tiny", "tiny-sft", "flow_mlp", "local/dir", "/no/such/dir", "no-slash"} {
		got, err := resolveModelSource(ctx, src, "", say)
		if err != nil || got != src {
			t.Errorf("%q: %q, %v; want it as is", src, got, err)
		}
	}
	if len(s.Requests()) != 0 {
		t.Errorf("pass-through sources made requests: %+v", s.Requests())
	}
	got, err := resolveModelSource(ctx, "org/tiny", "", say)
	if want := filepath.Join(cache, "models--org--tiny", "snapshots", sha); err != nil || got != want {
		t.Fatalf("org/tiny: %q, %v; want %s", got, err, want)
	}
	if len(lines) != 2 {
		t.Errorf("%d progress lines, want one per file", len(lines))
	}
	got, err = resolveModelSource(ctx, "org/tiny", "v1", say)
	if err != nil || filepath.Base(got) != v1 {
		t.Fatalf("org/tiny@v1: %q, %v", got, err)
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	if _, err := resolveModelSource(ctx, "org/other", "", say); !errors.Is(err, hub.ErrOffline) || !strings.HasPrefix(err.Error(), "model org/other: ") {
		t.Errorf("offline: %v", err)
	}
}

func TestRoleRevision(t *testing.T) {
	rec := &schema.Recipe{Roles: []schema.Role{
		{Name: "actor", Model: schema.Model{Source: "org/m", Revision: "v2"}},
		{Name: "ref", Model: schema.Model{InitFrom: "actor"}},
		{Name: "other", Model: schema.Model{Source: "org/n"}},
	}}
	for i, want := range []string{"v2", "v2", ""} {
		if got := roleRevision(rec, i); got != want {
			t.Errorf("role %d: %q, want %q", i, got, want)
		}
	}
}
