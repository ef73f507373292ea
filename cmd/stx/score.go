package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
)

func scoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "score",
		Usage: "per-token log-probs of token sequences or texts under a model",
		Description: `score reads JSONL records, {"tokens": [ids...]}, {"text": "..."} (tokenized with the
model's tokenizer, BOS first) or {"messages": [{"role": "user", "content": "..."}, ...]}
(a conversation, rendered with the chat template of the model's tokenizer_config.json and
tokenized as it is), and prints one JSON line per record with the log-prob of every token
given the ones before it. The mean NLL and perplexity over all scored tokens go to stderr.

Example:
   stx score --model tiny --data texts.jsonl > scores.jsonl`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "model `DIR` (Hugging Face layout) or built-in config (tiny, bench)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "input `FILE.jsonl`"},
			backendFlag(),
			&cli.IntFlag{Name: "batch", Value: 8, Usage: "records per forward pass (`N`)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of a built-in config's weights"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("score takes no arguments, got %q", c.Args().Slice())
			}
			if c.Int("batch") < 1 {
				return usagef("--batch must be at least 1")
			}
			f, err := os.Open(c.String("data"))
			if err != nil {
				return err
			}
			defer f.Close()
			be, err := runtime.NewBackend(c.String("backend"))
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.ErrWriter, be.Describe())
			spec := c.String("model")
			m, err := runtime.OpenModel(spec, c.Uint64("seed"))
			if err != nil {
				return err
			}
			dir := ""
			if _, builtin := runtime.BuiltinConfig(spec); !builtin {
				dir = spec
			}
			// Text records need a tokenizer and conversations a chat template; token records
			// need neither, so a missing one is only reported when such a record comes. A
			// tokenizer or template that is present but cannot be used is an error now.
			var tok tokenizer.Tokenizer
			if t, err := runtime.ModelTokenizer(m, dir); err == nil {
				tok = t
			} else if !errors.Is(err, fs.ErrNotExist) && dir != "" {
				return err
			}
			var tmpl *chat.Template
			if dir != "" && chat.Has(dir) {
				if tmpl, err = chat.Load(dir); err != nil {
					return err
				}
			}
			sc, err := runtime.NewScorer(be, m)
			if err != nil {
				return err
			}
			sum, err := runtime.ScoreJSONL(f, c.App.Writer, sc, tok, tmpl, c.Int("batch"))
			if err != nil {
				var le *runtime.LineError
				if errors.As(err, &le) {
					return fmt.Errorf("%s:%d: %w", c.String("data"), le.Line, le.Err)
				}
				return fmt.Errorf("%s: %w", c.String("data"), err)
			}
			fmt.Fprintf(c.App.ErrWriter, "records %d, tokens %d, mean NLL %.4f, perplexity %.3f\n",
				sum.Records, sum.Tokens, sum.MeanNLL, sum.Perplexity)
			return nil
		},
	}
}
