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
	return checkGraphs(schema.Load(args, opts))
}

// Check validates a resolved recipe as Load validates one read from files
// (schema.Check, in memory); files and opts are those r was loaded with,
// where errors are reported.
func Check(r *schema.Recipe, files []string, opts schema.Options) error {
	opts.Enums = Enums()
	_, err := checkGraphs(schema.Check(r, files, opts))
	return err
}

// checkGraphs adds the graph checks of each recipe of cat that passed the
// schema to err, the schema's problems; a recipe that fails them leaves
// the catalog.
func checkGraphs(cat *schema.Catalog, err error) (*schema.Catalog, error) {
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
			errs = append(errs, cat.Err(name, p.Path, "%s", p.Msg))
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
