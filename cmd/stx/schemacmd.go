package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
	"stx.dev/stx/schema"
)

func schemaCommand() *cli.Command {
	return &cli.Command{
		Name:  "schema",
		Usage: "print the CUE schema recipes are checked against",
		Description: `schema prints the schema exactly as vet applies it: knob defaults gathered in
#KnobDefaults and the names of specializations, estimators and tasks closed over
what this binary registers. Saved beside a recipe file, it lets plain cue and
editors check recipes the way stx does.

Example:
   stx schema > stx_schema.cue && cue vet -c stx_schema.cue recipes.cue`,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("schema takes no arguments")
			}
			text, err := schema.Effective(engine.Enums())
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, text)
			return err
		},
	}
}
