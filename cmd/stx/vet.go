package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func vetCommand() *cli.Command {
	return &cli.Command{
		Name:      "vet",
		Usage:     "validate recipes: every error, each as file:line:col: path: message",
		ArgsUsage: "[FILES... | DIR]",
		Description: `vet loads the recipes (default: ./recipes.cue) and checks every one of them
against the schema and the role-graph rules, before any tensor is allocated.
Exit status: 0 valid, 1 invalid, 2 usage.

Example:
   stx vet recipes.cue my_recipes.cue --set knobs.lr=3e-6`,
		Flags: []cli.Flag{
			setFlag(),
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing when valid"},
		},
		Action: func(c *cli.Context) error {
			cat, err := loadCatalog(c, "")
			if err != nil {
				return err
			}
			if !c.Bool("quiet") {
				fmt.Fprintf(c.App.Writer, "%d recipes ok\n", len(cat.Names))
			}
			return nil
		},
	}
}
