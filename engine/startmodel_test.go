package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"stx.dev/stx/runtime"
)

// TestStarterKey: a starting model's cache entry is named after what decides its weights.
func TestStarterKey(t *testing.T) {
	t.Setenv("STX_CACHE_DIR", t.TempDir())
	path := func(name string, sets ...string) string {
		t.Helper()
		dir, _, err := starterPath(name, runCatalog(t, "grpo", sets...).Recipes["grpo"], "cpu")
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	base := path("tiny-sft")
	if !strings.HasPrefix(base, filepath.Join(os.Getenv("STX_CACHE_DIR"), "models", "tiny-sft-")) {
		t.Errorf("cache entry %s is not under $STX_CACHE_DIR/models", base)
	}
	if again := path("tiny-sft", "knobs.lr=1e-3"); again != base {
		t.Errorf("the RL lr changed the starting model's entry: %s vs %s", again, base)
	}
	for _, set := range []string{"knobs.seed=7", "task.validation_size=10", `knobs.task_ops="+-"`, `task.name="sorting"`} {
		if p := path("tiny-sft", set); p == base {
			t.Errorf("%s kept the entry %s", set, p)
		}
	}
	if path("tiny-teacher") == base {
		t.Error("tiny-teacher and tiny-sft share an entry")
	}
	other, _, _ := starterPath("tiny-sft", runCatalog(t, "grpo").Recipes["grpo"], "go")
	if other == base {
		t.Error("the backend does not key the entry")
	}
	if _, _, err := starterPath("tiny-nothing", runCatalog(t, "grpo").Recipes["grpo"], "cpu"); err == nil {
		t.Error("an unknown starting model resolved")
	}
}

// TestStarterBuildIsAtomicAndReproducible: two runs building the same starting model at once
// both get the entry, nothing half-written is left behind, the next run reuses it, and a
// rebuild elsewhere gives the same weights byte for byte.
func TestStarterBuildIsAtomicAndReproducible(t *testing.T) {
	// A starting model of its own, 5 SFT steps of tiny-sft's recipe, keeps the three builds short.
	const name = "test-sft"
	s := starters["tiny-sft"]
	s.Steps = 5
	starters[name] = s
	t.Cleanup(func() { delete(starters, name) })
	rec := runCatalog(t, "grpo").Recipes["grpo"]
	b, err := runtime.NewBackend("")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("STX_CACHE_DIR", cache)
	var wg sync.WaitGroup
	dirs := make([]string, 2)
	errs := make([]error, 2)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], _, errs[i] = starterDir(context.Background(), name, rec, b)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	if dirs[0] != dirs[1] {
		t.Fatalf("concurrent builds gave %s and %s", dirs[0], dirs[1])
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "models"))
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want the one entry", names)
	}
	dir, built, err := starterDir(context.Background(), name, rec, b)
	if err != nil || dir != dirs[0] || built != 0 {
		t.Errorf("third use: %s built in %v (%v), want the cached %s", dir, built, err, dirs[0])
	}
	m, err := runtime.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Hidden != 64 {
		t.Errorf("%s has hidden size %d, want the tiny model's 64", name, m.Config.Hidden)
	}

	t.Setenv("STX_CACHE_DIR", t.TempDir())
	dir2, _, err := starterDir(context.Background(), name, rec, b)
	if err != nil {
		t.Fatal(err)
	}
	w1, err1 := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	w2, err2 := os.ReadFile(filepath.Join(dir2, "model.safetensors"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !bytes.Equal(w1, w2) {
		t.Errorf("two builds of %s with the same key differ", name)
	}
}

// TestSweepBuilds: the temporary directories of a build whose process is
// gone are removed; a live process's build is kept.
func TestSweepBuilds(t *testing.T) {
	dir := t.TempDir()
	dead := 1 << 30           // above any pid_max: no such process
	names := map[string]bool{ // name → swept
		fmt.Sprintf(".tmp-tiny-sft-0123abcd-%d-a1b2c3", dead):             true,
		fmt.Sprintf(".tmp-tiny-sft-0123abcd-%d-a1b2c3.work", dead):        true,
		fmt.Sprintf(".tmp-tiny-sft-0123abcd-%d-d4e5f6", os.Getpid()):      false,
		fmt.Sprintf(".tmp-tiny-sft-0123abcd-%d-d4e5f6.work", os.Getpid()): false,
		"tiny-sft-0123abcd": false,
	}
	for n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sweepBuilds(dir)
	for n, swept := range names {
		_, err := os.Stat(filepath.Join(dir, n))
		if gone := os.IsNotExist(err); gone != swept {
			t.Errorf("%s: removed %v, want %v", n, gone, swept)
		}
	}
}
