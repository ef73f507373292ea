package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

func lsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list recipes with their roles and syncs",
		ArgsUsage: "[FILES... | DIR]",
		Description: `ls prints one row per recipe: its roles as name(specialization) with
flags [frozen] [rollout] [pool=NAME], and its inject syncs.

Example:
   stx ls recipes.cue`,
		Flags: []cli.Flag{setFlag()},
		Action: func(c *cli.Context) error {
			cat, err := loadCatalog(c, "")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RECIPE\tROLES\tSYNCS\tDESCRIPTION")
			for _, name := range cat.Names {
				r := cat.Recipes[name]
				var roles, syncs []string
				for _, role := range r.Roles {
					s := fmt.Sprintf("%s(%s)", role.Name, role.Specialization)
					if !role.Trainable {
						s += "[frozen]"
					}
					if role.SyncToRollout {
						s += "[rollout]"
					}
					if role.Pool != role.Name {
						s += "[pool=" + role.Pool + "]"
					}
					roles = append(roles, s)
				}
				for _, sy := range r.Syncs {
					syncs = append(syncs, fmt.Sprintf("%s.%s→%s.%s", sy.Source, strings.Join(sy.Keys, ","), sy.Target, strings.Join(sy.TargetKeys, ",")))
				}
				if len(syncs) == 0 {
					syncs = []string{"-"}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, strings.Join(roles, " "), strings.Join(syncs, " "), r.Description)
			}
			return tw.Flush()
		},
	}
}
