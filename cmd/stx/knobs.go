package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
	"stx.dev/stx/schema"
)

func knobsCommand() *cli.Command {
	return &cli.Command{
		Name:      "knobs",
		Usage:     "document every knob: meaning, default, range, hot-reloadable, STX_ variable",
		ArgsUsage: "[FILES... | DIR]",
		Description: `knobs is generated from the embedded schema, so it cannot drift from what
vet enforces. "hot" knobs may be changed in the recipe file while a run goes
on; "cold" ones need a restart. With -a, the recipe's own values are shown.

Example:
   stx knobs -a grpo
   STX_LR=3e-6 stx export -a grpo     # any knob from the environment`,
		Flags: []cli.Flag{recipeFlag(false), setFlag()},
		Action: func(c *cli.Context) error {
			docs, err := schema.KnobDocs()
			if err != nil {
				return err
			}
			var values map[string]any
			if name := c.String("algorithm"); name != "" {
				_, r, err := loadRecipe(c)
				if err != nil {
					return err
				}
				data, err := json.Marshal(r.Knobs)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(data, &values); err != nil {
					return err
				}
			}
			enums := engine.Enums()
			w := c.App.Writer
			group := ""
			for _, k := range docs {
				if k.Group != group {
					group = k.Group
					fmt.Fprintf(w, "\n# %s\n\n", group)
				}
				hot := "cold"
				if k.Hot {
					hot = "hot"
				}
				constraint := strings.NewReplacer(
					"#EstimatorName", strings.Join(quoteAll(enums.Estimators), " | "),
				).Replace(k.Constraint)
				env := k.Env()
				if env == "" {
					env = "no environment variable"
				}
				fmt.Fprintf(w, "%s  (%s, %s)\n", k.Name, hot, env)
				fmt.Fprintf(w, "    %s\n", k.Doc)
				def := k.Default
				if def == "" {
					def = "unset"
				}
				fmt.Fprintf(w, "    type: %s   default: %s", constraint, def)
				if values != nil {
					if v, ok := values[k.Name]; ok {
						b, _ := json.Marshal(v)
						fmt.Fprintf(w, "   %s: %s", c.String("algorithm"), b)
					} else {
						fmt.Fprintf(w, "   %s: unset", c.String("algorithm"))
					}
				}
				fmt.Fprintln(w)
			}
			return nil
		},
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
