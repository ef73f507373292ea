// Command stx post-trains language models with reinforcement learning,
// preference optimisation and distillation, driven by CUE recipes.
//
// One file per command; errors are printed in one place (errors.go).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	stxruntime "stx.dev/stx/runtime"
)

// version is set at link time (-ldflags "-X main.version=..."); otherwise
// the module version from the build info is used.
var version = ""

func main() {
	// Freed activations are garbage until the collector runs, and by default the heap grows to
	// twice the live data first: a train step of a 0.5B model then held twice its working set.
	// A soft limit makes the collector work harder only near it: 90% of this machine's (or
	// cgroup's) memory, or 80% of what other processes leave available when stx starts,
	// whichever is less (with the machine's 90%, a 0.5B GRPO step's heap grew to 22 GB on a
	// 24 GB machine, and another process's 2 GB got it killed; its live set is 13 GB).
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := stxruntime.MemoryLimit() / 10 * 9
		if avail := stxruntime.MemoryAvailable(); avail > 0 && avail/10*8 < limit {
			limit = avail / 10 * 8
		}
		debug.SetMemoryLimit(int64(limit))
	}
	// And the heap grows by a bounded amount of garbage between collections, not by as much as
	// is live: a model's weights and optimizer state are most of the heap (runtime/heappace.go).
	stxruntime.PaceHeap()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the exit, for the script tests.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(reorderArgs(app, args))
	return report(stderr, err)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "stx",
		Usage:   "post-train language models from declarative CUE recipes",
		Version: buildVersion(),
		Description: `stx trains models with RL, preference optimisation and distillation.
Recipes are CUE data: stx checks them before any tensor is allocated.

   stx vet recipes.cue                       # validate; errors as file:line:col
   stx run recipes.cue -a grpo               # train (tiny model, built-in task, CPU)
   stx ls                                    # the recipes and their roles
   stx graph recipes.cue -a ppo --format dot # the role graph
   stx knobs -a grpo                         # every knob, documented`,
		Writer:                 stdout,
		ErrWriter:              stderr,
		HideHelpCommand:        true,
		UseShortOptionHandling: false,
		// --set values are CUE: a list such as [1, 2] must not be split at its commas.
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*cli.Context, error) {}, // report() prints and picks the code
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Commands: []*cli.Command{
			vetCommand(),
			lsCommand(),
			graphCommand(),
			exportCommand(),
			knobsCommand(),
			schemaCommand(),
			scoreCommand(),
			benchCommand(),
			initModelCommand(),
			mergeCommand(),
			plotCommand(),
			runCommand(),
			envCommand(),
			pullCommand(),
			serveCommand(),
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// usageError marks a command-line mistake (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}
