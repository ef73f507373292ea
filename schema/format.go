package schema

import (
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/encoding/yaml"
)

// Syntaxes are the forms Format writes a recipe in.
var Syntaxes = []string{"cue", "json", "yaml"}

// Format renders a resolved recipe (defaults filled in, overrides applied)
// in syntax "cue", "json" or "yaml". The CUE form is a recipe file of its
// own, package stx with the recipe under recipes.<name>, that Load reads
// back to the same recipe: run directories record recipe versions in it.
func Format(r *Recipe, syntax string) ([]byte, error) {
	if syntax == "json" {
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", r.Name, err)
		}
		return append(data, '\n'), nil
	}
	if syntax != "cue" && syntax != "yaml" {
		return nil, fmt.Errorf("render %s: unknown syntax %q: use cue, json or yaml", r.Name, syntax)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Name, err)
	}
	v := cuecontext.New().CompileBytes(data)
	if syntax == "yaml" {
		out, err := yaml.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", r.Name, err)
		}
		return out, nil
	}
	expr, ok := v.Syntax(cue.Concrete(true)).(ast.Expr)
	if !ok {
		return nil, fmt.Errorf("render %s: not an expression", r.Name)
	}
	file := &ast.File{Decls: []ast.Decl{
		&ast.Package{Name: ast.NewIdent("stx")},
		&ast.Field{Label: ast.NewIdent("recipes"), Value: ast.NewStruct(&ast.Field{Label: ast.NewIdent(r.Name), Value: expr})},
	}}
	out, err := format.Node(file)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Name, err)
	}
	return out, nil
}
