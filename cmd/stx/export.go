package main

import (
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/encoding/yaml"
	"github.com/urfave/cli/v2"
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
			if form != "cue" && form != "json" && form != "yaml" {
				return usagef("unknown --format %q: use cue, json or yaml", form)
			}
			_, r, err := loadRecipe(c)
			if err != nil {
				return err
			}
			data, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				return fmt.Errorf("export %s: %w", r.Name, err)
			}
			if form == "json" {
				_, err = fmt.Fprintf(c.App.Writer, "%s\n", data)
				return err
			}
			v := cuecontext.New().CompileBytes(data)
			if form == "yaml" {
				out, err := yaml.Encode(v)
				if err != nil {
					return fmt.Errorf("export %s: %w", r.Name, err)
				}
				_, err = c.App.Writer.Write(out)
				return err
			}
			expr, ok := v.Syntax(cue.Concrete(true)).(ast.Expr)
			if !ok {
				return fmt.Errorf("export %s: not an expression", r.Name)
			}
			file := &ast.File{Decls: []ast.Decl{
				&ast.Package{Name: ast.NewIdent("stx")},
				&ast.Field{Label: ast.NewIdent("recipes"), Value: ast.NewStruct(&ast.Field{Label: ast.NewIdent(r.Name), Value: expr})},
			}}
			out, err := format.Node(file)
			if err != nil {
				return fmt.Errorf("export %s: %w", r.Name, err)
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}
