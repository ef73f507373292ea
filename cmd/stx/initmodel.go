package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/safetensors"
)

func initModelCommand() *cli.Command {
	return &cli.Command{
		Name:      "init-model",
		Usage:     "write a randomly initialised model of a published shape or a config.json",
		ArgsUsage: "DIR",
		Description: `init-model writes a Hugging Face model directory (config.json, model.safetensors) with
random weights, for measuring speed and memory at real scale without downloading a
checkpoint: --shape names a published config (` + strings.Join(runtime.ModelShapeNames(), ", ") + `),
--config reads one. There is no tokenizer: use token-id data (stx score) or stx bench.

Example:
   stx init-model --shape qwen2.5-0.5b --dtype bf16 /tmp/qwen-shape
   stx bench --model /tmp/qwen-shape --batch 1 --seq-len 256 --runs 1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "shape", Usage: "published model `NAME`"},
			&cli.StringFlag{Name: "config", Usage: "a Hugging Face `config.json` instead of --shape"},
			&cli.StringFlag{Name: "dtype", Value: "bf16", Usage: "weight `DTYPE` in the file: f32, bf16, f16"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the weights"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("init-model takes one DIR, got %q", c.Args().Slice())
			}
			dtypes := map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16, "f16": safetensors.F16}
			dt, ok := dtypes[c.String("dtype")]
			if !ok {
				return usagef("--dtype %q is not one of f32, bf16, f16", c.String("dtype"))
			}
			var js []byte
			switch shape, file := c.String("shape"), c.String("config"); {
			case (shape == "") == (file == ""):
				return usagef("init-model needs one of --shape and --config")
			case shape != "":
				_, raw, err := runtime.ModelShape(shape)
				if err != nil {
					return err
				}
				js = raw
			default:
				raw, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				js = raw
			}
			m, err := runtime.InitHF(js, c.Uint64("seed"), dt)
			if err != nil {
				return err
			}
			dir := c.Args().First()
			if err := m.SaveHF(dir, 0); err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, %d parameters as %s\n", dir, m.Config.Architecture, m.Config.NumParams(), dt)
			return nil
		},
	}
}
