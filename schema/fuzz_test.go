package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLoad feeds arbitrary text to the recipe loader as a recipe file and
// as a --set value: it must never panic or hang, and every error it reports
// must carry a position. Run longer with:
// go test -run '^$' -fuzz FuzzLoad -fuzztime 60s ./schema
func FuzzLoad(f *testing.F) {
	const loadWatchdog = 30 * time.Second
	f.Add("package x\nrecipes: a: roles: [{name: \"p\", specialization: \"sft\"}]\n", "knobs.lr=3e-6")
	f.Add("package x\nrecipes: a: {roles: [{name: \"p\", specialization: \"sft\"}], knobs: lr: 1e-400}\n", "knobs.seed=1e30")
	f.Add("package x\nrecipes: a: {roles: [], syncs: [{source: \"p\", target: \"p\", keys: []}]}\n", "roles.p.trainable=true")
	f.Add("package x\nrecipes: b: recipes.a & {knobs: top_k: -1}\n", "knobs.micro_batch_size=99999999999")
	f.Add("recipes: a: roles: [{name: \"P\", specialization: \"sfx\", model: source: \"\"}]", "x")
	f.Add("package x\n#Recipe: _\nrecipes: a: knobs: {rollout_batch_size: 65536, n_samples_per_prompt: 4096}\n", "knobs=1")
	dir := f.TempDir()
	path := filepath.Join(dir, "r.cue")
	f.Fuzz(func(t *testing.T, src, set string) {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A hang is a failure too: the fuzzer keeps an input that crashes
		// its worker, not one that stalls it.
		watchdog := time.AfterFunc(loadWatchdog, func() {
			panic(fmt.Sprintf("Load has not returned after %v on src %q, set %q", loadWatchdog, src, set))
		})
		_, err := Load([]string{"r.cue"}, Options{Dir: dir, Enums: testEnums, Sets: []string{set}})
		watchdog.Stop()
		l, ok := err.(List)
		if err == nil || !ok {
			return // a plain error names what failed outside any recipe
		}
		for _, e := range l {
			if e.Pos.File == "" {
				t.Errorf("error without a position: %v", e)
			}
			if strings.Contains(e.Msg, "goroutine") {
				t.Errorf("error reads like a crash: %v", e)
			}
		}
	})
}
