package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/schema"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "print a recipe fully resolved: defaults filled in, overrides applied",
		ArgsUsage: "[FILES... | DIR]",
		Description: `export prints exactly what a run of the recipe would use.

Example:
   stx export recipes.cue -a grpo --set knobs.lr=3e-6 --format json`,
		Flags: []cli.Flag{
			recipeFlag(true),
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "cue", Usage: "cue, json or yaml"},
			setFlag(),
		},
		Action: func(c *cli.Context) error {
			form := c.String("format")
			if !slices.Contains(schema.Syntaxes, form) {
				return usagef("unknown --format %q: use %s", form, strings.Join(schema.Syntaxes, ", "))
			}
			_, r, err := loadRecipe(c)
			if err != nil {
				return err
			}
			out, err := schema.Format(r, form)
			if err != nil {
				return fmt.Errorf("export %s: %w", r.Name, err)
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}
