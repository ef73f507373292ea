package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/schema"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "train a recipe: rollouts, train steps, evaluation, checkpoints",
		ArgsUsage: "[FILES... | DIR]",
		Description: `run turns the recipe into a role graph and trains it with the outer loop:
generate a rollout, num_train_passes train steps on it, push weights to the sampler,
evaluate and checkpoint at their cadences. Built-in defaults need nothing to download:
the tiny model and a synthetic task on the CPU.

Everything goes to a run directory (runs/<recipe>-<time>/): config.cue, metrics.jsonl,
events.jsonl, episodes.jsonl and checkpoints/<rollout>/<role>/ in Hugging Face layout.
SIGINT, SIGTERM, SIGHUP or a closed standard output (SIGPIPE) ends the run after the
current rollout with a checkpoint (exit 0); a second SIGINT aborts at once (exit 130, the
checkpoint being written, if any, is left as a temporary directory that resuming removes);
--resume continues it from its last complete checkpoint, with the recipe version in force
there; where the recipe files now differ, the difference is applied as a hot reload.

Hot reload: the recipe files are watched. When an edit is saved, it is checked like
stx vet (with the same --set values) and, at the next rollout boundary, changed hot knobs
(stx knobs) that the engine can take in a running job are applied and recorded in
events.jsonl and recipes/v<N>.cue; changes that need a restart are refused with a message
and an invalid edit is reported with its positions; the run goes on either way.
--no-watch turns watching off. The built-in catalog and a resumed run's own config.cue
are not watched.

Examples:
   stx run recipes.cue -a grpo
   stx run -a sft --set knobs.num_rollout=20 --runs-dir /tmp/runs
   stx run --resume runs/grpo-20260101-120000

Several processes (one per machine; docs/multinode.md): --nodes N --node-rank I
--coordinator HOST:PORT (node 0's address), or the variables of torchrun (WORLD_SIZE,
RANK, MASTER_ADDR, MASTER_PORT), SLURM (SLURM_NTASKS, SLURM_PROCID, with a coordinator)
or an indexed Kubernetes Job (JOB_COMPLETION_INDEX); flags win. Node 0 serves the group's
key-value store; the nodes check that they run the same recipe and create their PJRT
clients as nodes of the group (a GPU plugin: XLA's CPU plugin cannot join processes and is
refused). Training across processes is not implemented yet: the run stops there, non-zero,
on every node. Any node's error or death stops the others.`,
		Flags: append([]cli.Flag{
			recipeFlag(false),
			setFlag(),
			&cli.StringFlag{Name: "runs-dir", Value: "runs", EnvVars: []string{"STX_RUNS_DIR"}, Usage: "where run directories are created (`DIR`)"},
			backendFlag(),
			&cli.StringFlag{Name: "resume", Usage: "continue the run in `RUN_DIR` from its last complete checkpoint"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the result line"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per line (start, each rollout, result)"},
			&cli.BoolFlag{Name: "no-eval-before", Usage: "skip the evaluation before training"},
			&cli.BoolFlag{Name: "no-watch", Usage: "do not watch the recipe files for edits (no hot reload)"},
			&cli.BoolFlag{Name: "tensorboard", Value: true, Usage: "write TensorBoard event files in RUN_DIR/tb/ (--tensorboard=false: none)"},
		}, clusterFlags()...),
		Action: func(c *cli.Context) error {
			if err := checkRunsDir(c.String("runs-dir"), c.String("resume") != ""); err != nil {
				return err
			}
			launch, err := resolveLaunch(c)
			if err != nil {
				return err
			}
			cat, name, err := runRecipe(c)
			if err != nil {
				return err
			}
			if launch.Multi() {
				return runOnNodes(c, launch, cat, name)
			}
			if err := checkPlacement(c, cat); err != nil {
				return err
			}
			ctx, stop := stopOnSignals(c.App.ErrWriter)
			defer stop.stop()
			out := &stopOnBrokenPipe{w: c.App.Writer, stop: stop.request}
			res, err := engine.Run(ctx, cat, name, engine.RunOptions{
				RunsDir: c.String("runs-dir"), Backend: c.String("backend"), Resume: c.String("resume"),
				Quiet: c.Bool("quiet"), JSON: c.Bool("json"), NoEvalBefore: c.Bool("no-eval-before"),
				Out: out, Reload: reloadOptions(c, name), NoTensorBoard: !c.Bool("tensorboard"),
			})
			if err != nil {
				return err
			}
			c.App.Writer = out
			return printResult(c, name, res)
		},
	}
}

// checkRunsDir refuses a runs directory that cannot hold run directories
// before anything is loaded or built: an empty name, or a path that exists
// and is not a directory (/dev/zero, a file). With --resume the run's own
// directory is used.
func checkRunsDir(dir string, resume bool) error {
	if resume {
		return nil
	}
	if strings.TrimSpace(dir) == "" {
		return usagef("--runs-dir is empty: name a directory (default runs)")
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("--runs-dir %s is not a directory", dir)
	}
	return nil
}

// reloadOptions are the files to watch and how to reload them: the files
// named on the command line (or ./recipes.cue, which loading reads when none
// is named), loaded with the same --set values and environment. Nil with
// --no-watch, for the built-in catalog, and for a resumed run's own
// config.cue, which the engine itself writes.
func reloadOptions(c *cli.Context, name string) *engine.ReloadOptions {
	if c.Bool("no-watch") || c.String("algorithm") == "" {
		return nil
	}
	files := c.Args().Slice()
	if len(files) == 0 {
		if _, err := os.Stat("recipes.cue"); err != nil {
			return nil
		}
		files = []string{"recipes.cue"}
	}
	return &engine.ReloadOptions{Files: files, Load: schema.Options{
		Sets: c.StringSlice("set"), Env: os.Environ(), EnvAllow: envAllow, Only: name}}
}

// runRecipe loads the recipe to run. With --resume and no -a, the run's own
// config.cue is the recipe.
func runRecipe(c *cli.Context) (*schema.Catalog, string, error) {
	name := c.String("algorithm")
	if name != "" {
		cat, r, err := loadRecipe(c)
		if err != nil {
			return nil, "", err
		}
		return cat, r.Name, nil
	}
	dir := c.String("resume")
	if dir == "" {
		return nil, "", usagef(`run needs a recipe: -a NAME (or --resume RUN_DIR)`)
	}
	if c.NArg() > 0 {
		return nil, "", usagef("with --resume and no -a, the recipe is the run's config.cue: give no files")
	}
	cat, err := warned(c)(engine.Load([]string{filepath.Join(dir, rundir.ConfigFile)}, schema.Options{
		Sets: c.StringSlice("set"), Env: os.Environ(), EnvAllow: envAllow}))
	if err != nil {
		return nil, "", err
	}
	if len(cat.Names) != 1 {
		return nil, "", fmt.Errorf("%s: want one recipe, found %d", filepath.Join(dir, rundir.ConfigFile), len(cat.Names))
	}
	return cat, cat.Names[0], nil
}

func printResult(c *cli.Context, name string, res *engine.Result) error {
	w := c.App.Writer
	if c.Bool("json") {
		out := map[string]any{"kind": "result", "recipe": name, "dir": res.Dir, "rollouts": res.Rollouts,
			"steps": res.Steps, "interrupted": res.Interrupted}
		if res.FirstVal != nil {
			out["val_first"], out["val_last"] = res.FirstVal, res.LastVal
		}
		if o := res.Objective; o != nil {
			out["objective"] = map[string]any{"name": o.Name, "key": o.Key, "first": o.First, "last": o.Last,
				"lower_is_better": o.Lower, "span": o.Span}
		}
		data, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("result: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	// The closing line reports the recipe's own objective; RL recipes' is validation
	// accuracy, shown with the validation reward.
	acc := ""
	o := res.Objective
	if o != nil && o.Key != "val/accuracy" {
		acc = fmt.Sprintf(", %s (%s, %s)", o.Format(o.First, o.Last), o.Key, o.Span)
		if o.WithAccuracy && res.FirstVal != nil {
			acc += fmt.Sprintf(", val accuracy %.3f → %.3f", res.FirstVal["val/accuracy"], res.LastVal["val/accuracy"])
		}
	} else if res.FirstVal != nil {
		acc = fmt.Sprintf(", val accuracy %.3f → %.3f (reward %.3f → %.3f)", res.FirstVal["val/accuracy"], res.LastVal["val/accuracy"],
			res.FirstVal["val/reward_mean"], res.LastVal["val/reward_mean"])
	}
	state := "done"
	if res.Interrupted {
		state = "interrupted"
	}
	fmt.Fprintf(w, "%s %s: %d rollouts, %d steps%s; run directory %s\n", name, state, res.Rollouts, res.Steps, acc, res.Dir)
	if !c.Bool("quiet") {
		var phases []string
		for p := range res.Phases {
			phases = append(phases, p)
		}
		sort.Strings(phases)
		fmt.Fprint(w, "time:")
		for _, p := range phases {
			fmt.Fprintf(w, " %s %.1fs", p, res.Phases[p].Seconds())
		}
		fmt.Fprintln(w)
	}
	return nil
}
