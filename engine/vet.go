package engine

import (
	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// Enums closes the schema's name fields over the Go registries, so the
// registries stay the single source of truth for what a recipe may name.
func Enums() schema.Enums {
	return schema.Enums{
		Specializations: specializations.Names(),
		Estimators:      estimators.Names(),
		Tasks:           tasks.Names(),
	}
}

// Load reads and validates recipe files the way every stx command does:
// the schema's two passes, then the graph checks of each valid recipe.
// The returned catalog holds the recipes that passed everything.
func Load(args []string, opts schema.Options) (*schema.Catalog, error) {
	opts.Enums = Enums()
	cat, err := schema.Load(args, opts)
	var errs schema.List
	if err != nil {
		l, ok := err.(schema.List)
		if !ok || cat == nil {
			return cat, err
		}
		errs = l
	}
	for _, name := range cat.Names {
		r, ok := cat.Recipes[name]
		if !ok {
			continue
		}
		_, probs := BuildGraph(r)
		for _, p := range probs {
			if len(p.Factors) > 0 {
				p.Path = cat.FactorPath(name, p.Factors...)
			}
			path := "recipes." + name
			if p.Path != "" {
				path += "." + p.Path
			}
			errs = append(errs, &schema.Error{Pos: cat.Pos(name, p.Path), Path: path, Msg: p.Msg})
		}
		if len(probs) > 0 {
			delete(cat.Recipes, name)
		}
	}
	if len(errs) > 0 {
		return cat, errs.Sort()
	}
	return cat, nil
}
