package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

func vetCommand() *cli.Command {
	return &cli.Command{
		Name:      "vet",
		Usage:     "validate recipes: every error, each as file:line:col: path: message",
		ArgsUsage: "[FILES... | DIR]",
		Description: `vet loads the recipes (default: ./recipes.cue) and checks every one of them
against the schema and the role-graph rules, before any tensor is allocated.
Roles placed on devices (roles[i].devices) are checked against the device count of the
backend (--backend, $STX_BACKEND or $GOMLX_BACKEND; e.g. cpu:devices=4).
Exit status: 0 valid, 1 invalid, 2 usage.

Example:
   stx vet recipes.cue my_recipes.cue --set knobs.lr=3e-6`,
		Flags: []cli.Flag{
			setFlag(),
			backendFlag(),
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing when valid"},
		},
		Action: func(c *cli.Context) error {
			cat, err := loadCatalog(c, "")
			var errs schema.List
			if err != nil && (!errors.As(err, &errs) || cat == nil) {
				return err
			}
			// The valid recipes' placements are checked too, so that one run of vet lists
			// every error.
			if err := checkPlacement(c, cat); err != nil {
				var more schema.List
				if !errors.As(err, &more) {
					return err
				}
				errs = append(errs, more...)
			}
			if len(errs) > 0 {
				return errs.Sort()
			}
			if !c.Bool("quiet") {
				fmt.Fprintf(c.App.Writer, "%d recipes ok\n", len(cat.Names))
			}
			return nil
		},
	}
}

// checkPlacement checks the devices recipes place roles on against the backend's device
// count; the backend is created only when some role is placed.
func checkPlacement(c *cli.Context, cat *schema.Catalog) error {
	if !engine.Placed(cat) {
		return nil
	}
	be, err := runtime.NewBackend(c.String("backend"))
	if err != nil {
		return fmt.Errorf("checking the roles' devices: %w", err)
	}
	defer be.Finalize()
	return engine.CheckPlacement(cat, be.NumDevices())
}
