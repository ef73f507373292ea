package schema

import (
	"errors"
	"strings"
	"sync"
)

// Check validates a resolved recipe, one Load returned and perhaps changed
// since (hot knobs applied to a running recipe), with Load's passes and in
// memory: r is rendered with Format and read back as a file of its own.
// That rendering is not a file the user wrote, so where r came from recipe
// files, files and opts name them as they were loaded: errors, and the
// catalog's Pos and FactorPath, then report a path of the recipe where
// Load of those files places it (the user's own line, or the --set that
// set it). The returned catalog holds r, re-decoded, if it is valid.
func Check(r *Recipe, files []string, opts Options) (*Catalog, error) {
	text, err := Format(r, "cue")
	if err != nil {
		return nil, err
	}
	// r is resolved: overrides and the environment are in it already.
	name := r.Name + ".resolved.cue"
	cat, err := Load([]string{name}, Options{
		Enums:   opts.Enums,
		Only:    r.Name,
		Dir:     opts.Dir,
		Sources: map[string][]byte{name: text},
	})
	if cat == nil || len(files) == 0 {
		return cat, err
	}
	opts.Only = r.Name
	cat.at = sync.OnceValue(func() *Catalog {
		at, _ := Load(files, opts)
		return at
	})
	var l List
	if errors.As(err, &l) && cat.origin() != nil {
		prefix := "recipes." + r.Name
		for _, e := range l {
			if e.Path == prefix {
				e.Pos = cat.Pos(r.Name, "")
			} else if rel, ok := strings.CutPrefix(e.Path, prefix+"."); ok {
				e.Pos = cat.Pos(r.Name, rel)
			}
		}
		return cat, l.Sort()
	}
	return cat, err
}

// origin is the catalog of the files a checked recipe came from (nil for
// a catalog of Load, or where those files no longer load).
func (c *Catalog) origin() *Catalog {
	if c.at == nil {
		return nil
	}
	return c.at()
}
