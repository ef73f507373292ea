package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
)

func mergeCommand() *cli.Command {
	return &cli.Command{
		Name:      "merge",
		Usage:     "write the full model of a LoRA adapter directory (base + merged adapters)",
		ArgsUsage: "ADAPTER_DIR",
		Description: `merge reads a PEFT adapter directory (adapter_config.json, adapter_model.safetensors:
a LoRA role's checkpoint, runs/<run>/checkpoints/<rollout>/<role>, or one PEFT wrote), opens
its base model (--base, else the adapter's base_model_name_or_path: a model directory or a
Hugging Face Hub id) and writes a Hugging Face model directory whose projections are
W + alpha/r·B·A, in the base's dtypes, with the base's tokenizer files.

Example:
   stx merge runs/grpo-20260101-120000/checkpoints/000009/actor -o merged-actor`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Required: true, Usage: "output model `DIR`"},
			&cli.StringFlag{Name: "base", Usage: "base model `DIR` or Hub id (default: the adapter's base_model_name_or_path)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("merge takes one ADAPTER_DIR, got %q", c.Args().Slice())
			}
			m, err := engine.OpenAdapterModel(c.Context, c.Args().First(), c.String("base"))
			if err != nil {
				return err
			}
			merged, err := m.MergedModel()
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			if err := merged.SaveHF(c.String("output"), 0); err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			lc := m.LoRA()
			fmt.Fprintf(c.App.Writer, "merged the adapters of %d projections (rank %d, targets %v) into %s\n",
				len(m.AdapterParams())/2, lc.Rank, lc.Modules(), c.String("output"))
			return nil
		},
	}
}
