package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/hub"
)

func pullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "download a Hugging Face Hub model or dataset into the Hugging Face cache",
		ArgsUsage: "ID | hf://datasets/ID/PATH",
		Description: `pull downloads ahead of time what a recipe naming a Hub model or dataset reads, into the
Hugging Face cache that Python's huggingface_hub (transformers, datasets, vLLM) shares:
$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. It prints the snapshot
directory (an hf:// path: its local files), and a line per file downloaded on stderr.

A model (model.source: "Qwen/Qwen2.5-0.5B-Instruct") gets config.json, the generation
config, the tokenizer and chat template files, and its *.safetensors weights (the shards
that model.safetensors.index.json names). A dataset (--dataset; task.dataset) gets the
Parquet files of a config (and split), from the repository at --revision, else from the
Hub's Parquet conversion (refs/convert/parquet). pull always asks the Hub which commit a
branch is now; a run reads the cache first and asks only for what it lacks. An interrupted
download resumes where it stopped.

Environment: HF_TOKEN (a token with access to gated or private repositories; else the
file 'hf auth login' writes), HF_ENDPOINT (a mirror), HF_HUB_OFFLINE=1 (cache only).

Examples:
   stx pull Qwen/Qwen2.5-0.5B-Instruct
   stx pull meta-llama/Llama-3.2-1B-Instruct --revision main
   stx pull --dataset openai/gsm8k --config main --split train
   stx pull 'hf://datasets/openai/gsm8k/main/train-*.parquet'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "revision", Usage: "branch, tag or commit `REV` (default: main; datasets: main, else refs/convert/parquet)"},
			&cli.BoolFlag{Name: "dataset", Usage: "ID is a dataset: download its Parquet files"},
			&cli.StringFlag{Name: "config", Usage: "dataset `CONFIG` (default: \"default\")"},
			&cli.StringFlag{Name: "split", Usage: "dataset `SPLIT` (default: every split of the config)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("pull takes one model or dataset id (or an hf:// path), got %q", c.Args().Slice())
			}
			arg := c.Args().First()
			rev := c.String("revision")
			cl := hub.FromEnv()
			cl.Progress = func(format string, args ...any) { fmt.Fprintf(c.App.ErrWriter, format, args...) }
			ctx := c.Context
			isDataset := c.Bool("dataset")
			if !isDataset && (c.IsSet("config") || c.IsSet("split")) {
				return usagef("--config and --split name a dataset's files: add --dataset")
			}
			switch {
			case hub.IsPath(arg):
				p, err := hub.ParsePath(arg)
				if err != nil {
					return usagef("%v", err)
				}
				if rev != "" {
					if p.Revision != "" && p.Revision != rev {
						return usagef("%s names revision %q, --revision %q", arg, p.Revision, rev)
					}
					p.Revision = rev
				}
				files, err := cl.Files(ctx, p)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, strings.Join(files, "\n"))
			case isDataset:
				if err := hub.CheckRepoID(arg); err != nil {
					return usagef("%v", err)
				}
				files, err := cl.PullDataset(ctx, arg, rev, c.String("config"), c.String("split"))
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, hub.SnapshotRoot(files[0]))
			default:
				if err := hub.CheckRepoID(arg); err != nil {
					return usagef("%v (a dataset needs --dataset)", err)
				}
				dir, err := cl.PullModel(ctx, arg, rev)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, dir)
			}
			return nil
		},
	}
}
