package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"stx.dev/stx"
	"stx.dev/stx/engine"
	"stx.dev/stx/schema"
)

// envAllow are STX_ environment variables that are settings, not knobs.
var envAllow = []string{"STX_BACKEND", "STX_RUNS_DIR", "STX_CACHE_DIR", "STX_PJRT_DIR",
	"STX_NODES", "STX_NODE_RANK", "STX_COORDINATOR", "STX_CLUSTER_HEARTBEAT"} // the last four: cluster.go

func setFlag() cli.Flag {
	return &cli.StringSliceFlag{
		Name:  "set",
		Usage: "override a value: `PATH=VALUE` relative to the recipe (knobs.lr=3e-6) or recipes.NAME.PATH; repeatable",
	}
}

func recipeFlag(required bool) cli.Flag {
	return &cli.StringFlag{
		Name:     "algorithm",
		Aliases:  []string{"a"},
		Usage:    "the recipe `NAME`",
		Required: required,
	}
}

// loadCatalog loads the files named on the command line (default:
// ./recipes.cue, or the built-in catalog when there is none) with the
// command's --set flags and the STX_ environment applied.
func loadCatalog(c *cli.Context, only string) (*schema.Catalog, error) {
	return warned(c)(engine.Load(c.Args().Slice(), schema.Options{
		Sets:     c.StringSlice("set"),
		Env:      os.Environ(),
		EnvAllow: envAllow,
		Only:     only,
		Builtin:  stx.Catalog,
	}))
}

// warned returns a function that prints a loaded catalog's warnings on
// stderr ("warning: $STX_TOP_PP:1:1: ...") and passes the load's results on.
func warned(c *cli.Context) func(*schema.Catalog, error) (*schema.Catalog, error) {
	return func(cat *schema.Catalog, err error) (*schema.Catalog, error) {
		if cat != nil {
			for _, w := range cat.Warnings {
				fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
			}
		}
		return cat, err
	}
}

// loadRecipe loads the catalog and returns one valid recipe.
func loadRecipe(c *cli.Context) (*schema.Catalog, *schema.Recipe, error) {
	name := c.String("algorithm")
	cat, err := loadCatalog(c, name)
	if err != nil {
		return nil, nil, err
	}
	return cat, cat.Recipes[name], nil
}
