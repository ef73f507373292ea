package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"stx.dev/stx"
	"stx.dev/stx/engine"
	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/xlaplugin"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/broken")

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"stx": func() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scripts of testdata/script (txtar files).
func TestScripts(t *testing.T) {
	if onXLA() {
		// testscript hands its commands no $GOMLX_BACKEND: the scripts run on the default
		// backend (and placement_xla on XLA, by its flags) whatever the pass, so in the xla pass
		// (`make test-xla`) they would repeat the first pass's minute.
		t.Skip("the scripts run on the default backend whatever $GOMLX_BACKEND says; the first pass ran them")
	}
	// The scripts share one cache of built-in starting models (tiny-sft, ...), built
	// by the first script that needs one, and never the user's own cache.
	cache := t.TempDir()
	// $NRECIPES is the size of the built-in catalog, which scripts expect
	// `stx vet` to count.
	cat, err := engine.Load(nil, schema.Options{Builtin: stx.Catalog, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// XLA's CPU plugins, from stx's plugin directory before the scripts' cache moves it.
	pjrtDir, _ := xlaplugin.Dir()
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("..", "..", "testdata", "script"),
		RequireExplicitExec: true,
		// [xla]: XLA's CPU plugin is installed (scripts/fetch-pjrt.sh); CI always has it. The
		// scripts that use it name their backend themselves, so they run in the default pass
		// only, not again in the passes that set $GOMLX_BACKEND.
		Condition: func(cond string) (bool, error) {
			if cond != "xla" {
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			if os.Getenv("GOMLX_BACKEND") != "" {
				return false, nil
			}
			if len(xlaplugin.Fetched()) == 0 && os.Getenv("CI") == "true" {
				return false, fmt.Errorf("no XLA CPU plugin in %s: CI fetches it with scripts/fetch-pjrt.sh", pjrtDir)
			}
			return len(xlaplugin.Fetched()) > 0, nil
		},
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"hubserve": hubserveCmd, // a fake Hugging Face Hub (pull_test.go)
			"http":     httpCmd,     // requests to stx serve (serve_test.go)
			"freeport": freeportCmd, // a free loopback port for a coordinator (cluster_test.go)
			// add VAR N...: set $VAR to the sum of the integers N (a count that
			// derives from $NRECIPES).
			"add": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: add VAR N...")
				}
				sum := 0
				for _, a := range args[1:] {
					n, err := strconv.Atoi(a)
					ts.Check(err)
					sum += n
				}
				ts.Setenv(args[0], strconv.Itoa(sum))
			},
			// status N cmd args...: run cmd and require exit status N.
			"status": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: status N command [args...]")
				}
				want, err := strconv.Atoi(args[0])
				ts.Check(err)
				got := 0
				if err := ts.Exec(args[1], args[2:]...); err != nil {
					var ee *exec.ExitError
					if !errors.As(err, &ee) {
						ts.Fatalf("%v", err)
					}
					got = ee.ExitCode()
				}
				if got != want {
					ts.Fatalf("exit status %d, want %d", got, want)
				}
			},
			// savemodel DIR: save the built-in tiny model (random weights from seed 1) as a Hugging Face model
			// directory, for scripts that need a model on disk.
			"savemodel": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: savemodel DIR")
				}
				m, err := runtime.OpenModel("tiny", 1)
				ts.Check(err)
				ts.Check(m.SaveHF(ts.MkAbs(args[0]), 0))
			},
		},
		Setup: func(env *testscript.Env) error {
			root, err := filepath.Abs(filepath.Join("..", ".."))
			env.Setenv("REPO", root)
			env.Setenv("STX_CACHE_DIR", cache)
			env.Setenv("STX_PJRT_DIR", pjrtDir)
			env.Setenv("NRECIPES", strconv.Itoa(len(cat.Names)))
			// $SPECIALIZATIONS, $ESTIMATORS and $TASKS are the registries' names as vet
			// lists them ("actor", "aggrevate", ...), for cmpenv.
			for _, r := range registryLists() {
				env.Setenv(r.env, r.list)
			}
			return err
		},
	})
}

// onXLA reports whether $GOMLX_BACKEND (or $STX_BACKEND) names the xla backend: the pass of
// `make test-xla`, whose stx processes started with this environment compile on XLA.
func onXLA() bool { return runtime.EnvBackendKind() == "xla" }

// errorLine is the shape of every line stx vet prints for a bad recipe.
var errorLine = regexp.MustCompile(`^[^:\s]+:\d+:\d+: \S.*$`)

// TestBrokenRecipes vets every recipe of testdata/broken and compares what
// it prints with its golden file (go test -update rewrites them).
func TestBrokenRecipes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "broken", "*.cue"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("want at least 30 broken recipes, found %d", len(files))
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".cue")
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			rel := filepath.Join("testdata", "broken", name+".cue")
			t.Chdir(root)
			code := run([]string{"stx", "vet", rel}, &stdout, &stderr)
			if code != exitInvalid {
				t.Errorf("exit %d, want %d\nstderr:\n%s", code, exitInvalid, stderr.String())
			}
			out := stderr.String()
			for _, bad := range []string{"panic", "goroutine", "errors in empty disjunction", "#Recipe"} {
				if strings.Contains(out, bad) {
					t.Errorf("output contains %q:\n%s", bad, out)
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !errorLine.MatchString(line) || !strings.HasPrefix(line, rel+":") {
					t.Errorf("line is not %s:line:col: ...: %q", rel, line)
				}
			}
			golden := filepath.Join(root, "testdata", "broken", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(withPlaceholders(out)), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/stx -run TestBrokenRecipes -update)", err)
			}
			if out != expandPlaceholders(string(want)) {
				t.Errorf("output differs from %s\ngot:\n%s\nwant:\n%s", golden, out, want)
			}
		})
	}
}

// registryList is one registry's names as vet lists them in an enum error
// ("actor", "aggrevate", ...), with its golden placeholder and script variable.
type registryList struct {
	placeholder, env, list string
}

// registryLists are the registries whose names goldens and scripts take from
// the registry, so that adding a specialization, estimator or task touches
// no golden: a golden holds {{specializations}}, {{estimators}} or {{tasks}}
// where vet lists them, and a script $SPECIALIZATIONS, $ESTIMATORS or $TASKS.
func registryLists() []registryList {
	quoted := func(names []string) string {
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = strconv.Quote(n)
		}
		return strings.Join(q, ", ")
	}
	return []registryList{
		{"{{specializations}}", "SPECIALIZATIONS", quoted(specializations.Names())},
		{"{{estimators}}", "ESTIMATORS", quoted(estimators.Names())},
		{"{{tasks}}", "TASKS", quoted(tasks.Names())},
	}
}

// expandPlaceholders puts the registries' lists in place of a golden's placeholders.
func expandPlaceholders(golden string) string {
	for _, r := range registryLists() {
		golden = strings.ReplaceAll(golden, r.placeholder, r.list)
	}
	return golden
}

// withPlaceholders is the golden of output out: each registry's whole list
// becomes its placeholder.
func withPlaceholders(out string) string {
	for _, r := range registryLists() {
		for _, end := range []string{";", "\n"} {
			out = strings.ReplaceAll(out, " "+r.list+end, " "+r.placeholder+end)
		}
	}
	return out
}
